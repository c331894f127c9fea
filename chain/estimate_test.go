package chain

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/retrybudget"
)

// unitPrices price "unit" at $0.001 an input token; the ceiling is $120/h,
// $10 in the 5-minute rate window; acme's budget is $12/h, $1 in it.
const unitPrices = `
prices:
  unit:  {input_per_mtok: 1000}
  big:   {input_per_mtok: 1000}
  small: {input_per_mtok: 100}
ladder: {big: small}
ceiling_per_hour: 120
tenants:
  acme: {per_hour: 12}
`

// estimateCore is a chain with every stage: two tenants, retry budgets
// that hold one token at most and refill slowly, spend with the prices
// above, and a gate of four slots.
func estimateCore(t *testing.T) *Core {
	t.Helper()
	rb := retrybudget.Config{Ratio: 0.1, MinPerSecond: 0.01, MaxTokens: 1}
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 4, MaxQueue: 8, InitialServiceTime: time.Second},
		Tenants:   []TenantConfig{{Name: "acme"}, {Name: "other"}, {Name: "loader"}},
		Retries:   RetryConfig{Budget: rb, PerTenant: rb},
		Spend:     limiter(t, unitPrices),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// spendAt books usd of spend by tenant at now through the chain.
func spendAt(t *testing.T, c *Core, now time.Time, tenant string, usd float64) {
	t.Helper()
	tokens := int64(usd*1000 + 0.5)
	tk := new(Ticket)
	d, err := c.Arrive(now, Request{Tenant: tenant, Model: "unit", InputTokens: tokens, MaxOutputTokens: 1}, tk, false)
	if err != nil || d.Verdict != admission.Granted {
		t.Fatalf("spend of $%v by %s: %+v, %v", usd, tenant, d, err)
	}
	if err := c.Release(now, tk, Outcome{Result: admission.Success, ServiceTime: time.Second,
		Usage: contract.Usage{Input: tokens}, UsageKnown: true}); err != nil {
		t.Fatal(err)
	}
}

// state is everything of a chain an estimate must not change.
type state struct {
	Spend       any
	Gate        admission.Stats
	RetryGlobal float64
	RetryStats  retrybudget.Stats
	Tenants     int
	Lines       int
}

func stateOf(c *Core, now time.Time) state {
	st := state{Spend: c.stages.spend.l.Snapshot(now), Gate: c.Gate().Stats(now),
		RetryGlobal: c.stages.retries.global.Balance(now), RetryStats: c.stages.retries.global.Stats()}
	c.stages.retries.mu.Lock()
	st.Tenants = len(c.stages.retries.tenant)
	for _, b := range c.stages.retries.tenant {
		st.RetryGlobal += 1000 * b.Balance(now)
	}
	c.stages.retries.mu.Unlock()
	c.stages.spread.mu.Lock()
	st.Lines = len(c.stages.spread.mu.next)
	c.stages.spread.mu.Unlock()
	return st
}

