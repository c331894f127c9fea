package mockllm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The benchmarks measure the mock's own overhead with a zero service time,
// which is what a gateway benchmark pays on top of the proxying.

var benchBody = chatBody("gpt-4o-mini", "A prompt of a realistic length for a chat request, a sentence or two long.", 64, false)

func benchHandler(b *testing.B, cfg Config, body string) {
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, newReq(context.Background(), PathChatCompletions, body))
			if rec.Code != http.StatusOK {
				b.Errorf("status %d", rec.Code)
				return
			}
		}
	})
}

func BenchmarkHandlerChat(b *testing.B) { benchHandler(b, Config{}, benchBody) }

func BenchmarkHandlerChatSlots(b *testing.B) { benchHandler(b, Config{Slots: 1}, benchBody) }

func BenchmarkHandlerChatStream(b *testing.B) {
	benchHandler(b, Config{}, chatBody("gpt-4o-mini", "A prompt.", 64, true))
}

func BenchmarkHTTPChat(b *testing.B) {
	s, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.Close()
	client := ts.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(ts.URL+PathChatCompletions, "application/json", strings.NewReader(benchBody))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
