package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// rawExchange sends head, then body, on a fresh TCP connection; closeWrite
// half-closes the connection after the body (a client that is cut off),
// otherwise the connection stays open and silent (a client that stalls).
// It returns the answer.
func rawExchange(t *testing.T, addr, head, body string, closeWrite bool) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// leaks matches what an error body must never carry: a socket address
// (IPv4 or bracketed IPv6 with a port) or Go's own error wording.
var leaks = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+|\[[0-9a-fA-F:.]+\]:\d+|read tcp|i/o timeout|EOF|unexpected|malformed chunk|multipart:|invalid character|json:`)

// TestBodyErrorsSayNothingOfTheSocket sends every way to stall, cut or
// malform a body, over real TCP, to a chat completion, to POST /v1/files
// and to POST /v1/batches: each is a 4xx JSON error whose body names what
// went wrong in the caller's terms, never an address or a Go error string.
func TestBodyErrorsSayNothingOfTheSocket(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Server.ReadBodyTimeout = config.Duration(300 * time.Millisecond)
	s := serve(t, cfg)
	addr := strings.TrimPrefix(s.url, "http://")

	const boundary = "XyZ"
	form := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n" +
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[]}}` + "\n"
	routes := []struct {
		path, ctype, partial, malformed string
	}{
		{"/v1/chat/completions", "application/json", `{"model":"gpt-4o-mini","messages":[`, `{"model":"gpt-4o-mini",`},
		{"/v1/files", "multipart/form-data; boundary=" + boundary, form, form}, // malformed: no closing boundary
		{"/v1/batches", "application/json", `{"input_file_id":"file-`, `{"input_file_id":`},
	}
	head := func(path, ctype, framing string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme\r\nContent-Type: " + ctype + "\r\n" + framing + "\r\n"
	}
	chunk := func(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }
	for _, rt := range routes {
		sized := "Content-Length: " + strconv.Itoa(len(rt.partial)+1000) + "\r\n"
		chunked := "Transfer-Encoding: chunked\r\n"
		cases := []struct {
			name, framing, body string
			closeWrite          bool
			status              int
		}{
			{"stalled, sized", sized, rt.partial, false, http.StatusRequestTimeout},
			{"stalled, chunked", chunked, chunk(rt.partial), false, http.StatusRequestTimeout},
			{"stalled before a byte", sized, "", false, http.StatusRequestTimeout},
			{"cut, sized", sized, rt.partial, true, http.StatusBadRequest},
			{"cut, chunked", chunked, chunk(rt.partial), true, http.StatusBadRequest},
			{"cut inside a chunk", chunked, "400\r\n" + rt.partial, true, http.StatusBadRequest},
			{"broken chunk size", chunked, "zz\r\n" + rt.partial, false, http.StatusBadRequest},
			{"malformed", "Content-Length: " + strconv.Itoa(len(rt.malformed)) + "\r\n", rt.malformed, false, http.StatusBadRequest},
		}
		for _, c := range cases {
			t.Run(rt.path+"/"+c.name, func(t *testing.T) {
				resp, body := rawExchange(t, addr, head(rt.path, rt.ctype, c.framing), c.body, c.closeWrite)
				if resp.StatusCode != c.status {
					t.Errorf("status %d, want %d: %s", resp.StatusCode, c.status, body)
				}
				if m := leaks.FindString(body); m != "" {
					t.Errorf("the body carries %q: %s", m, body)
				}
				if !strings.Contains(body, `"message"`) {
					t.Errorf("not a JSON error: %s", body)
				}
			})
		}
	}
}

// TestTooLargeBeforeReading: a Content-Length over the route's limit is
// a 413 naming the limit before any of the body is read (the body here
// never comes, so an answer at all shows nothing waited for it), and a
// chunked body that passes the limit while read is a 413 too.
func TestTooLargeBeforeReading(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := batchConfig(t, up.URL)
	cfg.Limits.MaxBodyBytes = 64 << 10
	cfg.Batch.MaxFileBytes = 1 << 20
	cfg.Server.ReadBodyTimeout = config.Duration(30 * time.Second) // nothing may wait for it
	s := serve(t, cfg)
	addr := strings.TrimPrefix(s.url, "http://")
	head := func(path, ctype, framing string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme\r\nContent-Type: " + ctype + "\r\n" + framing + "\r\n"
	}
	const boundary = "XyZ"
	multipart := "multipart/form-data; boundary=" + boundary
	for _, c := range []struct{ path, ctype, limit string }{
		{"/v1/chat/completions", "application/json", "limits.max_body_bytes (65536 bytes)"},
		{"/v1/files", multipart, "batch.max_file_bytes (1048576 bytes)"},
		{"/v1/batches", "application/json", "(65536 bytes)"},
	} {
		t.Run(c.path+"/declared", func(t *testing.T) {
			start := time.Now()
			resp, body := rawExchange(t, addr, head(c.path, c.ctype, "Content-Length: 209715200\r\n"), "", false)
			took := time.Since(start)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, c.limit) {
				t.Errorf("%d %s; want 413 naming %s", resp.StatusCode, body, c.limit)
			}
			if took > 100*time.Millisecond {
				t.Errorf("answered after %v, want under 100ms", took)
			}
		})
		t.Run(c.path+"/chunked", func(t *testing.T) {
			payload := strings.Repeat("a", 3<<20)
			if c.path == "/v1/files" {
				payload = "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n" + payload
			}
			var b strings.Builder
			for len(payload) > 0 {
				n := min(len(payload), 32<<10)
				b.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n" + payload[:n] + "\r\n")
				payload = payload[n:]
			}
			resp, body := rawExchange(t, addr, head(c.path, c.ctype, "Transfer-Encoding: chunked\r\n"), b.String(), true)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, c.limit) {
				t.Errorf("%d %s; want 413 naming %s", resp.StatusCode, body, c.limit)
			}
		})
	}
}

// TestUploadBodyDeadlineIsTheUploads: the body deadline of POST /v1/files
// is derived from batch.max_file_bytes, every other one from
// limits.max_body_bytes.
func TestUploadBodyDeadlineIsTheUploads(t *testing.T) {
	g, _ := startGateway(t, batchConfig(t, "http://127.0.0.1:1"))
	for _, c := range []struct {
		method, path string
		want         int64
	}{
		{"POST", "/v1/files", 101 << 20},
		{"GET", "/v1/files", 10 << 20},
		{"POST", "/v1/chat/completions", 10 << 20},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		if got := g.maxBodyBytes(r); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
		}
	}
}