// TestEstimateTellsWhatTheCallGets: for a call refused by the spend
// ceiling, by its tenant's budget, by the retry budget, degraded by the
// ladder, or admitted, the estimate answers what Arrive then does — the
// verdict, the reason, the Retry-After, the model — and a hundred
// estimates before it change nothing: no token withdrawn or deposited,
// nothing reserved or counted, no line on the retry calendar.
func TestEstimateTellsWhatTheCallGets(t *testing.T) {
	now := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name    string
		setup   func(*Core)
		req     Request
		verdict admission.Verdict
		reason  admission.Reason
		model   string
	}{
		{name: "admitted", req: Request{Tenant: "other", Model: "big", InputTokens: 10, MaxOutputTokens: 1},
			verdict: admission.Granted, model: "big"},
		{name: "spend ceiling", setup: func(c *Core) { spendAt(t, c, now, "loader", 10) },
			req:     Request{Tenant: "other", Model: "big", InputTokens: 10, MaxOutputTokens: 1},
			verdict: admission.Rejected, reason: admission.ReasonSpendCeiling, model: "big"},
		{name: "tenant budget", setup: func(c *Core) { spendAt(t, c, now, "acme", 1) },
			req:     Request{Tenant: "acme", Model: "big", InputTokens: 10, MaxOutputTokens: 1},
			verdict: admission.Rejected, reason: admission.ReasonTenantBudget, model: "big"},
		{name: "retry budget", setup: func(c *Core) { spendAt(t, c, now, "other", 0.001) },
			req:     Request{Tenant: "other", Attempt: 1, Model: "big", InputTokens: 10, MaxOutputTokens: 1},
			verdict: admission.Rejected, reason: admission.ReasonRetryBudget, model: "big"},
		{name: "retry budget, tenant never seen", req: Request{Tenant: "acme", Attempt: 2, Model: "big", MaxOutputTokens: 1},
			verdict: admission.Rejected, reason: admission.ReasonRetryBudget, model: "big"},
		{name: "degraded", setup: func(c *Core) { spendAt(t, c, now, "loader", 9.2) },
			req:     Request{Tenant: "other", Model: "big", InputTokens: 10, MaxOutputTokens: 1},
			verdict: admission.Granted, model: "small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := estimateCore(t)
			if tc.setup != nil {
				tc.setup(c)
			}
			before := stateOf(c, now)
			var e Estimate
			for range 100 {
				var err error
				if e, err = c.Estimate(now, tc.req); err != nil {
					t.Fatal(err)
				}
			}
			if after := stateOf(c, now); !reflect.DeepEqual(before, after) {
				t.Fatalf("estimates changed the chain:\nbefore %+v\nafter  %+v", before, after)
			}
			if e.Verdict != tc.verdict || e.Reason != tc.reason || e.Request.Model != tc.model {
				t.Fatalf("estimate %+v (model %s), want %v %v %s", e.Decision, e.Request.Model, tc.verdict, tc.reason, tc.model)
			}
			tk := new(Ticket)
			d, err := c.Arrive(now, tc.req, tk, true)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict != tc.verdict {
				t.Fatalf("Arrive: %+v, the estimate said %v", d, e.Verdict)
			}
			if d.Verdict == admission.Rejected {
				if d.Rejection.Reason != e.Reason || d.Rejection.RetryAfter != e.RetryAfter {
					t.Fatalf("Arrive refused with %v after %v; the estimate said %v after %v",
						d.Rejection.Reason, d.Rejection.RetryAfter, e.Reason, e.RetryAfter)
				}
				return
			}
			if got := tk.Request().Model; got != tc.model {
				t.Fatalf("Arrive called %s, the estimate said %s", got, tc.model)
			}
		})
	}
}

