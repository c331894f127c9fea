package gateway

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// sseUpstream is a provider whose streams write a chunk each time the
// test sends on their channel: a stream's pace is the benchmark's.
type sseUpstream struct {
	streams chan chan struct{} // each new stream's trigger
}

const benchChunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}],"usage":null}` + "\n\n"

func (u *sseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	next := make(chan struct{})
	u.streams <- next
	for {
		select {
		case <-r.Context().Done():
			return
		case _, ok := <-next:
			if !ok {
				_, _ = w.Write([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"))
				return
			}
			if _, err := w.Write([]byte(benchChunk)); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// BenchmarkStreamChunk is one streamed chunk through the proxy, over real
// loopback HTTP: the provider writes it, the client reads it. allocs/op
// and B/op are the whole process's per chunk (provider, proxy and client),
// the same for every target but the proxy's own part; "reverseproxy" is
// the bare httputil.ReverseProxy (as scripts/bareproxy), so the
// difference is sluice's. held-B/stream is the heap and stacks the
// process holds per open stream (200 open, after a GC), again the client's
// and the provider's included; stack-B/stream the stacks' part of it.
func BenchmarkStreamChunk(b *testing.B) {
	for _, name := range []string{"reverseproxy", "gateway"} {
		b.Run(name, func(b *testing.B) {
			u := &sseUpstream{streams: make(chan chan struct{}, 1024)}
			up := httptest.NewServer(u)
			defer up.Close()
			var target http.Handler
			if name == "gateway" {
				g, err := New(config.Config{Upstream: config.UpstreamConfig{URL: up.URL}, Admission: config.AdmissionConfig{Concurrency: 1024, MaxQueue: new(0)}}, testOptions())
				if err != nil {
					b.Fatal(err)
				}
				target = g
			} else {
				upURL, _ := url.Parse(up.URL)
				target = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) }, Transport: newTransport(1024), BufferPool: barePool{}}
			}
			proxy := httptest.NewServer(target)
			defer proxy.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
			defer client.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			open := func() (chan struct{}, *bufio.Reader) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, proxy.URL+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("opening a stream: %v %v", err, resp)
				}
				return <-u.streams, bufio.NewReader(resp.Body)
			}

			// The memory held per open stream.
			const held = 200
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range held {
				open()
			}
			time.Sleep(100 * time.Millisecond) // let the streams' goroutines park
			runtime.GC()
			runtime.ReadMemStats(&after)
			perStream := float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / held

			next, br := open()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				next <- struct{}{}
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					if len(line) == 1 { // the blank line that ends the event
						break
					}
				}
			}
			b.ReportMetric(perStream, "held-B/stream")
			b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/held, "stack-B/stream")
		})
	}
}
