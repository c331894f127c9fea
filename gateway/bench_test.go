package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/observe"
	"github.com/sluicehq/sluice/mockllm"
)

// BenchmarkRoundTrip compares one chat completion sent straight to a
// zero-latency mock provider with the same call through the gateway, over
// real loopback HTTP with keep-alive connections; the difference is the
// gateway's overhead per request (sequential: latency, not throughput). The
// "reverseproxy" case is a bare httputil.ReverseProxy with the gateway's
// transport: the difference between it and "gateway" is sluice's own work.
// Every gateway writes its access-log line (text, to io.Discard); "noop-tracer"
// is the gateway given a noop TracerProvider, "traced" one given the real
// SDK, sampling every request, with a batch span processor to an exporter
// that discards the spans: the difference to "gateway" is the cost of
// tracing.
func BenchmarkRoundTrip(b *testing.B) {
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	up := httptest.NewServer(mock)
	defer up.Close()
	gateway := func(tp trace.TracerProvider) string {
		g, err := New(config.Config{Upstream: config.UpstreamConfig{URL: up.URL}, Admission: config.AdmissionConfig{Concurrency: 64, MaxQueue: new(64)}},
			Options{Logger: observe.LogConfig{}.Logger(io.Discard), TracerProvider: tp})
		if err != nil {
			b.Fatal(err)
		}
		gw := httptest.NewServer(g)
		b.Cleanup(gw.Close)
		return gw.URL
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
	defer tp.Shutdown(context.Background())
	// The floor for anything built on httputil.ReverseProxy: the proxy
	// alone, with the gateway's transport and buffer pool and nothing of
	// sluice (as scripts/bareproxy).
	upURL, _ := url.Parse(up.URL)
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
		Transport:  newTransport(64),
		BufferPool: barePool{},
	})
	defer bare.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, target := range []struct{ name, url string }{{"direct", up.URL}, {"reverseproxy", bare.URL}, {"gateway", gateway(nil)},
		{"noop-tracer", gateway(noop.NewTracerProvider())}, {"traced", gateway(tp)}} {
		b.Run(target.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, target.url+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			if cpu > 0 {
				b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkAccessLine is the work of one access-log line on its own: the
// fields of an admitted, priced call written by the text and JSON handlers
// to io.Discard, and by the text handler to a file, as `sluice serve`
// writes its standard error: one write(2) a line.
func BenchmarkAccessLine(b *testing.B) {
	for _, format := range []string{observe.LogFormatText, observe.LogFormatJSON, "text-file"} {
		b.Run(format, func(b *testing.B) {
			cfg := baseConfig("http://127.0.0.1:1")
			cfg.Spend = testSpend()
			var out io.Writer = io.Discard
			if format == "text-file" {
				f, err := os.Create(filepath.Join(b.TempDir(), "access.log"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				format, out = observe.LogFormatText, f
			}
			g, err := New(cfg, Options{Logger: observe.LogConfig{Format: format}.Logger(out)})
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			x := &exchange{r: r, start: time.Now(), id: newRequestID(), status: 200, tenant: "acme", classAsked: "interactive",
				modelAsked: "gpt-4o", route: "/v1/chat/completions"}
			// An admitted call, as the line is written for: its permit
			// names its pool, whose deployment the line reports.
			permit, err := g.chain.Acquire(b.Context(), chain.Request{Class: "interactive", Model: "gpt-4o", Unpriced: true})
			if err != nil {
				b.Fatal(err)
			}
			defer permit.Drop()
			x.call = &call{g: g, permit: permit, class: "interactive", model: "gpt-4o", queue: 3 * time.Millisecond, attempts: 1,
				outcome: chain.Outcome{ServiceTime: 420 * time.Millisecond, Usage: contract.Usage{Input: 812, Output: 96}, UsageKnown: true}}
			b.ReportAllocs()
			for b.Loop() {
				g.end(x)
			}
		})
	}
}

// barePool is scripts/bareproxy's buffer pool: 32 KiB copy buffers,
// recycled.
type barePool struct{}

func (barePool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (barePool) Put(b []byte) { copyBuffers.Put(&b) }