// TestEstimateReportsBadInputAsArriveDoes: an unknown key, a class the
// tenant may not use, an unknown class are errors of the estimate too.
func TestEstimateReportsBadInputAsArriveDoes(t *testing.T) {
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 1},
		Tenants: []TenantConfig{{Name: "a", APIKeysSHA256: []string{HashKey("key-a")},
			Classes: []string{admission.ClassBatch}, DisallowedClass: "refuse"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []Request{
		{APIKey: "nope"},
		{APIKey: "key-a", Class: admission.ClassInteractive},
		{APIKey: "key-a", Class: "no-such-class"},
	} {
		_, eerr := c.Estimate(t0, req)
		_, aerr := c.Arrive(t0, req, new(Ticket), true)
		if eerr == nil || aerr == nil || eerr.Error() != aerr.Error() {
			t.Errorf("%+v: estimate %v, Arrive %v; want the same error", req, eerr, aerr)
		}
	}
}

// TestRefusalsTogetherAreSpreadAtTheGatesRate: N calls refused by the gate
// in the same instant are told N distinct times, one Interval (the gate's
// time per completion: 1s over 1 slot) apart from the base recovery on —
// the rate at which it can admit them — instead of one time for all.
func TestRefusalsTogetherAreSpreadAtTheGatesRate(t *testing.T) {
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 1, MaxQueue: 1, InitialServiceTime: time.Second},
		Retries:   RetryConfig{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Deadline: t0.Add(time.Minute)}
	for i, want := range []admission.Verdict{admission.Granted, admission.Queued} {
		if d, err := c.Arrive(t0, req, new(Ticket), true); err != nil || d.Verdict != want {
			t.Fatalf("call %d: %+v %v, want %v", i, d, err, want)
		}
	}
	interval := c.Gate().Interval()
	if interval != time.Second {
		t.Fatalf("interval %v, want 1s", interval)
	}
	e, err := c.Estimate(t0, req)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var first time.Duration
	for i := range n {
		d, err := c.Arrive(t0, req, new(Ticket), true)
		if err != nil || d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueFull {
			t.Fatalf("call %d: %+v %v, want queue_full", i, d, err)
		}
		ra := d.Rejection.RetryAfter
		if i == 0 {
			first = ra
			// The base — one completion, which makes room in the queue —
			// and half an interval, not to race it.
			if ra != 1500*time.Millisecond || e.RetryAfter != ra {
				t.Fatalf("first refusal told %v (the estimate said %v), want 1.5s", ra, e.RetryAfter)
			}
			continue
		}
		if want := first + time.Duration(i)*interval; ra != want {
			t.Fatalf("refusal %d told %v, want %v", i, ra, want)
		}
	}
	// A batch call's retry competes with the interactive calls' retries
	// (at the retry rank): it is in their line. A speculative call's, a
	// rank below, has a line of its own.
	d, _ := c.Arrive(t0, Request{Class: admission.ClassBatch, Deadline: t0.Add(time.Minute)}, new(Ticket), true)
	if want := first + n*interval; d.Rejection == nil || d.Rejection.RetryAfter != want {
		t.Fatalf("batch refusal %+v, want %v", d.Rejection, want)
	}
	d, _ = c.Arrive(t0, Request{Class: admission.ClassSpeculative, Deadline: t0.Add(time.Minute)}, new(Ticket), true)
	if d.Rejection == nil || d.Rejection.RetryAfter != first {
		t.Fatalf("speculative refusal %+v, want the line's first time %v", d.Rejection, first)
	}
	// Later, the line continues where it stopped, relative to now.
	d, _ = c.Arrive(t0.Add(5*time.Second), req, new(Ticket), true)
	if want := first + (n+1)*interval - 5*time.Second; d.Rejection == nil || d.Rejection.RetryAfter != want {
		t.Fatalf("refusal 5s later %+v, want %v", d.Rejection, want)
	}
}

// TestSpreadWrapsAtItsHorizon: the line never runs more than the horizon
// past the base; off, everyone is told the base.
func TestSpreadWrapsAtItsHorizon(t *testing.T) {
	s := newSpread(3 * time.Second)
	gate := fixedGate(time.Second)
	var got []time.Duration
	for range 6 {
		rej := &admission.Rejection{Reason: admission.ReasonQueueWait, RetryAfter: 500 * time.Millisecond}
		s.assign(t0, rej, &Request{}, gate)
		got = append(got, rej.RetryAfter)
	}
	want := []time.Duration{1000 * time.Millisecond, 2000 * time.Millisecond, 3000 * time.Millisecond, 4000 * time.Millisecond,
		1000 * time.Millisecond, 2000 * time.Millisecond}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("times %v, want %v", got, want)
	}
	off := newSpread(-1)
	for range 3 {
		rej := &admission.Rejection{Reason: admission.ReasonQueueWait, RetryAfter: 500 * time.Millisecond}
		off.assign(t0, rej, &Request{}, gate)
		if rej.RetryAfter != 500*time.Millisecond {
			t.Fatalf("spread off: %v, want the base", rej.RetryAfter)
		}
	}
	// A budget's refusal is spread by its own interval, on its tenant's
	// line, from the base itself: the token is there at the base.
	for i, tenant := range []string{"a", "a", "b"} {
		rej := &admission.Rejection{Reason: admission.ReasonRetryBudget, RetryAfter: 100 * time.Millisecond, Interval: 100 * time.Millisecond}
		s.assign(t0, rej, &Request{Tenant: tenant}, gate)
		if want := []time.Duration{100, 200, 100}[i] * time.Millisecond; rej.RetryAfter != want {
			t.Fatalf("retry budget refusal %d of %s: %v, want %v", i, tenant, rej.RetryAfter, want)
		}
	}
}

// fixedGate is a gate whose Interval is fixed and whose every call has
// rank 0.
type fixedGate time.Duration

func (g fixedGate) Interval() time.Duration           { return time.Duration(g) }
func (fixedGate) Rank(admission.Request) (int, error) { return 0, nil }
