package mockllm

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newServer builds a Server and closes it when the test ends.
func newServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(s.Close)
	return s
}

// chatBody is a chat completion request body.
func chatBody(model, prompt string, maxTokens int, stream bool) string {
	req := map[string]any{
		"model":    model,
		"messages": []map[string]any{{"role": "user", "content": prompt}},
	}
	if maxTokens > 0 {
		req["max_tokens"] = maxTokens
	}
	if stream {
		req["stream"] = true
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// newReq builds a request for s.ServeHTTP with ctx and optional header
// pairs.
func newReq(ctx context.Context, path, body string, header ...string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// result is one handler run: its recorder and when it returned, relative
// to the start of the test.
type result struct {
	rec     *httptest.ResponseRecorder
	elapsed time.Duration
}

// serveAsync runs the handler on its own goroutine and reports on the
// returned channel when it is done.
func serveAsync(s *Server, r *http.Request, start time.Time) <-chan result {
	done := make(chan result, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		done <- result{rec, time.Since(start)}
	}()
	return done
}

// post sends body to url+path over real HTTP and returns the response.
func post(t *testing.T, client *http.Client, url, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// decode reads a JSON body into a generic map.
func decode(t *testing.T, r io.Reader) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		t.Fatalf("decoding JSON body: %v", err)
	}
	return m
}

// sse is one parsed server-sent event.
type sse struct {
	name string
	data string
}

// readEvent reads the next event from a stream, or returns false at EOF.
func readEvent(br *bufio.Reader) (sse, bool) {
	var ev sse
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "" && ev.data != "":
			return ev, true
		}
		if err != nil {
			return ev, false
		}
	}
}

// readEvents reads a whole stream.
func readEvents(t *testing.T, r io.Reader) []sse {
	t.Helper()
	br := bufio.NewReader(r)
	var evs []sse
	for {
		ev, ok := readEvent(br)
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

// field walks a decoded JSON value by keys and indexes, failing the test
// when the path does not exist.
func field(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("path %v: %v is not an object", path, v)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("path %v: no key %q in %v", path, k, m)
			}
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("path %v: no index %d in %v", path, k, v)
			}
			v = a[k]
		}
	}
	return v
}

// num is field for numbers.
func num(t *testing.T, v any, path ...any) int {
	t.Helper()
	f, ok := field(t, v, path...).(float64)
	if !ok {
		t.Fatalf("path %v: not a number", path)
	}
	return int(f)
}
