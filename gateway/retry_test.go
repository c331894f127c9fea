package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/retrybudget"
)

// TestRetryBudgetRefusesRetriesWith429: a tenant's retries beyond its budget
// get 429 retry_budget, with a Retry-After equal to the time until a token
// accrues; first attempts are never held back by it.
func TestRetryBudgetRefusesRetriesWith429(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	// One token per 10 first attempts; time alone adds one every 20s.
	cfg.Retries.PerTenant = retrybudget.Config{Ratio: 0.1, MinPerSecond: 0.05, MaxTokens: 5}
	g, gw := startGateway(t, cfg)
	for range 10 {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderAttempt: "0"})
		if b := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("first attempt: %d %s", resp.StatusCode, b)
		}
	}
	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderAttempt: "1"})
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("the retry the budget earned: %d %s", resp.StatusCode, b)
	}
	resp = post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderStainlessRetryCount: "2"})
	b := readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get(contract.HeaderReason) != "retry_budget" {
		t.Fatalf("retry over budget: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	ms, _ := strconv.Atoi(resp.Header.Get(contract.HeaderRetryAfterMs))
	// A token accrues in 1/0.05 = 20s (the gap since the last deposit has
	// already brought part of it).
	if ms < 15_000 || ms > 20_000 {
		t.Fatalf("retry-after-ms %d, want the time until a token (≤ 20s)", ms)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); int64(ra) != contract.RetryAfterSeconds(time.Duration(ms)*time.Millisecond) {
		t.Fatalf("Retry-After %d does not match retry-after-ms %d", ra, ms)
	}
	if decodeError(t, b).Code != "retry_budget" {
		t.Fatalf("body %s", b)
	}
	if st := mock.Stats(); st.Received != 11 {
		t.Fatalf("the provider saw %d calls, want 11 (the refused retry never reached it)", st.Received)
	}
	if n := counter(t, g, "rejections", "retry_budget", "interactive", contract.AnonymousTenant); n != 1 {
		t.Fatalf("retry_budget rejections %v", n)
	}
	// A first attempt still goes through (another prompt: chatBody again
	// would be a retry of the refused one, seen.go).
	resp = post(t, t.Context(), gw.URL, promptBody(1), nil)
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("first attempt after the refusal: %d", resp.StatusCode)
	}
}

// TestGatewayRetriesTheProvider: 5xx and 429 answers are retried by the
// gateway inside the caller's deadline and the budget, honouring the
// provider's Retry-After.
func TestGatewayRetriesTheProvider(t *testing.T) {
	t.Run("errors", func(t *testing.T) {
		mock, up := testkit.StartMock(t, mockllm.Config{ErrorRate: 0.5, Seed: 7})
		g, gw := startGateway(t, baseConfig(up.URL))
		ok := 0
		for i := range 40 {
			resp := post(t, t.Context(), gw.URL, promptBody(i), nil) // distinct: a copy of a failed one would be a retry
			readAll(t, resp)
			if resp.StatusCode == 200 {
				ok++
			}
		}
		retries := testutilValue(g.metrics.upstreamRetries.WithLabelValues("5xx"))
		st := mock.Stats()
		if retries == 0 || st.Received != 40+int64(retries) || st.Faults.Error == 0 {
			t.Fatalf("retries %v, provider received %d with %d errors", retries, st.Received, st.Faults.Error)
		}
		// Each call fails half the time: one retry lifts success to ~75%.
		if ok <= 40-int(st.Faults.Error) || ok < 26 {
			t.Fatalf("%d of 40 succeeded with %d errors upstream", ok, st.Faults.Error)
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		mock, up := testkit.StartMock(t, mockllm.Config{RetryAfter: 300 * time.Millisecond})
		g, gw := startGateway(t, fastBudget(baseConfig(up.URL)))
		start := time.Now()
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"X-Mock-Fault": "429"})
		readAll(t, resp)
		if resp.StatusCode != 429 || time.Since(start) < 300*time.Millisecond {
			t.Fatalf("status %d after %v: want the provider's 429 after one retry 300ms later", resp.StatusCode, time.Since(start))
		}
		if st := mock.Stats(); st.Received != 2 {
			t.Fatalf("provider received %d, want 2", st.Received)
		}
		if n := testutilValue(g.metrics.upstreamRetries.WithLabelValues("429")); n != 1 {
			t.Fatalf("429 retries counted %v", n)
		}
	})
	t.Run("not past the deadline", func(t *testing.T) {
		mock, up := testkit.StartMock(t, mockllm.Config{RetryAfter: 2 * time.Second})
		_, gw := startGateway(t, fastBudget(baseConfig(up.URL)))
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"X-Mock-Fault": "429", contract.HeaderTimeoutMs: "1000"})
		readAll(t, resp)
		if st := mock.Stats(); resp.StatusCode != 429 || st.Received != 1 {
			t.Fatalf("status %d, provider received %d: a retry that cannot fit the deadline was sent", resp.StatusCode, st.Received)
		}
	})
}

