package wire

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/mockllm"
)

// meter feeds a body to a UsageMeter a few bytes at a time, as a proxy
// sees it.
func meter(contentType string, body []byte) (contract.Usage, bool) {
	m := NewUsageMeter(contentType)
	for len(body) > 0 {
		n := min(7, len(body))
		m.Feed(body[:n])
		body = body[n:]
	}
	return m.Done()
}

// TestUsageFromEveryAPIShape reads usage from the real mock provider's
// answers: JSON and streams, OpenAI, Responses and Anthropic.
func TestUsageFromEveryAPIShape(t *testing.T) {
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mock)
	defer srv.Close()
	for _, tc := range []struct {
		name, path, body string
		in, out          int64
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"0123456789abcdef"}],"max_tokens":12}`, 0, 12},
		{"chat stream", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"0123456789abcdef"}],"max_tokens":9}`, 0, 9},
		{"completions", "/v1/completions", `{"model":"m","prompt":"0123456789abcdef","max_tokens":5}`, 0, 5},
		{"embeddings", "/v1/embeddings", `{"model":"text-embedding-3-small","input":"0123456789abcdef"}`, 0, 0},
		{"responses", "/v1/responses", `{"model":"m","input":"0123456789abcdef","max_output_tokens":7}`, 0, 7},
		{"responses stream", "/v1/responses", `{"model":"m","stream":true,"input":"0123456789abcdef","max_output_tokens":6}`, 0, 6},
		{"anthropic", "/v1/messages", `{"model":"claude-3-5-haiku","max_tokens":8,"messages":[{"role":"user","content":"0123456789abcdef"}]}`, 0, 8},
		{"anthropic stream", "/v1/messages", `{"model":"claude-3-5-haiku","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"0123456789abcdef"}]}`, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("mock: %d %s", resp.StatusCode, body)
			}
			u, ok := meter(resp.Header.Get("Content-Type"), body)
			if !ok || u.Input < 1 || u.Output != tc.out {
				t.Fatalf("usage %+v found %v in %s", u, ok, body)
			}
		})
	}
}

func TestUsageEdgeCases(t *testing.T) {
	if _, ok := meter("application/json", []byte(`{"id":"x","choices":[]}`)); ok {
		t.Error("usage found in a body without one")
	}
	if _, ok := meter("application/json", []byte(`{"usage": {"prompt_tokens": 3,`)); ok {
		t.Error("usage found in a truncated body")
	}
	if _, ok := meter("text/event-stream", []byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n")); ok {
		t.Error("usage found in a stream without one")
	}
	u, ok := meter("application/json", []byte(`{"usage":{"prompt_tokens":100,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":60}}}`))
	if !ok || u != (contract.Usage{Input: 100, CachedInput: 60, Output: 20}) {
		t.Errorf("OpenAI cached tokens: %+v", u)
	}
	u, ok = meter("text/event-stream", []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":40,\"cache_read_input_tokens\":60,\"output_tokens\":1}}}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":25}}\n\n"))
	if !ok || u != (contract.Usage{Input: 100, CachedInput: 60, Output: 25}) {
		t.Errorf("Anthropic stream with cache reads: %+v", u)
	}
	big := `{"usage":{"prompt_tokens":1,"completion_tokens":1},"pad":"` + strings.Repeat("x", maxUsageBody) + `"}`
	if _, ok := meter("application/json", []byte(big)); ok {
		t.Error("a body over the limit was kept whole")
	}
}

// streamChunk is an OpenAI chat chunk of a stream with include_usage:
// "usage":null on every chunk but the last.
const streamChunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}],"usage":null}` + "\n\n"

// TestUsageNullChunksAreNotParsed: the chunks that say "usage":null (or
// mention usage only inside a string) cost no parse and no allocation;
// the chunk with the usage object is read, in any spacing.
func TestUsageNullChunksAreNotParsed(t *testing.T) {
	m := NewUsageMeter("text/event-stream")
	chunk := []byte(streamChunk)
	if allocs := testing.AllocsPerRun(100, func() { m.Feed(chunk) }); allocs != 0 {
		t.Errorf("a usage:null chunk: %v allocations, want 0", allocs)
	}
	for _, tc := range []struct {
		data string
		want bool
	}{
		{`{"usage":null}`, false},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, true},
		{`{"usage" :` + "\n\t" + `{"prompt_tokens":1}}`, true},
		{`{"type":"message_start","message":{"usage":{"input_tokens":3}}}`, true},
		{`{"response":{"usage":null}}`, false},
		{`{"text":"usage"}`, false},
	} {
		if got := carriesUsage([]byte(tc.data)); got != tc.want {
			t.Errorf("carriesUsage(%s) = %v, want %v", tc.data, got, tc.want)
		}
	}
	m.Feed([]byte("data: {\"choices\":[],\"usage\" : {\"prompt_tokens\":5,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n"))
	if u, ok := m.Done(); !ok || u.Input != 5 || u.Output != 7 {
		t.Errorf("usage %+v, %v; want 5 in, 7 out", u, ok)
	}
}

// BenchmarkUsageMeterChunk is the meter's work per streamed chunk: a
// chunk without usage, as every chunk of a stream but its last.
func BenchmarkUsageMeterChunk(b *testing.B) {
	m := NewUsageMeter("text/event-stream")
	chunk := []byte(streamChunk)
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		m.Feed(chunk)
	}
}
