package spend_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// TestWindowsRoll spends at known times and reads the rate, the hour and
// the day back as the windows slide over it.
func TestWindowsRoll(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, t0.Add(10*time.Second), "x", 5) // $5 in minute t0
	for _, tc := range []struct {
		at                      time.Duration
		rate, lastHour, lastDay float64
	}{
		{10 * time.Second, 60, 5, 5},                  // $5 in a 5m window → $60/h
		{4*time.Minute + 59*time.Second, 60, 5, 5},    // still wholly inside
		{5*time.Minute + 30*time.Second, 30, 5, 5},    // half of minute t0 has left the window
		{6 * time.Minute, 0, 5, 5},                    // gone from the rate, not from the hour
		{60*time.Minute + 15*time.Second, 0, 3.75, 5}, // a quarter of the minute has left the hour
		{61 * time.Minute, 0, 0, 5},                   // gone from the hour
		{24*time.Hour + 45*time.Second, 0, 0, 1.25},   // three quarters gone from the day
		{24*time.Hour + time.Minute, 0, 0, 0},         // gone
	} {
		s := l.Snapshot(t0.Add(tc.at))
		g := s.Global
		if !near(g.RatePerHour, tc.rate, 1e-9) || !near(g.LastHourUSD, tc.lastHour, 1e-9) || !near(g.LastDayUSD, tc.lastDay, 1e-9) {
			t.Errorf("at t0+%v: rate %v, hour %v, day %v; want %v, %v, %v",
				tc.at, g.RatePerHour, g.LastHourUSD, g.LastDayUSD, tc.rate, tc.lastHour, tc.lastDay)
		}
		x := findScope(s.Tenants, "x")
		if !near(x.RatePerHour, tc.rate, 1e-9) || !near(x.LastDayUSD, tc.lastDay, 1e-9) {
			t.Errorf("at t0+%v: tenant x %+v", tc.at, x)
		}
	}
	// Spend spread over minutes: the rate is the last five minutes' sum ×12.
	l = newLimiter(t, testConfig(), spend.Options{})
	for m := range 10 {
		spendUSD(t, l, t0.Add(time.Duration(m)*time.Minute), "x", 1)
	}
	if got := l.Snapshot(t0.Add(9*time.Minute + 59*time.Second)).Global.RatePerHour; !near(got, 5*12+1/60.0*12, 1e-9) {
		t.Errorf("rate over 10 minutes of $1 each, at the end: %v", got)
	}
	if got := l.Snapshot(t0.Add(9 * time.Minute)).Global.RatePerHour; !near(got, 6*12, 1e-9) {
		t.Errorf("rate at a minute boundary (5 whole minutes + the whole leaving one): %v, want 72", got)
	}
}

// thresholds of the default stages for ranks 0..5, as a fraction of the
// ceiling.
var thresholds = []float64{0.8, 0.95, 0.9625, 0.975, 0.9875, 1.0}

// TestGlobalStages puts the global rate at a fraction of the ceiling and
// checks what each rank gets: shed, degraded, refused in rank order, with a
// RetryAfter after which the same request is admitted.
func TestGlobalStages(t *testing.T) {
	now := t0.Add(10 * time.Second)
	for _, frac := range []float64{0.5, 0.81, 0.91, 0.951, 0.97, 0.98, 0.99, 1.0} {
		for rank := range 6 {
			t.Run(fmt.Sprintf("%.3f/rank%d", frac, rank), func(t *testing.T) {
				l := newLimiter(t, testConfig(), spend.Options{})
				spendUSD(t, l, now, "loader", frac*10)
				req := spend.Request{Tenant: "x", Model: "big", Rank: rank, EstimatedInputTokens: 100, MaxOutputTokens: 10}
				d := admit(t, l, now, req)
				wantAllow := frac < thresholds[rank]
				wantStage := spend.StageNormal
				switch {
				case frac >= 0.95:
					wantStage = spend.StageReject
				case frac >= 0.9:
					wantStage = spend.StageDegrade
				case frac >= 0.8:
					wantStage = spend.StageShedSpeculative
				}
				if d.Allow != wantAllow || d.Stage != wantStage || d.TenantStage != spend.StageNormal || d.OverQuota {
					t.Fatalf("allow %v stage %v tenant stage %v over quota %v; want allow %v stage %v",
						d.Allow, d.Stage, d.TenantStage, d.OverQuota, wantAllow, wantStage)
				}
				if d.Allow {
					wantDegraded := frac >= 0.9
					if d.Degraded != wantDegraded || (d.Model == "small") != wantDegraded || d.Reservation == nil || d.Rejection != nil {
						t.Fatalf("allowed: degraded %v model %q; want degraded %v", d.Degraded, d.Model, wantDegraded)
					}
					return
				}
				rej := d.Rejection
				if rej == nil || rej.Reason != admission.ReasonSpendCeiling || !errors.Is(d.Err(), admission.ErrSpendCeiling) ||
					rej.RetryAfter <= 0 || d.Reservation != nil || d.EstimatedUSD != 0 {
					t.Fatalf("refused: %+v", d)
				}
				if rejectionStatus429(rej) {
					t.Fatal("a ceiling refusal must be a 503 reason, not the caller's own limit")
				}
				checkRetryAfter(t, l, now, req, rej.RetryAfter)
			})
		}
	}
}

