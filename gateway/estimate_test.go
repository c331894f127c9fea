package gateway

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/retrybudget"
	"github.com/sluicehq/sluice/spend"
)

// estimate asks the gateway at base about a request with the query and the
// tenant's key, as a caller would before sending it.
func estimate(t *testing.T, base, query, key string) contract.Estimate {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+contract.EstimatePath+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e contract.Estimate
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("estimate %s: %d %s", query, resp.StatusCode, readAll(t, resp))
	}
	decodeJSON(t, resp, &e)
	return e
}

// standing is what of a gateway an estimate must leave alone: the spend
// books, the retry budget, the refusal and admission counts.
type standing struct {
	reservations           int64
	refusedBudget, refCeil int64
	degraded, tenants      int64
	spent                  float64
	rejections, admissions float64
	retryBalance           float64
	retryBalanceKnown      bool
}

func standingOf(t *testing.T, g *Gateway) standing {
	t.Helper()
	now := time.Now()
	var b standing
	if g.spend != nil {
		s := g.spend.Snapshot(now)
		b.reservations, b.refusedBudget, b.refCeil = s.Reservations, s.Global.RefusedBudget, s.Global.RefusedCeiling
		b.degraded, b.tenants, b.spent = s.Global.Degraded, int64(len(s.Tenants)), s.Global.SpentUSD
	}
	b.retryBalance, b.retryBalanceKnown = g.chain.RetryBalance(now)
	b.retryBalance = math.Round(b.retryBalance*100) / 100 // the floor accrues a little meanwhile
	b.rejections = sumCounter(t, g, "sluice_rejections_total")
	b.admissions = sumCounter(t, g, "sluice_admissions_total")
	return b
}

// sumCounter sums the counter name over all its series.
func sumCounter(t *testing.T, g *Gateway, name string) float64 {
	t.Helper()
	return sumCounterWhere(t, g, name, "", "")
}

// estimateGateway is a gateway with three keyed tenants in front of the
// mock, books priced as the mock's, and retry budgets that hold one token
// at most and earn it from two first attempts (the floor is negligible).
func estimateGateway(t *testing.T, upstream string, sc *spend.Config) *served {
	t.Helper()
	cfg := baseConfig(upstream)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{HashKey("key-acme")}},
		{Name: "other", APIKeysSHA256: []string{HashKey("key-other")}},
		{Name: "loader", APIKeysSHA256: []string{HashKey("key-loader")}},
	}
	tight := retrybudget.Config{Ratio: 0.5, MinPerSecond: 0.001, MaxTokens: 1}
	cfg.Retries.Budget, cfg.Retries.PerTenant = tight, tight
	cfg.Spend = sc
	return serve(t, cfg)
}

// TestEstimateSaysWhatTheRequestThenGets, end to end over loopback: for
// the spend ceiling, a tenant's budget and an exhausted retry budget, the
// estimate endpoint says admit:false with the reason that the same request,
// sent next, is refused with — where it used to ask only the gate and say
// admit:true — and two hundred estimates leave the books, the budgets and
// the refusal counts as they were.
func TestEstimateSaysWhatTheRequestThenGets(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	const q = "model=gpt-4o&max_tokens=16"
	for _, tc := range []struct {
		name   string
		spend  func(*spend.Config)
		before func(t *testing.T, url string) // what puts the limit in force
		query  string
		key    string
		hdr    map[string]string
		status int
		reason string
	}{
		{
			name: "spend ceiling",
			// One call brings the rate to 12c an hour: 105% of this ceiling.
			spend: func(sc *spend.Config) { sc.CeilingPerHour = 12 * c / 1.05 },
			before: func(t *testing.T, url string) {
				send(t, url, bigModelBody, map[string]string{"Authorization": "Bearer key-loader"}, 200)
			},
			query: q, key: "key-other", status: 503, reason: contract.ReasonSpendCeiling,
		},
		{
			name:  "tenant budget",
			spend: func(sc *spend.Config) { sc.Tenants = map[string]spend.TenantBudget{"acme": {PerHour: 12 * c / 1.05}} },
			before: func(t *testing.T, url string) {
				send(t, url, bigModelBody, map[string]string{"Authorization": "Bearer key-acme"}, 200)
			},
			query: q, key: "key-acme", status: 429, reason: contract.ReasonTenantBudget,
		},
		{
			name: "retry budget",
			// Two first attempts earn one retry; the first retry spends it.
			before: func(t *testing.T, url string) {
				other := map[string]string{"Authorization": "Bearer key-other"}
				send(t, url, bigModelBody, other, 200)
				send(t, url, bigModelBody, other, 200)
				retry := map[string]string{"Authorization": "Bearer key-other", contract.HeaderAttempt: "1"}
				e := estimate(t, url, q+"&attempt=1", "key-other")
				if !e.Admit {
					t.Fatalf("with a token in the budget the estimate says %+v", e)
				}
				send(t, url, bigModelBody, retry, 200)
			},
			query: q + "&attempt=1", key: "key-other", hdr: map[string]string{contract.HeaderAttempt: "1"},
			status: 429, reason: contract.ReasonRetryBudget,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testSpend()
			sc.Ladder = nil
			if tc.spend != nil {
				tc.spend(sc)
			}
			s := estimateGateway(t, up.URL, sc)
			g, url := s.g, s.url
			tc.before(t, url)

			before := standingOf(t, g)
			var e contract.Estimate
			for range 200 {
				e = estimate(t, url, tc.query, tc.key)
			}
			if after := standingOf(t, g); after != before {
				t.Fatalf("estimates changed the books:\nbefore %+v\nafter  %+v", before, after)
			}
			if e.Admit || e.Reason != tc.reason || e.RetryAfterMs <= 0 {
				t.Fatalf("estimate %+v, want admit false, reason %s and a Retry-After", e, tc.reason)
			}

			hdr := map[string]string{"Authorization": "Bearer " + tc.key}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			resp := post(t, t.Context(), url, bigModelBody, hdr)
			b := readAll(t, resp)
			if resp.StatusCode != tc.status || resp.Header.Get(contract.HeaderReason) != e.Reason {
				t.Fatalf("the request the estimate refused: %d %s %s", resp.StatusCode, resp.Header.Get(contract.HeaderReason), b)
			}
			ms, _ := strconv.ParseInt(resp.Header.Get(contract.HeaderRetryAfterMs), 10, 64)
			if d := ms - e.RetryAfterMs; d < -1000 || d > 1000 {
				t.Fatalf("refused with retry-after-ms %d, the estimate said %d", ms, e.RetryAfterMs)
			}
		})
	}
}

