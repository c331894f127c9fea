package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
)

// startGateway runs a gateway on loopback in front of upstream.
func startGateway(t *testing.T, cfg config.Config) (*Gateway, *httptest.Server) {
	t.Helper()
	g, err := New(cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv
}

// testOptions discard the logs and give TEST_PROVIDER_KEY a provider key.
func testOptions() Options {
	return Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Getenv: func(k string) string {
		if k == "TEST_PROVIDER_KEY" {
			return "sk-provider-secret"
		}
		return ""
	}}
}

// served is a gateway served by a Server (both listeners, the connection
// policy, the dashboard's sampler) on loopback until stop or the end of
// the test.
type served struct {
	g          *Gateway
	url, admin string
	stop       func() error
}

func serve(t *testing.T, cfg config.Config) *served {
	t.Helper()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownGrace = config.Duration(5 * time.Second)
	// The shedding on a saturated CPU reads the whole process, and here
	// the process is also the test's callers and provider, under the
	// race detector on a shared machine: it would shed for their load.
	// Its own tests (saturated_test.go) drive it with time as an input.
	cfg.Server.Saturation.Disabled = true
	g, err := New(cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &served{g: g, url: "http://" + srv.API.Addr().String(), admin: "http://" + srv.Admin.Addr().String(), stop: stop}
}

func baseConfig(upstream string) config.Config {
	return config.Config{
		Upstream:  config.UpstreamConfig{URL: upstream},
		Admission: config.AdmissionConfig{Concurrency: 4, MaxQueue: new(16)},
	}
}

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`

// post sends a chat completion with the given headers.
func post(t *testing.T, ctx context.Context, url string, body string, headers map[string]string) *http.Response {
	t.Helper()
	return postPath(t, ctx, url, "/v1/chat/completions", body, headers)
}

// readAll reads and closes a response body.
func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeError(t *testing.T, b []byte) contract.ErrorDetail {
	t.Helper()
	var e contract.ErrorBody
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", b, err)
	}
	return e.Error
}

func counter(t *testing.T, g *Gateway, name string, labels ...string) float64 {
	t.Helper()
	switch name {
	case "attempts":
		return testutil.ToFloat64(g.metrics.attempts.WithLabelValues(labels...))
	case "rejections":
		return testutil.ToFloat64(g.metrics.rejections.WithLabelValues(labels...))
	case "admissions":
		return testutil.ToFloat64(g.metrics.admissions.WithLabelValues(labels...))
	case "failovers":
		return testutil.ToFloat64(g.metrics.failovers.WithLabelValues(labels...))
	case "degraded":
		return testutil.ToFloat64(g.metrics.degraded.WithLabelValues(labels...))
	case "sluice_calls_ended_total":
		for e := endCompleted; e < numEndings; e++ {
			if e.String() == labels[0] {
				return testutil.ToFloat64(g.metrics.ended[e])
			}
		}
	}
	t.Fatalf("unknown counter %s", name)
	return 0
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	b := readAll(t, resp)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("status %d body %q: %v", resp.StatusCode, b, err)
	}
}

func testutilValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// measuresThroughput skips a test that checks a throughput or latency
// floor over real HTTP under the race detector: it would measure the
// detector instead (and, in the race run of every package at once, the
// other packages' tests beside it). .ci/run runs it without.
func measuresThroughput(t *testing.T) {
	t.Helper()
	if testkit.Race {
		t.Skip("measures throughput over real HTTP: run without -race (.ci/run)")
	}
}