func rejectionStatus429(r *admission.Rejection) bool { return r.Reason.CallersOwnLimit() }

// checkRetryAfter asserts that RetryAfter is truthful: 2ms before it the
// same request is still refused, at it the request is admitted.
func checkRetryAfter(t *testing.T, l *spend.Limiter, now time.Time, req spend.Request, ra time.Duration) {
	t.Helper()
	if ra > 2*time.Millisecond {
		if d := admit(t, l, now.Add(ra-2*time.Millisecond), req); d.Allow {
			t.Fatalf("admitted 2ms before RetryAfter (%v)", ra)
		}
	}
	d := admit(t, l, now.Add(ra), req)
	if !d.Allow {
		t.Fatalf("still refused at RetryAfter (%v): %v", ra, d.Err())
	}
	l.Cancel(now.Add(ra), d.Reservation) // leave the books as they were
}

// TestRetryAfterWindowMath checks RetryAfter against a hand computation.
func TestRetryAfterWindowMath(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, now, "loader", 9.9) // 0.99 of the ceiling, all in minute t0
	d := admit(t, l, now, spend.Request{Tenant: "x", Model: "unit", Rank: 4})
	// Rank 4 is refused from 0.9875 × $10 = $9.875. Minute t0 starts leaving
	// the 5-minute window at t0+5m and is below $9.875 once a fraction
	// 1 − 9.875/9.9 of it has left: 60s × 0.025/9.9 = 151.515…ms later.
	// From now (t0+10s): 4m50.151515s, and RetryAfter is the next whole
	// millisecond.
	if want := 4*time.Minute + 50*time.Second + 152*time.Millisecond; d.Rejection == nil || d.Rejection.RetryAfter != want {
		t.Fatalf("RetryAfter = %v, want %v", d.Err(), want)
	}
}

func TestSpeculativeClassIsShedWhateverItsRank(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, now, "loader", 8.5)
	if d := admit(t, l, now, spend.Request{Model: "unit", Rank: 4, Class: admission.ClassSpeculative}); d.Allow {
		t.Error("a speculative request ranked 4 was admitted at 0.85 of the ceiling")
	}
	if d := admit(t, l, now, spend.Request{Model: "unit", Rank: 4, Class: admission.ClassInteractive}); !d.Allow {
		t.Error("an interactive request ranked 4 was refused at 0.85 of the ceiling")
	}
}

// TestLadderReestimate: a degraded request is priced at the rung's price,
// booked against the rung, and the bottom rung stays where it is.
func TestLadderReestimate(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, now, "loader", 9.2) // degrade stage
	req := spend.Request{Tenant: "x", Model: "big", Rank: 4, EstimatedInputTokens: 1000, MaxOutputTokens: 500}
	d := admit(t, l, now, req)
	want := (1000*0.15 + 500*0.6) / 1e6 // small's price, not big's (0.0075)
	if !d.Allow || !d.Degraded || d.Model != "small" || !near(d.EstimatedUSD, want, 1e-12) || d.Reservation.Model() != "small" {
		t.Fatalf("degraded decision %+v, want model small at $%v", d, want)
	}
	// One rung only, however deep the stage.
	req.Model = "small"
	if d := admit(t, l, now, req); d.Model != "tiny" || !d.Degraded {
		t.Errorf("small degraded to %q", d.Model)
	}
	req.Model = "tiny"
	if d := admit(t, l, now, req); d.Model != "tiny" || d.Degraded || !d.Allow {
		t.Errorf("the bottom rung: %+v", d)
	}
	if _, err := l.Reconcile(now, d.Reservation, contract.Usage{Input: 1000, Output: 100}, true); err != nil {
		t.Fatal(err)
	}
	s := l.Snapshot(now)
	for _, m := range s.Models {
		if m.Name == "big" && m.RatePerHour != 0 {
			t.Errorf("spend booked against big although the call went to small: %+v", m)
		}
	}
	if s.Global.Degraded != 2 {
		t.Errorf("degraded count %d, want 2", s.Global.Degraded)
	}
}

