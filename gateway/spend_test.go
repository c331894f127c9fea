package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/spend"
)

const bigModelBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`

// spendConfig prices the mock's two models as its own table does, with
// gpt-4o degrading to gpt-4o-mini.
func testSpend() *spend.Config {
	return &spend.Config{
		Prices: map[string]spend.Price{
			"gpt-4o":      {InputPerMTok: 2.5, OutputPerMTok: 10},
			"gpt-4o-mini": {InputPerMTok: 0.15, OutputPerMTok: 0.6},
		},
		Ladder: map[string]string{"gpt-4o": "gpt-4o-mini"},
	}
}

// callCost measures what one bigModelBody call costs, through a gateway
// that keeps books and applies no limit.
func callCost(t *testing.T, upstream string) float64 {
	t.Helper()
	cfg := baseConfig(upstream)
	cfg.Spend = testSpend()
	g, gw := startGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, bigModelBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("calibration call: %d %s", resp.StatusCode, b)
	}
	c := g.spend.Snapshot(time.Now()).Global.SpentUSD
	if c <= 0 {
		t.Fatal("the calibration call cost nothing")
	}
	return c
}

// TestSpendLadderAndShedOrder: past degrade_at of the ceiling, interactive
// work is rewritten to the cheaper rung (the provider sees it, the caller is
// told in X-Sluice-Model) while speculative work is refused with 503
// spend_ceiling.
func TestSpendLadderAndShedOrder(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	// After one call the rate (5-minute window projected to an hour) is
	// 12c: 92% of this ceiling, inside the degrade stage.
	cfg.Spend.CeilingPerHour = 12 * c / 0.92
	g, gw := startGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, bigModelBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get(contract.HeaderModel) != "gpt-4o" {
		t.Fatalf("first call: %d %s %s", resp.StatusCode, resp.Header.Get(contract.HeaderModel), b)
	}

	resp = post(t, t.Context(), gw.URL, bigModelBody, map[string]string{contract.HeaderPriority: "speculative"})
	b := readAll(t, resp)
	if resp.StatusCode != 503 || resp.Header.Get(contract.HeaderReason) != "spend_ceiling" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("speculative past shed_speculative_at: %d %v %s", resp.StatusCode, resp.Header, b)
	}

	resp = post(t, t.Context(), gw.URL, bigModelBody, nil)
	b = readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get(contract.HeaderModel) != "gpt-4o-mini" {
		t.Fatalf("interactive in the degrade stage: %d model %q %s", resp.StatusCode, resp.Header.Get(contract.HeaderModel), b)
	}
	var answer struct{ Model string }
	if err := json.Unmarshal(b, &answer); err != nil || answer.Model != "gpt-4o-mini" {
		t.Fatalf("the provider answered as %q: it was not asked for the cheaper model", answer.Model)
	}
	snap := g.spend.Snapshot(time.Now())
	if snap.Global.Degraded != 1 || snap.Global.RefusedCeiling != 1 || testutilValue(g.metrics.degraded.WithLabelValues("spend")) != 1 {
		t.Fatalf("books: %+v", snap.Global)
	}
	if snap.Reservations != 0 {
		t.Fatalf("%d reservations left open", snap.Reservations)
	}
}

// TestTenantBudgetRefusesWith429: a tenant over its own hourly budget is
// refused with 429 tenant_budget and a Retry-After of when its spend leaves
// the rate window; another tenant is unaffected.
func TestTenantBudgetRefusesWith429(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{HashKey("key-acme")}},
		{Name: "other", APIKeysSHA256: []string{HashKey("key-other")}},
	}
	cfg.Spend = testSpend()
	cfg.Spend.Ladder = nil
	cfg.Spend.Tenants = map[string]spend.TenantBudget{"acme": {PerHour: 12 * c / 1.05}}
	_, gw := startGateway(t, cfg)
	acme := map[string]string{"Authorization": "Bearer key-acme"}
	resp := post(t, t.Context(), gw.URL, bigModelBody, acme)
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("acme's first call: %d", resp.StatusCode)
	}
	resp = post(t, t.Context(), gw.URL, bigModelBody, acme)
	b := readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get(contract.HeaderReason) != "tenant_budget" {
		t.Fatalf("acme over budget: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	// The call's spend sits in the current minute bucket of a 5-minute
	// window: the rate falls under the budget as that bucket leaves it,
	// some 4 to 6 minutes from now (the oldest minute of the window is
	// counted pro rata; spend's own tests pin the exact value).
	ms, _ := strconv.ParseInt(resp.Header.Get(contract.HeaderRetryAfterMs), 10, 64)
	if ms < 4*60_000 || ms > 6*60_000 {
		t.Fatalf("retry-after-ms %d, want the time until the window frees (4–6 min)", ms)
	}
	if ra, _ := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); ra != contract.RetryAfterSeconds(time.Duration(ms)*time.Millisecond) {
		t.Fatalf("Retry-After %d vs retry-after-ms %d", ra, ms)
	}
	resp = post(t, t.Context(), gw.URL, bigModelBody, map[string]string{"Authorization": "Bearer key-other"})
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("the other tenant: %d", resp.StatusCode)
	}
}

// TestSpendAlertWebhookFiresOnceAndResolves: the global rate crosses the
// alert threshold; the alerter posts one "fired" event to a real HTTP
// receiver, none while the rate stays up, and "resolved" once it falls.
func TestSpendAlertWebhookFiresOnceAndResolves(t *testing.T) {
	var mu sync.Mutex
	var events []spend.AlertEvent
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev spend.AlertEvent
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}))
	defer hook.Close()
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	cfg.Spend.AlertPerHour = 12 * c / 2 // one call puts the rate at twice the threshold
	cfg.Spend.AlertWebhook = hook.URL
	g, gw := startGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, bigModelBody, nil)
	readAll(t, resp)

	now := time.Now()
	for _, at := range []time.Time{now, now.Add(5 * time.Second), now.Add(10 * time.Second)} {
		if _, err := g.alerter.Tick(t.Context(), at); err != nil {
			t.Fatal(err)
		}
	}
	// Ten minutes on, the call has left the rate window.
	if _, err := g.alerter.Tick(t.Context(), now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].State != "fired" || events[1].State != "resolved" {
		t.Fatalf("events %+v, want fired then resolved", events)
	}
	if ev := events[0]; ev.Scope != "global" || ev.RatePerHour < ev.ThresholdPerHour || len(ev.TopModels) == 0 || ev.TopModels[0].Name != "gpt-4o" {
		t.Fatalf("fired event %+v", ev)
	}
}

// TestSpendFromAStreamAndWaste: usage is taken from a streamed answer's
// final chunk (the books match the provider's bill), and a stream the caller
// abandons is counted as wasted spend.
func TestSpendFromAStreamAndWaste(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 300 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	g, gw := startGateway(t, cfg)
	stream := `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_tokens":40,"messages":[{"role":"user","content":"tell me a story"}]}`
	resp := post(t, t.Context(), gw.URL, stream, nil)
	readAll(t, resp)
	snap := g.spend.Snapshot(time.Now())
	bill := mock.Stats().CostUSD
	if snap.Global.KnownCalls != 1 || math.Abs(snap.Global.ActualUSD-bill) > 1e-12 {
		t.Fatalf("books %+v, provider's bill %v", snap.Global, bill)
	}

	ctx, cancel := context.WithCancel(t.Context())
	resp = post(t, ctx, gw.URL, stream, nil)
	line, _ := bufio.NewReader(resp.Body).ReadString('\n') // the stream has started
	if !strings.HasPrefix(line, "data:") {
		t.Fatalf("first line %q", line)
	}
	cancel()
	resp.Body.Close()
	testkit.Eventually(t, "the abandoned stream's spend counted as wasted", func() bool {
		return g.spend.Snapshot(time.Now()).Global.WastedUSD > 0
	})
	snap = g.spend.Snapshot(time.Now())
	if snap.Global.SavedUSD <= 0 || snap.Reservations != 0 {
		t.Fatalf("after the abandoned stream: %+v, %d reservations open", snap.Global, snap.Reservations)
	}
}