// TestEstimateNamesTheDegradedModel: in the ceiling's degrade stage the
// estimate names the cheaper rung the request would be sent to, as the
// request's X-Sluice-Model then does.
func TestEstimateNamesTheDegradedModel(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	sc := testSpend()
	sc.CeilingPerHour = 12 * c / 0.92
	url := estimateGateway(t, up.URL, sc).url
	send(t, url, bigModelBody, map[string]string{"Authorization": "Bearer key-loader"}, 200)
	e := estimate(t, url, "model=gpt-4o&max_tokens=16", "key-other")
	if !e.Admit || e.Model != "gpt-4o" || e.ModelCalled != "gpt-4o-mini" {
		t.Fatalf("estimate %+v, want admitted and degraded to gpt-4o-mini", e)
	}
	resp := post(t, t.Context(), url, bigModelBody, map[string]string{"Authorization": "Bearer key-other"})
	if readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get(contract.HeaderModel) != e.ModelCalled {
		t.Fatalf("the request: %d model %s", resp.StatusCode, resp.Header.Get(contract.HeaderModel))
	}
}

// TestEstimateBadParameters: token counts are plain digits, and a class
// the tenant may not use is the 403 the request would get.
func TestEstimateBadParameters(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{{Name: "acme", APIKeysSHA256: []string{HashKey("key-acme")},
		Classes: []string{"batch"}, DisallowedClass: "refuse"}}
	cfg.Spend = testSpend()
	s := serve(t, cfg)
	for _, tc := range []struct {
		query  string
		status int
		code   string
	}{
		{"priority=batch&max_tokens=-1", 400, "invalid_parameter"},
		{"priority=batch&input_tokens=1e3", 400, "invalid_parameter"},
		{"priority=batch&endpoint=v1/chat/completions", 400, "invalid_parameter"},
		{"priority=batch&model=no-such-model", 400, "model_not_priced"},
		{"priority=interactive", 403, "class_not_allowed"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url+contract.EstimatePath+"?"+tc.query, nil)
		req.Header.Set("Authorization", "Bearer key-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != tc.status || decodeError(t, b).Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.query, resp.StatusCode, b, tc.status, tc.code)
		}
	}
}

// send posts body with headers and fails unless the status is want.
func send(t *testing.T, url, body string, headers map[string]string, want int) {
	t.Helper()
	resp := post(t, t.Context(), url, body, headers)
	if b := readAll(t, resp); resp.StatusCode != want {
		t.Fatalf("%d %s, want %d", resp.StatusCode, b, want)
	}
}

// TestEstimateByTheCallsShape: the estimate of a call is its shape's, as
// the call's own admission is — a caller that sends short and long
// answers of one model, with the same key, is told the short ones' time
// for max_tokens=8 and the long ones' for max_tokens=512, not their
// mixture for both.
func TestEstimateByTheCallsShape(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Median: time.Millisecond, PerOutputToken: 100 * time.Microsecond})
	s := serve(t, baseConfig(up.URL))
	key := map[string]string{"Authorization": "Bearer sk-caller"}
	const perShape = 64 // the samples a shape needs to be estimated by its own (admission/shapes.go)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range perShape / 4 {
				for _, n := range []int{8, 512} {
					body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}],"max_tokens":` + strconv.Itoa(n) + `}`
					resp := post(t, t.Context(), s.url, body, key)
					if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
						t.Errorf("max_tokens %d: %d %s", n, resp.StatusCode, b)
					}
				}
			}
		})
	}
	wg.Wait()
	// The prompt: "hello there" and its role, about 4 tokens (a shape's
	// prompts go by powers of four: 4 to 15 tokens alike).
	short := estimate(t, s.url, "model=gpt-4o-mini&input_tokens=5&max_tokens=8", "sk-caller")
	long := estimate(t, s.url, "model=gpt-4o-mini&input_tokens=5&max_tokens=512", "sk-caller")
	// 1 ms + 8 × 0.1 ms against 1 ms + 512 × 0.1 ms, at gpt-4o-mini's
	// half of the mock's latency: 0.9 ms against 26 ms.
	if short.ServiceP95Ms > 10 || long.ServiceP50Ms < 20 {
		t.Errorf("service p50/p95: max_tokens 8 %d/%d ms, 512 %d/%d ms; want under 10 ms and over 20",
			short.ServiceP50Ms, short.ServiceP95Ms, long.ServiceP50Ms, long.ServiceP95Ms)
	}
}