// TestTenantStages: a tenant's own budget sets OverQuota, degrades and then
// refuses with 429 tenant_budget, whatever the global stage; other tenants
// are not affected.
func TestTenantStages(t *testing.T) {
	now := t0.Add(3*time.Minute + 30*time.Second)
	for _, tc := range []struct {
		spent             float64 // of acme's $1 window allowance
		overQuota, degrad bool
		refusedRanks      int // ranks below this are refused
	}{
		{0.5, false, false, 0},
		{0.85, true, false, 1},
		{0.92, true, true, 1},
		{0.97, true, true, 3},
		{1.2, true, true, 6},
	} {
		l := newLimiter(t, testConfig(), spend.Options{})
		spendUSD(t, l, t0, "acme", tc.spent)
		for rank := range 6 {
			req := spend.Request{Tenant: "acme", Model: "big", Rank: rank, EstimatedInputTokens: 10}
			d := admit(t, l, now, req)
			if refused := rank < tc.refusedRanks; refused == d.Allow {
				t.Fatalf("spent %v, rank %d: allow %v", tc.spent, rank, d.Allow)
			}
			if d.Stage != spend.StageNormal {
				t.Fatalf("the global stage moved: %v", d.Stage)
			}
			if d.Allow {
				if d.OverQuota != tc.overQuota || d.Degraded != tc.degrad {
					t.Fatalf("spent %v, rank %d: over quota %v degraded %v", tc.spent, rank, d.OverQuota, d.Degraded)
				}
				l.Cancel(now, d.Reservation)
				continue
			}
			if d.Rejection.Reason != admission.ReasonTenantBudget || !d.Rejection.Reason.CallersOwnLimit() {
				t.Fatalf("refused with %v, want tenant_budget (429)", d.Rejection.Reason)
			}
			checkRetryAfter(t, l, now, req, d.Rejection.RetryAfter)
		}
		if d := admit(t, l, now, spend.Request{Tenant: "other", Model: "big", Rank: 0}); !d.Allow || d.OverQuota {
			t.Fatalf("another tenant's speculative work was held back: %+v", d)
		}
	}
}

// TestTenantBudgetRetryAfter checks the 429's RetryAfter against the window
// arithmetic, for the hourly and the daily budget.
func TestTenantBudgetRetryAfter(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, t0, "acme", 0.5)
	spendUSD(t, l, t0.Add(2*time.Minute), "acme", 0.49)
	now := t0.Add(3*time.Minute + 30*time.Second)
	d := admit(t, l, now, spend.Request{Tenant: "acme", Model: "unit", Rank: 4})
	// 0.99 of the $1 window allowance ≥ 0.9875: refused. It falls below
	// $0.9875 once minute t0 ($0.5) has left by a fraction 1 − 0.4975/0.5
	// = 0.005 of a minute (300ms) after t0+5m: 1m30.3s from now, give or
	// take the float rounding of that fraction.
	want := time.Minute + 30*time.Second + 300*time.Millisecond
	if d.Rejection == nil || d.Rejection.Reason != admission.ReasonTenantBudget ||
		d.Rejection.RetryAfter < want || d.Rejection.RetryAfter > want+time.Millisecond {
		t.Fatalf("hourly: %v, want tenant_budget with RetryAfter %v (+1ms)", d.Err(), want)
	}

	// The daily budget ($2): $1 at t0 and $1 at t0+6h; refused at
	// t0+6h+1m until minute t0 leaves the day: it must lose a fraction
	// 1 − (1.975−1)/1 = 0.025 of itself (1.5s) after t0+24h.
	spendUSD(t, l, t0, "daily", 1)
	spendUSD(t, l, t0.Add(6*time.Hour), "daily", 1)
	now = t0.Add(6*time.Hour + time.Minute)
	req := spend.Request{Tenant: "daily", Model: "unit", Rank: 4}
	d = admit(t, l, now, req)
	want = 18*time.Hour - time.Minute + 1500*time.Millisecond
	if d.Rejection == nil || d.Rejection.Reason != admission.ReasonTenantBudget ||
		d.Rejection.RetryAfter < want || d.Rejection.RetryAfter > want+time.Millisecond {
		t.Fatalf("daily: %v, want tenant_budget with RetryAfter %v (+1ms)", d.Err(), want)
	}
	checkRetryAfter(t, l, now, req, d.Rejection.RetryAfter)
}

