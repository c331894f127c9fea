package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/dashboard"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// TestDashboardReading: the dashboard reads the gateway's gate, its
// refusal counter and its classes (package dashboard tests the ring, the
// interval's counts and the status themselves). Time is an input: Sample
// takes it.
func TestDashboardReading(t *testing.T) {
	g, _ := startGateway(t, baseConfig("http://127.0.0.1:1"))
	s := g.metrics.dash
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d := s.Sample(t0); d.Status.Level != "ok" || d.Concurrency != 4 || len(d.Depth) != 6 || len(d.WaitMs) != 6 || d.Spend != nil ||
		len(d.Pools) != 1 || d.Pools[0].Concurrency != 4 {
		t.Fatalf("first sample: %+v", d)
	}
	g.metrics.rejections.WithLabelValues("queue_full", "interactive", "").Add(3)
	g.metrics.rejections.WithLabelValues("spend_ceiling", "batch", "").Inc()
	d := s.Sample(t0.Add(time.Second))
	if d.RefusedReason["queue_full"] != 3 || d.RefusedReason["spend_ceiling"] != 1 || d.RefusedClass["interactive"] != 3 ||
		d.ShedClass["interactive"] != 3 || d.ShedClass["batch"] != 0 {
		t.Fatalf("the interval's refusals: reason %v class %v shed %v", d.RefusedReason, d.RefusedClass, d.ShedClass)
	}
	if d.Status.Level != "crit" || !strings.HasPrefix(d.Status.Text, "Interactive work is being shed") {
		t.Fatalf("status after interactive refusals: %+v", d.Status)
	}
	h := s.History()
	if len(h.Samples) != 2 || h.Samples[0].Time != t0.UnixMilli() {
		t.Fatalf("history: %d samples, first at %d", len(h.Samples), h.Samples[0].Time)
	}
	if c := h.Meta.Classes[admission.ClassInteractive]; c.DefaultTimeoutMs != 30000 || c.Rank != 4 || h.Meta.Spend != nil {
		t.Fatalf("meta: %+v", h.Meta)
	}
}

// TestDashboardEventsFollowServe: /admin/v1/events sends the history, then
// a sample a second; stopping Serve ends the stream and the sampler, with
// no goroutine left behind.
func TestDashboardEventsFollowServe(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Get("http://" + srv.Admin.Addr().String() + "/admin/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	event, data := readEvent(t, r)
	var h dashboard.History
	if err := json.Unmarshal(data, &h); event != "history" || err != nil {
		t.Fatalf("first event %q: %v", event, err)
	}
	if h.Meta.Classes[admission.ClassInteractive].Rank != 4 || h.Meta.EverySeconds != 1 {
		t.Fatalf("meta: %+v", h.Meta)
	}
	event, data = readEvent(t, r)
	var d dashboard.Sample
	if err := json.Unmarshal(data, &d); event != "" || err != nil || d.Concurrency != 4 || d.Status.Text == "" {
		t.Fatalf("second event %q %s: %v", event, data, err)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the stream did not end with Serve: %v", err)
	}
}

// readEvent reads one server-sent event: its name ("" for a message) and
// data.
func readEvent(t *testing.T, r *bufio.Reader) (string, []byte) {
	t.Helper()
	var event string
	var data []byte
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the event stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: ")...)
		}
	}
}

// TestAdminServesDashboard: the admin handler serves the dashboard's page,
// assets and history (package dashboard tests them in full).
func TestAdminServesDashboard(t *testing.T) {
	g, _ := startGateway(t, baseConfig("http://127.0.0.1:1"))
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	for path, ctype := range map[string]string{
		"/":                 "text/html",
		"/dashboard/app.js": "text/javascript",
		"/favicon.ico":      "image/svg+xml",
		"/admin/v1/history": "application/json",
	} {
		resp, err := http.Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), ctype)
		}
	}
}

// TestClassEstimatedWaitMetric: each class's estimated wait is exported by
// class, for the alert that compares it with the measured queue time.
func TestClassEstimatedWaitMetric(t *testing.T) {
	g, _ := startGateway(t, baseConfig("http://127.0.0.1:1"))
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	body := string(readAll(t, must(http.Get(admin.URL+"/metrics"))))
	for _, class := range []string{"interactive", "batch", "speculative"} {
		if !strings.Contains(body, `sluice_class_estimated_wait_seconds{class="`+class+`"} 0`) {
			t.Errorf("no estimated wait for class %s in /metrics", class)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// definedWhen lists the metrics the monitoring examples use that a
// gateway exports only under a condition this test does not set up.
var definedWhen = map[string]string{
	"sluice_store_up":            "a shared store is configured",
	"sluice_cluster_local_share": "the replicas lease the concurrency on Redis",
}

// TestMonitoringMetricsExist: every metric the example alerts and the
// Grafana dashboard use is one the gateway exports on /metrics, with a
// spend section and after a served and a refused request.
func TestMonitoringMetricsExist(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	cfg.Spend.CeilingPerHour = 12 * c / 0.92 // after one call: the degrade stage (see TestSpendLadderAndShedOrder)
	cfg.Spend.AlertPerHour = 12 * c / 2
	g, gw := startGateway(t, cfg)
	if resp := post(t, t.Context(), gw.URL, bigModelBody, nil); resp.StatusCode != 200 {
		t.Fatalf("first call: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		readAll(t, resp)
	}
	if resp := post(t, t.Context(), gw.URL, bigModelBody, map[string]string{contract.HeaderPriority: "speculative"}); resp.StatusCode != 503 {
		t.Fatalf("speculative call: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		readAll(t, resp)
	}
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	exported := map[string]bool{}
	for _, line := range strings.Split(string(readAll(t, must(http.Get(admin.URL+"/metrics")))), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			exported[f[2]] = true
		}
	}
	name := regexp.MustCompile(`\bsluice_[a-zA-Z0-9_]+`)
	for _, file := range []string{"../examples/prometheus/alerts.yaml", "../examples/grafana/sluice.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, m := range name.FindAllString(string(b), -1) {
			used[m] = true
		}
		if len(used) < 5 {
			t.Fatalf("%s uses only %d sluice metrics: is the file read whole?", file, len(used))
		}
		for _, m := range slices.Sorted(maps.Keys(used)) {
			family := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && exported[base] {
					family = base
				}
			}
			if !exported[family] && definedWhen[m] == "" {
				t.Errorf("%s uses %s, which the gateway does not export", file, m)
			}
		}
	}
	for m := range definedWhen {
		if exported[m] {
			t.Errorf("%s is exported without %s: drop it from definedWhen", m, definedWhen[m])
		}
	}
}

// BenchmarkDashboardSample: the sampler's cost, paid once a second off the
// request path, with the refusal counters of a few reasons and classes:
// the gateway's reading (dashboardReading) and the Board's share.
func BenchmarkDashboardSample(b *testing.B) {
	g, err := New(baseConfig("http://127.0.0.1:1"), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	for _, reason := range []string{"queue_full", "queue_wait", "evicted"} {
		for _, class := range []string{"interactive", "batch", "speculative"} {
			g.metrics.rejections.WithLabelValues(reason, class, "").Inc()
		}
	}
	s := g.metrics.dash
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Sample(now.Add(time.Duration(i) * time.Second))
	}
}
