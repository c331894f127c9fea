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
	"github.com/sluicehq/sluice/mockllm"
)

// TestDashboardStatus: the status line names the most urgent finding in
// plain words, and says all clear only when nothing was refused.
func TestDashboardStatus(t *testing.T) {
	top := map[string]bool{admission.ClassInteractive: true}
	budget := func(v float64) *float64 { return &v }
	tests := []struct {
		name    string
		samples []DashboardSample
		level   string
		text    string // prefix
		details int
	}{
		{"none", nil, "ok", "Starting", 0},
		{"quiet", []DashboardSample{{}, {}}, "ok", "All clear: nothing shed in the last 5 minutes", 0},
		{"interactive shed", []DashboardSample{{ShedClass: map[string]float64{"interactive": 2}}, {}},
			"crit", "Interactive work is being shed: capacity is missing (2 requests refused in the last 5 minutes)", 0},
		{"only batch shed", []DashboardSample{{ShedClass: map[string]float64{"batch": 1}}},
			"warn", "Lower-priority work is being shed (batch: 1 request refused", 0},
		{"both", []DashboardSample{{ShedClass: map[string]float64{"batch": 3, "interactive": 1}}},
			"crit", "Interactive work is being shed", 1},
		{"spend refusals are not capacity", []DashboardSample{{RefusedReason: map[string]float64{"spend_ceiling": 4}, RefusedClass: map[string]float64{"interactive": 4}}},
			"warn", "Refused by the spend policy in the last 5 minutes (spend_ceiling: 4 requests)", 0},
		{"draining refusals are neither", []DashboardSample{{RefusedReason: map[string]float64{"draining": 4}}},
			"ok", "All clear", 0},
		{"spend alert", []DashboardSample{{Spend: &DashboardSpend{Stage: "normal", Alerting: true}}},
			"crit", "Spend rate over its alert level (global)", 0},
		{"tenant spend alert", []DashboardSample{{Spend: &DashboardSpend{Stage: "normal", TenantsAlert: []string{"acme"}}}},
			"crit", "Spend rate over its alert level (tenant acme)", 0},
		{"ceiling stage", []DashboardSample{{Spend: &DashboardSpend{Stage: "degrade"}}},
			"warn", "Spend ceiling in force: stage degrade", 0},
		{"retries refused", []DashboardSample{{RefusedReason: map[string]float64{"retry_budget": 2}}}, "warn", "Retry budget exhausted: 2 retries refused in the last 5 minutes", 0},
		{"retry budget empty but idle", []DashboardSample{{RetryBudget: budget(0)}}, "ok", "All clear", 0},
		{"draining", []DashboardSample{{Draining: true}}, "warn", "Draining", 0},
		{"pool down", []DashboardSample{{Pools: []DashboardPool{{Name: "east/m", Down: true}, {Name: "west/m"}}}},
			"warn", "Deployment down, calls going elsewhere and one probe at a time: east/m", 0},
		{"pools up", []DashboardSample{{Pools: []DashboardPool{{Name: "east/m"}}}}, "ok", "All clear", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var recent []*DashboardSample
			for i := range tt.samples {
				recent = append(recent, &tt.samples[i])
			}
			st := dashboardStatus(recent, top)
			if st.Level != tt.level || !strings.HasPrefix(st.Text, tt.text) || len(st.Details) != tt.details {
				t.Errorf("got %s %q %q, want %s %q… with %d details", st.Level, st.Text, st.Details, tt.level, tt.text, tt.details)
			}
		})
	}
}

