package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/mockllm"
)

// BenchmarkRoundTrip compares one chat completion sent straight to a
// zero-latency mock provider with the same call through the gateway, over
// real loopback HTTP with keep-alive connections; the difference is the
// gateway's overhead per request (sequential: latency, not throughput). The
// "reverseproxy" case is a bare httputil.ReverseProxy with the gateway's
// transport: the difference between it and "gateway" is sluice's own work.
func BenchmarkRoundTrip(b *testing.B) {
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	up := httptest.NewServer(mock)
	defer up.Close()
	g, err := New(Config{Upstream: UpstreamConfig{URL: up.URL}, Admission: AdmissionConfig{Concurrency: 64, MaxQueue: new(64)}},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	gw := httptest.NewServer(g)
	defer gw.Close()
	// The floor for anything built on httputil.ReverseProxy: the proxy
	// alone, with the gateway's transport and buffer pool and nothing of
	// sluice (as scripts/bareproxy).
	upURL, _ := url.Parse(up.URL)
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
		Transport:  newTransport(64),
		BufferPool: bufferPool{},
	})
	defer bare.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, target := range []struct{ name, url string }{{"direct", up.URL}, {"reverseproxy", bare.URL}, {"gateway", gw.URL}} {
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
