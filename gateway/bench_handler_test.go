package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/observe"
	"github.com/sluicehq/sluice/mockllm"
)

// handlerTransport serves upstream calls with a handler in memory.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// BenchmarkServeHTTP is the gateway's handler alone: one chat completion
// through ServeHTTP to the mock provider called in memory, no sockets, so
// that what is measured is the handler's own work (and the mock's, the
// same in every case) and not the loopback's or the scheduler's, which
// BenchmarkRoundTrip's figures on a shared machine are mostly made of.
// "noop-tracer" and "traced" are as in BenchmarkRoundTrip. The access
// line is written by the logger `sluice serve` builds by default (text),
// to io.Discard.
func BenchmarkServeHTTP(b *testing.B) {
	for _, name := range []string{"gateway", "noop-tracer", "traced", "pools"} {
		b.Run(name, func(b *testing.B) { benchServeHTTP(b, name) })
	}
}

// benchServeHTTP is BenchmarkServeHTTP's case name, for it and for
// TestHandlerAllocsWithinBaseline.
func benchServeHTTP(b *testing.B, name string) {
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
	defer tp.Shutdown(b.Context())
	single := config.Config{Upstream: config.UpstreamConfig{URL: "http://provider.invalid"}, Admission: config.AdmissionConfig{Concurrency: 64, MaxQueue: new(64)}}
	// "pools": upstreams, two deployments of three models each; the model
	// called has a tpm bucket, charged and reconciled on every call.
	models := []config.ModelConfig{{Name: "gpt-4.1"}, {Name: "gpt-4o"}, {Name: "gpt-4o-mini", TPM: 1e12}}
	pools := config.Config{Upstreams: []config.DeploymentConfig{
		{Name: "east", URL: "http://provider.invalid", Concurrency: 64, Models: models},
		{Name: "west", URL: "http://provider.invalid", Concurrency: 64, Models: models}}, Admission: config.AdmissionConfig{MaxQueue: new(64)}}
	for _, tc := range []struct {
		name string
		cfg  config.Config
		tp   trace.TracerProvider
	}{{"gateway", single, nil}, {"noop-tracer", single, noop.NewTracerProvider()}, {"traced", single, tp}, {"pools", pools, nil}} {
		if tc.name != name {
			continue
		}
		func() {
			g, err := New(tc.cfg,
				Options{Logger: observe.LogConfig{}.Logger(io.Discard), Transport: handlerTransport{mock}, TracerProvider: tc.tp})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				g.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			if cpu > 0 {
				b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N), "cpu-ns/op")
			}
		}()
	}
}