func TestSpendBadInputAndConfig(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	_, gw := startGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, `{"model":"gpt-5-unpriced","messages":[]}`, nil)
	b := readAll(t, resp)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "gpt-5-unpriced") {
		t.Fatalf("unpriced model: %d %s", resp.StatusCode, b)
	}
	if mock.Stats().Received != 0 {
		t.Fatal("an unpriced call reached the provider")
	}
	for _, tc := range []struct {
		mut   func(*config.Config)
		field string
	}{
		{func(c *config.Config) { c.Spend.Tenants = map[string]spend.TenantBudget{"ghost": {PerHour: 1}} }, "spend.tenants.ghost"},
		{func(c *config.Config) { c.Spend.Stages.TopRank = 9 }, "spend.stages.top_rank"},
		{func(c *config.Config) {
			c.Spend.Ladder = map[string]string{"gpt-4o-mini": "gpt-4o", "gpt-4o": "gpt-4o-mini"}
		}, "spend.ladder"},
		{func(c *config.Config) { c.Spend.Prices["gpt-4o"] = spend.Price{InputPerMTok: -1} }, "spend.prices"},
	} {
		cfg := baseConfig(up.URL)
		cfg.Spend = testSpend()
		tc.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("want an error naming %s, got %v", tc.field, err)
		}
	}
	// And from YAML, through check-config's path.
	_, err := config.Parse([]byte("upstream: {url: http://x}\nadmission: {concurrency: 1}\nspend: {ceiling_per_hour: -3, prices: {m: {input_per_mtok: 1, output_per_mtok: 1}}}\n"))
	if err == nil || !strings.Contains(err.Error(), "spend.ceiling_per_hour") {
		t.Errorf("negative ceiling: %v", err)
	}
	_, err = config.Parse([]byte("upstream: {url: http://x}\nadmission: {concurrency: 1}\nspend: {prices: {m: {input_per_mtok: 1, output_per_mtok: 1, colour: red}}}\n"))
	if err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown key in spend: %v", err)
	}
	_ = io.Discard
}