// TestMalformedProviderRetryAfterIsIgnored: a Retry-After the gateway
// cannot read is not trusted; its own backoff applies.
func TestMalformedProviderRetryAfterIsIgnored(t *testing.T) {
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "in a while")
			w.Header().Set("retry-after-ms", "-5")
			w.WriteHeader(503)
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer up.Close()
	cfg := fastBudget(baseConfig(up.URL))
	cfg.Retries.UpstreamBackoff = 150 * time.Millisecond
	_, gw := startGateway(t, cfg)
	start := time.Now()
	resp := post(t, t.Context(), gw.URL, chatBody, nil)
	readAll(t, resp)
	el := time.Since(start)
	if resp.StatusCode != 200 || calls.Load() != 2 || el < 150*time.Millisecond || el > 5*time.Second {
		t.Fatalf("status %d after %v with %d calls", resp.StatusCode, el, calls.Load())
	}
}

// TestNoRetryOnceTheResponseStarted: a stream that breaks after its first
// bytes reached the caller is not retried.
func TestNoRetryOnceTheResponseStarted(t *testing.T) {
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[]}\n\n"))
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer up.Close()
	g, gw := startGateway(t, baseConfig(up.URL))
	resp := post(t, t.Context(), gw.URL, `{"model":"m","stream":true}`, nil)
	sc := bufio.NewScanner(resp.Body)
	got := ""
	for sc.Scan() {
		got += sc.Text()
	}
	resp.Body.Close()
	if !strings.Contains(got, "choices") || calls.Load() != 1 {
		t.Fatalf("caller got %q; provider called %d times", got, calls.Load())
	}
	testkit.Eventually(t, "the slot released", func() bool { return g.Gate().Stats().InFlight == 0 })
}

// fastBudget makes the global retry budget accrue a token a millisecond: a
// new budget starts empty (a restart banks no retries), and these tests are
// about the gateway's retry rules, not the budget's.
func fastBudget(cfg config.Config) config.Config {
	cfg.Retries.Budget = retrybudget.Config{MinPerSecond: 1e6}
	return cfg
}

// TestConcurrencyFollowsTheProvidersRateLimit: a provider in 429 mode with
// fewer slots than the gate lowers the gate's concurrency, visible in
// /metrics and in the estimate; once it answers again, concurrency recovers.
func TestConcurrencyFollowsTheProvidersRateLimit(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Mode: mockllm.Mode429, Median: 300 * time.Millisecond, RetryAfter: 10 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 8, MaxQueue: new(32)}
	cfg.UpstreamLimit = config.UpstreamLimitConfig{Interval: config.Duration(100 * time.Millisecond)}
	cfg.Retries.Disabled = true
	g, gw := startGateway(t, cfg)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, t.Context(), gw.URL, chatBody, nil)
			readAll(t, resp)
		}()
	}
	wg.Wait()
	if c := g.Gate().Stats().Concurrency; c >= 8 {
		t.Fatalf("concurrency %d after the provider's 429s", c)
	}
	if testutilValue(g.metrics.limitDecreases) == 0 {
		t.Fatal("no decrease counted")
	}
	lowered := g.Gate().Stats().Concurrency
	// The provider answers again: sequential calls, one slot at a time.
	deadline := time.Now().Add(10 * time.Second)
	for g.Gate().Stats().Concurrency < 8 && time.Now().Before(deadline) {
		resp := post(t, t.Context(), gw.URL, chatBody, nil)
		readAll(t, resp)
	}
	if c := g.Gate().Stats().Concurrency; c != 8 {
		t.Fatalf("concurrency recovered from %d only to %d", lowered, c)
	}
}

// TestClientGivesUpWhenRetryAfterExceedsItsDeadline: the Go client, in
// front of a real gateway, does not retry into a wall it cannot get past in
// time: it returns at once with the gateway's reason, Retry-After and
// estimated wait.
func TestClientGivesUpWhenRetryAfterExceedsItsDeadline(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(0), InitialServiceTime: config.Duration(5 * time.Second)}
	g, gw := startGateway(t, cfg)
	hold, err := g.Gate().TryAcquire(admission.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Drop()
	hc, err := client.NewHTTPClient(client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	start := time.Now()
	resp, err := hc.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Fatalf("got status %d, want the client to give up", resp.StatusCode)
	}
	var rej *client.RejectedError
	if !errors.As(err, &rej) || (rej.Reason != "queue_wait" && rej.Reason != "queue_full") || rej.RetryAfter < 4*time.Second || rej.Attempts != 1 {
		t.Fatalf("err = %v (%+v)", err, rej)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("gave up after %v: it should not wait for a Retry-After past its deadline", time.Since(start))
	}
	if n := counter(t, g, "attempts", "retry"); n != 0 {
		t.Fatalf("the client retried %v times", n)
	}
}

// TestClientEstimateAsATenant: with tenants configured the estimate endpoint
// answers only a known key, and the client sends Config.APIKey with it.
func TestClientEstimateAsATenant(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{{Name: "acme", Tier: "low", APIKeysSHA256: []string{HashKey("sk-acme")}}}
	_, gw := startGateway(t, cfg)

	anon, err := client.New(client.Config{BaseURL: gw.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Estimate(t.Context(), "batch", 5*time.Second); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("contract.Estimate without a key: %v, want the gateway's 401", err)
	}
	c, err := client.New(client.Config{BaseURL: gw.URL, APIKey: "sk-acme"})
	if err != nil {
		t.Fatal(err)
	}
	est, err := c.Estimate(t.Context(), "batch", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// acme is a low-tier tenant: its batch work ranks as low-tier (2), not 3.
	if !est.Admit || est.Priority != "batch" || est.Rank != 2 {
		t.Fatalf("estimate %+v, want batch admitted at acme's low-tier rank 2", est)
	}
}