// TestOverQuotaDemotedGlobally: near the ceiling an over-quota tenant's
// interactive work is refused at the over-quota rank while another
// tenant's interactive work still passes.
func TestOverQuotaDemotedGlobally(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, now, "acme", 0.9)   // acme over quota (0.9 of its budget)
	spendUSD(t, l, now, "loader", 8.8) // global at 0.97: rank 2 refused, rank 4 not
	d := admit(t, l, now, spend.Request{Tenant: "acme", Model: "unit", Rank: 4})
	if d.Allow || d.Rejection.Reason != admission.ReasonSpendCeiling {
		t.Fatalf("over-quota tenant near the ceiling: %+v", d)
	}
	if d := admit(t, l, now, spend.Request{Tenant: "plenty", Model: "unit", Rank: 4}); !d.Allow {
		t.Fatalf("a tenant within its budget was refused: %v", d.Err())
	}
}

// TestBothScopesRefuse: when the tenant and the ceiling both refuse, the
// reason is the tenant's own (429), and RetryAfter waits for whichever
// frees later.
func TestBothScopesRefuse(t *testing.T) {
	for _, tc := range []struct {
		name         string
		loader, acme float64 // spent at t0+4m
	}{
		{"ceiling frees later", 9.95, 1},
		{"tenant frees later", 9, 1.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, testConfig(), spend.Options{})
			spendUSD(t, l, t0.Add(4*time.Minute), "loader", tc.loader)
			spendUSD(t, l, t0.Add(4*time.Minute), "acme", tc.acme)
			now := t0.Add(4*time.Minute + 10*time.Second)
			req := spend.Request{Tenant: "acme", Model: "unit", Rank: 4}
			d := admit(t, l, now, req)
			if d.Allow || d.Rejection.Reason != admission.ReasonTenantBudget || d.Stage != spend.StageReject {
				t.Fatalf("%+v", d)
			}
			checkRetryAfter(t, l, now, req, d.Rejection.RetryAfter)
		})
	}
}

func TestNoCeilingNoBudget(t *testing.T) {
	cfg := testConfig()
	cfg.CeilingPerHour = 0
	l := newLimiter(t, cfg, spend.Options{})
	spendUSD(t, l, t0, "x", 1000)
	if d := admit(t, l, t0, spend.Request{Tenant: "x", Model: "big", Rank: 0}); !d.Allow || d.Degraded || d.Stage != spend.StageNormal {
		t.Fatalf("without a ceiling: %+v", d)
	}
}

func TestAdmitBadInput(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	for _, tc := range []struct {
		req  spend.Request
		is   error
		name string
	}{
		{spend.Request{Model: "gpt-9"}, spend.ErrUnknownModel, `"gpt-9"`},
		{spend.Request{Model: ""}, spend.ErrUnknownModel, "spend.unknown_model"},
		{spend.Request{Model: "unit", EstimatedInputTokens: -1}, spend.ErrInvalidRequest, "EstimatedInputTokens"},
		{spend.Request{Model: "unit", MaxOutputTokens: -1}, spend.ErrInvalidRequest, "MaxOutputTokens"},
		{spend.Request{Model: "unit", Rank: -1}, spend.ErrInvalidRequest, "Rank"},
		{spend.Request{Model: "unit", Rank: 16}, spend.ErrInvalidRequest, "Rank"},
	} {
		_, err := l.Admit(t0, tc.req)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Admit(%+v) = %v, want %v naming %s", tc.req, err, tc.is, tc.name)
		}
	}
	if s := l.Snapshot(t0); s.Reservations != 0 || s.Global.RatePerHour != 0 {
		t.Errorf("bad input left a trace: %+v", s.Global)
	}
	if err := l.RecordWasted(t0, "x", "unit", -1); !errors.Is(err, spend.ErrInvalidRequest) {
		t.Errorf("RecordWasted(-1) = %v", err)
	}
	if _, err := l.Cost("gpt-9", contract.Usage{}); !errors.Is(err, spend.ErrUnknownModel) {
		t.Errorf("Cost of an unknown model: %v", err)
	}
}

