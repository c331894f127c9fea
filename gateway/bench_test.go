package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/mockllm"
)

// BenchmarkRoundTrip compares one chat completion sent straight to a
// zero-latency mock provider with the same call through the gateway, over
// real loopback HTTP with keep-alive connections; the difference is the
// gateway's overhead per request (sequential: latency, not throughput).
func BenchmarkRoundTrip(b *testing.B) {
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	up := httptest.NewServer(mock)
	defer up.Close()
	g, err := New(Config{Upstream: UpstreamConfig{URL: up.URL}, Admission: AdmissionConfig{Concurrency: 64, MaxQueue: 64}},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	gw := httptest.NewServer(g)
	defer gw.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, target := range []struct{ name, url string }{{"direct", up.URL}, {"gateway", gw.URL}} {
		b.Run(target.name, func(b *testing.B) {
			b.ReportAllocs()
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
		})
	}
}