// TestSamplerWindowAndRing: the sampler turns counters into the interval's
// counts, forgets refusals after five minutes, and keeps 900 samples
// oldest first. Time is an input: sample takes it.
func TestSamplerWindowAndRing(t *testing.T) {
	g, _ := startGateway(t, baseConfig("http://127.0.0.1:1"))
	s := g.metrics.dash
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d := s.sample(t0); d.Status.Level != "ok" || d.Concurrency != 4 || len(d.Depth) != 6 {
		t.Fatalf("first sample: %+v", d)
	}
	g.metrics.rejections.WithLabelValues("queue_full", "interactive", "").Add(3)
	g.metrics.rejections.WithLabelValues("spend_ceiling", "batch", "").Inc()
	d := s.sample(t0.Add(time.Second))
	if d.RefusedReason["queue_full"] != 3 || d.RefusedReason["spend_ceiling"] != 1 || d.RefusedClass["interactive"] != 3 ||
		d.ShedClass["interactive"] != 3 || d.ShedClass["batch"] != 0 {
		t.Fatalf("the interval's refusals: reason %v class %v shed %v", d.RefusedReason, d.RefusedClass, d.ShedClass)
	}
	if d.Status.Level != "crit" || !strings.HasPrefix(d.Status.Text, "Interactive work is being shed") {
		t.Fatalf("status after interactive refusals: %+v", d.Status)
	}
	// The next interval counts nothing new; the status remembers.
	if d := s.sample(t0.Add(2 * time.Second)); len(d.RefusedReason) != 0 || d.Status.Level != "crit" {
		t.Fatalf("a quiet second after: %v %+v", d.RefusedReason, d.Status)
	}
	if d := s.sample(t0.Add(2*time.Second + statusWindow)); d.Status.Level != "ok" {
		t.Fatalf("five minutes later: %+v", d.Status)
	}
	h := s.history()
	if len(h.Samples) != 4 || h.Samples[0].Time != t0.UnixMilli() || h.Samples[1].Status.Level != "crit" {
		t.Fatalf("history: %d samples, first at %d, second %+v", len(h.Samples), h.Samples[0].Time, h.Samples[1].Status)
	}
	start := t0.Add(time.Hour)
	for i := range 1000 {
		s.sample(start.Add(time.Duration(i) * time.Second))
	}
	h = s.history()
	if len(h.Samples) != dashboardSamples {
		t.Fatalf("the ring holds %d samples, want %d", len(h.Samples), dashboardSamples)
	}
	if first, last := h.Samples[0].Time, h.Samples[len(h.Samples)-1].Time; first != start.Add(100*time.Second).UnixMilli() ||
		last != start.Add(999*time.Second).UnixMilli() {
		t.Fatalf("the ring spans %d–%d", first, last)
	}
	if h.Meta.Classes[admission.ClassInteractive].DefaultTimeoutMs != 30000 {
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
	var h DashboardHistory
	if err := json.Unmarshal(data, &h); event != "history" || err != nil {
		t.Fatalf("first event %q: %v", event, err)
	}
	if h.Meta.Classes[admission.ClassInteractive].Rank != 4 || h.Meta.EverySeconds != 1 {
		t.Fatalf("meta: %+v", h.Meta)
	}
	event, data = readEvent(t, r)
	var d DashboardSample
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

// TestDashboardPage: the page and its assets come from the binary, under a
// policy that lets them load nothing from elsewhere.
func TestDashboardPage(t *testing.T) {
	g, _ := startGateway(t, baseConfig("http://127.0.0.1:1"))
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	for path, ctype := range map[string]string{
		"/":                            "text/html",
		"/dashboard/app.js":            "text/javascript",
		"/dashboard/style.css":         "text/css",
		"/dashboard/uPlot.iife.min.js": "text/javascript",
		"/dashboard/uPlot.min.css":     "text/css",
		"/dashboard/favicon.svg":       "image/svg+xml",
		"/favicon.ico":                 "image/svg+xml",
		"/dashboard/uPlot.LICENSE":     "text/plain",
		"/admin/v1/history":            "application/json",
		"/dashboard/missing.js":        "404",
	} {
		resp, err := http.Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		switch {
		case ctype == "404":
			if resp.StatusCode != 404 {
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
		case resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype):
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), ctype)
		case ctype != "application/json" && resp.Header.Get("Content-Security-Policy") != "default-src 'self'":
			t.Errorf("%s: Content-Security-Policy %q", path, resp.Header.Get("Content-Security-Policy"))
		case path == "/" && !strings.Contains(string(body), `src="/dashboard/uPlot.iife.min.js"`):
			t.Errorf("the page does not load uPlot from the binary: %s", body)
		}
	}
	// Nothing in the page or its code names another origin.
	for _, name := range []string{"dashboard/index.html", "dashboard/app.js", "dashboard/style.css"} {
		b, err := dashboardFS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).Find(b); m != nil {
			t.Errorf("%s names another origin: %s", name, m)
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
	_, up := startMock(t, mockllm.Config{})
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
// request path, with the refusal counters of a few reasons and classes.
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
		s.sample(now.Add(time.Duration(i) * time.Second))
	}
}