func TestUnknownModelDefaultPrice(t *testing.T) {
	cfg := testConfig()
	cfg.UnknownModel = spend.UnknownModelDefault
	cfg.DefaultPrice = &spend.Price{InputPerMTok: 1000, OutputPerMTok: 2000}
	l := newLimiter(t, cfg, spend.Options{})
	d := admit(t, l, t0, spend.Request{Model: "gpt-9", EstimatedInputTokens: 1000, MaxOutputTokens: 500})
	if !d.Allow || !near(d.EstimatedUSD, 1+1, 1e-12) || d.Model != "gpt-9" {
		t.Fatalf("%+v", d)
	}
	if c, err := l.Cost("gpt-9", contract.Usage{Input: 1000, Output: 1000}); err != nil || !near(c, 3, 1e-12) {
		t.Fatalf("Cost = %v, %v", c, err)
	}
}

// TestOutputEstimate: without max_tokens the reservation uses the default
// output size, then the mean output observed for that model.
func TestOutputEstimate(t *testing.T) {
	cfg := testConfig()
	cfg.Prices["out"] = spend.Price{OutputPerMTok: 1000} // $0.001 per output token
	cfg.DefaultOutputTokens = 300
	l := newLimiter(t, cfg, spend.Options{})
	d := admit(t, l, t0, spend.Request{Model: "out"})
	if !near(d.EstimatedUSD, 0.3, 1e-12) {
		t.Fatalf("before any usage: $%v, want $0.3 (default_output_tokens 300)", d.EstimatedUSD)
	}
	for _, out := range []int64{100, 200} {
		d := admit(t, l, t0, spend.Request{Model: "out"})
		if _, err := l.Reconcile(t0, d.Reservation, contract.Usage{Output: out}, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Reconcile(t0, d.Reservation, contract.Usage{}, false); err != nil { // no usage: not an observation
		t.Fatal(err)
	}
	if d := admit(t, l, t0, spend.Request{Model: "out"}); !near(d.EstimatedUSD, 0.15, 1e-12) {
		t.Fatalf("after outputs of 100 and 200: $%v, want $0.15", d.EstimatedUSD)
	}
	if d := admit(t, l, t0, spend.Request{Model: "out", MaxOutputTokens: 50}); !near(d.EstimatedUSD, 0.05, 1e-12) {
		t.Fatalf("with max_tokens 50: $%v", d.EstimatedUSD)
	}
}

// TestTrackedNamesAreBounded: tenants and models beyond the bound share
// "(other)", so metric labels and ledger scopes stay bounded.
func TestTrackedNamesAreBounded(t *testing.T) {
	cfg := testConfig()
	cfg.UnknownModel, cfg.DefaultPrice = spend.UnknownModelDefault, &spend.Price{InputPerMTok: 1}
	l := newLimiter(t, cfg, spend.Options{})
	for i := range 100 {
		d := admit(t, l, t0, spend.Request{Tenant: fmt.Sprintf("t%d", i), Model: fmt.Sprintf("m%d", i), EstimatedInputTokens: 1})
		l.Cancel(t0, d.Reservation)
	}
	s := l.Snapshot(t0)
	if n := len(s.Tenants); n != 3+32+1 { // configured + 32 + (other)
		t.Errorf("%d tenants tracked, want 36", n)
	}
	if n := len(s.Models); n != 4+32+1 {
		t.Errorf("%d models tracked, want 37", n)
	}
}

func TestEmptyTenantIsAnonymous(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	d := admit(t, l, t0, spend.Request{Model: "unit", EstimatedInputTokens: 1})
	if d.Reservation.Tenant() != contract.AnonymousTenant {
		t.Errorf("tenant %q", d.Reservation.Tenant())
	}
}

// TestRunawayTenantCannotCrowdOthersOut: two tenants without budgets of
// their own share the $120/h ceiling. "runaway" sends interactive calls at
// twice the ceiling, "steady" a trickle of batch. Without the fair-share
// rule the runaway holds the global rate between batch's threshold (0.975)
// and interactive's (0.9875), so most batch calls of steady are refused
// while the runaway is refused last; with it, once the ceiling is under
// pressure (0.8) the runaway is over its share of that stage, the ceiling
// refuses it like speculative work, and steady is never refused.
func TestRunawayTenantCannotCrowdOthersOut(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	type tally struct{ tried, refused, overShare int }
	var runaway, steady tally
	try := func(now time.Time, tenant string, rank int, usd float64, tl *tally) {
		tl.tried++
		tokens := int64(usd*1000 + 0.5)
		d := admit(t, l, now, spend.Request{Tenant: tenant, Model: "unit", Rank: rank, EstimatedInputTokens: tokens})
		if d.OverShare {
			tl.overShare++
		}
		if !d.Allow {
			tl.refused++
			return
		}
		if _, err := l.Reconcile(now, d.Reservation, contract.Usage{Input: tokens}, true); err != nil {
			t.Fatal(err)
		}
	}
	maxFrac := 0.0
	for s := 0; s < 15*60; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		try(now, "runaway", 4, 0.07, &runaway) // $252/h offered
		try(now, "steady", 3, 0.002, &steady)  // $7.2/h
		maxFrac = max(maxFrac, l.Snapshot(now).Global.RatePerHour/120)
	}
	t.Logf("runaway %+v, steady %+v, global peak %.4f of the ceiling", runaway, steady, maxFrac)
	if steady.refused != 0 || steady.overShare != 0 {
		t.Errorf("steady: %+v, want nothing refused: it spends far less than its share", steady)
	}
	if runaway.refused < runaway.tried/3 || runaway.overShare == 0 {
		t.Errorf("runaway: %+v, want it over its share and refused", runaway)
	}
	// The runaway is held from the first stage (0.8) on: the rate stays
	// below even the over-quota rank's threshold (0.9625).
	if maxFrac >= 0.9 {
		t.Errorf("global rate reached %.4f of the ceiling, want the runaway held near 0.8", maxFrac)
	}
	if got := findScope(l.Snapshot(t0.Add(15*time.Minute)).Tenants, "runaway").OverShare; got != int64(runaway.overShare) {
		t.Errorf("snapshot over_share = %d, want %d", got, runaway.overShare)
	}
	if got := gather(t, l)["sluice_spend_over_share_total"]["tenant=runaway"]; got != float64(runaway.overShare) {
		t.Errorf("sluice_spend_over_share_total{tenant=runaway} = %v, want %d", got, runaway.overShare)
	}
}

// TestFairShareIsMaxMin: the first stage ($96/h of the $120/h ceiling) is
// shared max-min among the tenants that spent in the window. A tenant
// spending less than an equal share keeps it, and leaves the rest to the
// others; a lone tenant has it all.
func TestFairShareIsMaxMin(t *testing.T) {
	now := t0.Add(4*time.Minute + 10*time.Second)
	at := t0.Add(4 * time.Minute) // spend inside the 5-minute window: $1 there is $12/h
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, at, "solo", 9.7) // 0.97 of the ceiling, $116.4/h
	if d := admit(t, l, now, spend.Request{Tenant: "solo", Model: "unit", Rank: 4}); !d.Allow || d.OverShare {
		t.Fatalf("lone tenant at 0.97: %+v, want its interactive call allowed", d)
	}

	// small $1.2/h, medium $30/h, big $84/h: 0.96 of the ceiling. Max-min
	// shares of $96/h: small keeps $1.2, medium keeps $30 (under the equal
	// $47.4 of what is left), big's share is the remaining $64.8.
	l = newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, at, "small", 0.1)
	spendUSD(t, l, at, "medium", 2.5)
	spendUSD(t, l, at, "big", 7)
	for tenant, over := range map[string]bool{"small": false, "medium": false, "big": true} {
		d := admit(t, l, now, spend.Request{Tenant: tenant, Model: "unit", Rank: 4})
		if d.OverShare != over || d.Allow == over {
			t.Errorf("%s at 0.96 of the ceiling: %+v, want over its share %v", tenant, d, over)
		}
		if over && d.Rejection.Reason != admission.ReasonSpendCeiling {
			t.Errorf("%s refused with %v, want spend_ceiling", tenant, d.Rejection.Reason)
		}
		if over {
			// Retry-After: when the first stage clears (every rate here
			// decays alike, so big stays over its share until then).
			checkRetryAfter(t, l, now, spend.Request{Tenant: tenant, Model: "unit", Rank: 4}, d.Rejection.RetryAfter)
		}
	}

	// Under the first stage nobody is over a share, however unequal.
	l = newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, at, "small", 0.1)
	spendUSD(t, l, at, "big", 7.5) // 0.76 of the ceiling
	if d := admit(t, l, now, spend.Request{Tenant: "big", Model: "unit", Rank: 4}); !d.Allow || d.OverShare {
		t.Fatalf("big at 0.76 of the ceiling: %+v, want allowed", d)
	}
}
