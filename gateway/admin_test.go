package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(readAll(t, resp))
}

func TestAdminEndpoints(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: 5 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{{Name: "acme", Tier: "high", APIKeysSHA256: []string{HashKey("sk-acme")}}}
	g, gw := startGateway(t, cfg)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()

	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"Authorization": "Bearer sk-acme"})
	readAll(t, resp)
	resp = post(t, t.Context(), gw.URL, chatBody, map[string]string{"Authorization": "Bearer sk-acme", contract.HeaderTimeoutMs: "1"})
	readAll(t, resp) // refused or timed out: either way counted

	if code, body := get(t, admin.URL+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("healthz %d %q", code, body)
	}
	if code, _ := get(t, admin.URL+"/readyz"); code != 200 {
		t.Errorf("readyz %d", code)
	}
	code, metrics := get(t, admin.URL+"/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{
		`sluice_queue_depth{rank="4"}`, `sluice_in_flight `, `sluice_estimated_wait_seconds{rank="0"}`,
		`sluice_admissions_total{attempt="first",class="interactive",tenant="acme"} 1`,
		`sluice_service_time_seconds_bucket{model="gpt-4o-mini"`, `sluice_queue_time_seconds_bucket{class="interactive"`,
		`sluice_attempts_total{kind="first"} 2`, `sluice_upstream_tokens_total{kind="output",model="gpt-4o-mini"} 16`, `sluice_concurrency 4`, `go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	code, body := get(t, admin.URL+"/admin/v1/state")
	if code != 200 {
		t.Fatalf("state %d", code)
	}
	var st State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Concurrency != 4 || len(st.Tenants) != 1 || st.Tenants[0].Tier != "high" || st.Models["gpt-4o-mini"].Samples == 0 || st.Classes["speculative"].Rank != 0 {
		t.Errorf("state %+v", st)
	}
	for _, secret := range []string{"sk-provider-secret", "sk-acme", HashKey("sk-acme")} {
		if strings.Contains(body, secret) || strings.Contains(metrics, secret) {
			t.Errorf("the admin listener shows %q", secret)
		}
	}
	g.Drain()
	if code, _ := get(t, admin.URL+"/readyz"); code != 503 {
		t.Errorf("readyz while draining: %d", code)
	}
}

func TestEstimateEndpoint(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 50 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(10), InitialServiceTime: config.Duration(time.Second)}
	g, gw := startGateway(t, cfg)
	estimate := func(query string) (int, contract.Estimate, string) {
		resp, err := http.Get(gw.URL + contract.EstimatePath + "?" + query)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		var e contract.Estimate
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e, string(b)
	}
	code, e, body := estimate("priority=batch&timeout_ms=5000")
	if code != 200 || !e.Admit || e.Rank != 3 || e.EstimatedWaitMs != 0 || e.ServiceP95Ms != 1000 {
		t.Fatalf("idle: %d %s", code, body)
	}
	// A tenant sees its own admission, not everyone's load.
	for _, field := range []string{"queue_depth", "in_flight", "concurrency", "mode"} {
		if strings.Contains(body, field) {
			t.Errorf("the API listener's estimate shows %s: %s", field, body)
		}
	}
	hold, _ := g.Gate().TryAcquire(admission.Request{})
	defer hold.Drop()
	code, e, body = estimate("priority=interactive&timeout_ms=1500")
	if code != 200 || e.Admit || e.Reason != "queue_wait" || e.EstimatedWaitMs != 1000 || e.RetryAfterMs < 1 {
		t.Fatalf("busy, short budget: %d %s", code, body)
	}
	if _, e, body = estimate("priority=interactive&timeout_ms=5000"); !e.Admit {
		t.Fatalf("busy, long budget: %s", body)
	}
	for _, q := range []string{"priority=vip", "timeout_ms=-3", "timeout_ms=abc", "attempt=-1"} {
		code, _, body := estimate(q)
		param := strings.SplitN(q, "=", 2)[0]
		if code != 400 || !strings.Contains(body, param) {
			t.Errorf("%s: %d %s (want 400 naming %s)", q, code, body, param)
		}
	}
	resp, _ := http.Post(gw.URL+contract.EstimatePath, "text/plain", nil)
	if b := readAll(t, resp); resp.StatusCode != 405 {
		t.Errorf("POST estimate: %d %s", resp.StatusCode, b)
	}
	// The admin listener's estimate has the global figures, for a tenant
	// it names.
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	resp, err := http.Get(admin.URL + contract.EstimatePath + "?priority=interactive&tenant=anonymous")
	if err != nil {
		t.Fatal(err)
	}
	decodeJSON(t, resp, &e)
	if e.InFlight == nil || *e.InFlight != 1 || e.Concurrency == nil || *e.Concurrency != 1 || e.QueueDepth == nil || e.Mode != "fifo" {
		t.Fatalf("admin estimate: %+v", e)
	}
	if resp, _ := http.Get(admin.URL + contract.EstimatePath + "?tenant=nobody"); resp.StatusCode != 400 {
		t.Fatalf("admin estimate for an unknown tenant: %d", resp.StatusCode)
	}
}

// TestGracefulShutdown: on the signal, in-flight work finishes, new work is
// refused with 503 draining and a Retry-After, and Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: 600 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownGrace = config.Duration(5 * time.Second)
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	url := "http://" + srv.API.Addr().String()

	inflight := make(chan int, 1)
	go func() {
		resp := post(t, t.Context(), url, chatBody, nil)
		readAll(t, resp)
		inflight <- resp.StatusCode
	}()
	testkit.Eventually(t, "a call in flight", func() bool { return g.Gate().Stats().InFlight == 1 })
	stop()
	testkit.Eventually(t, "draining", func() bool { return g.draining.Load() })
	resp := post(t, t.Context(), url, chatBody, nil)
	b := readAll(t, resp)
	if resp.StatusCode != 503 || resp.Header.Get(contract.HeaderReason) != "draining" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("new request while draining: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 1 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if code := <-inflight; code != 200 {
		t.Fatalf("the in-flight call ended with %d", code)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
}

func TestMiddlewareProtectsAGoHandler(t *testing.T) {
	gate, err := admission.New(admission.Config{Concurrency: 1, MaxQueue: 0, InitialServiceTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := Middleware(gate, MiddlewareConfig{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = w.Write([]byte("done"))
	})))
	defer srv.Close()
	first := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			first <- 0
			return
		}
		readAll(t, resp)
		first <- resp.StatusCode
	}()
	<-entered
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set(contract.HeaderPriority, "batch")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	if resp.StatusCode != 503 || resp.Header.Get(contract.HeaderReason) != "queue_full" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("second request: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	req.Header.Set(contract.HeaderTimeoutMs, "nope")
	resp, _ = http.DefaultClient.Do(req)
	if b := readAll(t, resp); resp.StatusCode != 400 || !strings.Contains(string(b), contract.HeaderTimeoutMs) {
		t.Fatalf("bad header: %d %s", resp.StatusCode, b)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("first request %d", code)
	}
	if st := gate.Stats(); st.InFlight != 0 || st.Completed[admission.Success] != 1 {
		t.Fatalf("gate after: %+v", st)
	}
	if _, err := Middleware(gate, MiddlewareConfig{DefaultClass: "vip"}); err == nil {
		t.Fatal("a default class the config lacks was accepted")
	}
}
