package admission

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// servedCost runs two or more backlogged tenants through a Core in virtual
// time — service time proportional to cost — and returns the cost each was
// granted between from and to.
func servedCost(t *testing.T, cfg Config, reqs map[string]Request, rate float64, dur, from time.Duration) map[string]float64 {
	t.Helper()
	c := newCore(t, cfg)
	const perCost = 10 * time.Millisecond
	h := &harness{t: t, c: c, serviceOf: func(r Request) time.Duration {
		cost, _ := r.cost()
		return time.Duration(cost * float64(perCost))
	}}
	got := map[string]float64{}
	h.onGrant = func(a *arrival, now time.Time) {
		if now.Sub(t0) >= from && now.Sub(t0) < dur {
			cost, _ := a.req.cost()
			got[a.req.Tenant] += cost
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	var lists [][]*arrival
	for _, name := range []string{"a", "b", "c"} {
		if r, ok := reqs[name]; ok {
			r.Tenant = name
			lists = append(lists, poisson(rng, t0, rate, dur, r))
		}
	}
	h.run(merge(lists...))
	return got
}

// TestFairShareByCost: within a rank tenants share the estimated cost of
// the work, weighted, not the count of requests. Under plain round robin
// the tenant sending prompts sixteen times the size would get sixteen
// times the provider.
func TestFairShareByCost(t *testing.T) {
	tests := []struct {
		name  string
		reqs  map[string]Request
		tcfg  map[string]TenantShare
		share map[string]float64 // expected fraction of the served cost
	}{
		{
			name:  "16x cost, equal weights",
			reqs:  map[string]Request{"a": {Cost: 1}, "b": {Cost: 16}},
			share: map[string]float64{"a": 0.5, "b": 0.5},
		},
		{
			name:  "equal cost, weights 1:3",
			reqs:  map[string]Request{"a": {}, "b": {}},
			tcfg:  map[string]TenantShare{"b": {Weight: 3}},
			share: map[string]float64{"a": 0.25, "b": 0.75},
		},
		{
			name:  "4x cost at weight 2 beside weight 1",
			reqs:  map[string]Request{"a": {Cost: 4}, "b": {Cost: 1}},
			tcfg:  map[string]TenantShare{"a": {Weight: 2}},
			share: map[string]float64{"a": 2.0 / 3, "b": 1.0 / 3},
		},
		{
			name:  "three tenants, 1, 8 and 16",
			reqs:  map[string]Request{"a": {Cost: 1}, "b": {Cost: 8}, "c": {Cost: 16}},
			share: map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 4 slots at 10ms per unit of cost: 400 cost/s. Every tenant
			// sends 500 requests/s, more than any share even at cost 1.
			got := servedCost(t, Config{Concurrency: 4, MaxQueue: 4000, Tenants: tt.tcfg},
				tt.reqs, 500, 20*time.Second, 5*time.Second)
			var total float64
			for _, v := range got {
				total += v
			}
			for name, want := range tt.share {
				frac := got[name] / total
				t.Logf("%s: %.0f of %.0f served cost (%.3f, want %.3f)", name, got[name], total, frac, want)
				if math.Abs(frac-want) > 0.1*want {
					t.Errorf("%s got %.3f of the served cost, want %.3f ± 10%%", name, frac, want)
				}
			}
		})
	}
}

// TestFloodAcrossRanks: one tenant sending interactive work at 1.4× capacity
// beside five tenants at 30% of capacity, half interactive and half batch
// with 30s deadlines. The flood's excess over its fair share is served as
// over-quota work, so the five keep their batch work; the flood still gets
// the capacity they leave.
func TestFloodAcrossRanks(t *testing.T) {
	const (
		slots   = 20
		service = 200 * time.Millisecond // capacity 100/s
		dur     = 120 * time.Second
	)
	c := newCore(t, Config{Concurrency: slots, MaxQueue: 200})
	h := &harness{t: t, c: c, service: func(string) time.Duration { return service }}
	rng := rand.New(rand.NewPCG(11, 11))
	deadline := func(as []*arrival, d time.Duration) []*arrival {
		for _, a := range as {
			a.req.Deadline = a.at.Add(d)
		}
		return as
	}
	flood := deadline(poisson(rng, t0, 140, dur, Request{Tenant: "flood", Class: ClassInteractive}), 10*time.Second)
	lists := [][]*arrival{flood}
	var inter, batch []*arrival
	for _, name := range []string{"t1", "t2", "t3", "t4", "t5"} {
		i := deadline(poisson(rng, t0, 3, dur, Request{Tenant: name, Class: ClassInteractive}), 10*time.Second)
		b := deadline(poisson(rng, t0, 3, dur, Request{Tenant: name, Class: ClassBatch}), 30*time.Second)
		inter, batch = append(inter, i...), append(batch, b...)
		lists = append(lists, i, b)
	}
	h.run(merge(lists...))
	rate := func(as []*arrival) float64 {
		ok := 0
		for _, a := range as {
			if a.success() {
				ok++
			}
		}
		return float64(ok) / float64(len(as))
	}
	ri, rb := rate(inter), rate(batch)
	ok := 0
	for _, a := range flood {
		if a.success() {
			ok++
		}
	}
	left := 100 * (1 - float64(len(inter)+len(batch))/float64(100*dur/time.Second)) // per second
	goodput := float64(ok) / dur.Seconds()
	t.Logf("five: interactive %.4f, batch %.4f; flood goodput %.1f/s of the %.1f/s left", ri, rb, goodput, left)
	if ri < 0.99 || rb < 0.99 {
		t.Errorf("the five kept interactive %.4f, batch %.4f; want ≥ 0.99 each", ri, rb)
	}
	if goodput < 0.95*left {
		t.Errorf("flood goodput %.1f/s, want ≥ 95%% of the %.1f/s the others leave", goodput, left)
	}
}

// TestTenantCaps: a tenant at its MaxInFlight queues while slots are free
// for others, and past its MaxQueue it is refused with queue_full while
// others still queue.
func TestTenantCaps(t *testing.T) {
	c := newCore(t, Config{Concurrency: 4, MaxQueue: 10, Tenants: map[string]TenantShare{
		"a": {MaxInFlight: 1, MaxQueue: 1},
	}})
	arrive := func(ms int, tenant string, tk *Ticket) Decision {
		t.Helper()
		d, err := c.Arrive(at(ms), Request{Tenant: tenant}, tk, true)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var t1, t2, t3, t4 Ticket
	if d := arrive(0, "a", &t1); d.Verdict != Granted {
		t.Fatalf("a's first: %v, want granted", d.Verdict)
	}
	if d := arrive(1, "a", &t2); d.Verdict != Queued {
		t.Fatalf("a's second with 3 slots free: %v, want queued at its cap", d.Verdict)
	}
	if d := arrive(2, "a", &t3); d.Verdict != Rejected || d.Reason != ReasonQueueFull {
		t.Fatalf("a's third: %v %v, want queue_full past its queue share", d.Verdict, d.Reason)
	}
	if d := arrive(3, "b", &t4); d.Verdict != Granted {
		t.Fatalf("b beside a's cap: %v, want granted", d.Verdict)
	}
	if c.InFlight() != 2 || c.Queued() != 1 {
		t.Fatalf("in flight %d queued %d, want 2 and 1", c.InFlight(), c.Queued())
	}
	c.Release(at(10), Request{Tenant: "b"}, Outcome{Result: Unused})
	if t2.Granted() {
		t.Fatal("a's second granted when b's slot freed: a is still at its cap")
	}
	c.Release(at(11), Request{Tenant: "a"}, Outcome{Result: Unused})
	if ev := c.Events(); len(ev) != 1 || ev[0] != &t2 || !t2.Granted() {
		t.Fatalf("a's second not granted when a's own slot freed")
	}
}

// TestTenantQueueShare: a tenant's QueueShare is its part of each gate's
// own waiting room, at least one place, and follows the bound when a
// reconfiguration changes it.
func TestTenantQueueShare(t *testing.T) {
	queued := func(c *Core, ms int) int {
		t.Helper()
		n := 0
		for {
			d, err := c.Arrive(at(ms), Request{Tenant: "a"}, &Ticket{}, true)
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict == Rejected {
				if d.Reason != ReasonQueueFull {
					t.Fatalf("refused with %v, want queue_full", d.Reason)
				}
				return n
			}
			if d.Verdict == Queued {
				n++
			}
		}
	}
	share := map[string]TenantShare{"a": {QueueShare: 0.25}}
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 8, Tenants: share})
	if n := queued(c, 0); n != 2 {
		t.Fatalf("a quarter of 8 places: a queued %d, want 2", n)
	}
	if err := c.Reconfigure(at(1), Config{Concurrency: 1, MaxQueue: 40, Tenants: share}); err != nil {
		t.Fatal(err)
	}
	if n := queued(c, 2); n != 8 {
		t.Fatalf("a quarter of 40 places, 2 already queued: a queued %d more, want 8", n)
	}
	tiny := newCore(t, Config{Concurrency: 1, MaxQueue: 2, Tenants: map[string]TenantShare{"a": {QueueShare: 0.01}}})
	if n := queued(tiny, 0); n != 1 {
		t.Fatalf("a share rounding to nothing: a queued %d, want 1 place", n)
	}
}

func TestTenantShareValidateNamesTheKey(t *testing.T) {
	for _, tt := range []struct {
		tc  TenantShare
		key string
	}{
		{TenantShare{Weight: -1}, "weight"},
		{TenantShare{Weight: math.NaN()}, "weight"},
		{TenantShare{MaxInFlight: MaxConcurrency + 1}, "max_concurrency"},
		{TenantShare{QueueShare: 2}, "queue_share"},
	} {
		if err := tt.tc.Validate(); err == nil || !strings.HasPrefix(err.Error(), tt.key+":") {
			t.Errorf("%+v: %v, want an error naming %s", tt.tc, err, tt.key)
		}
	}
	if err := (TenantShare{Weight: 3, MaxInFlight: 2, QueueShare: 1}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestTenantShareErrors(t *testing.T) {
	for _, tt := range []struct {
		tc   TenantShare
		want string
	}{
		{TenantShare{Weight: -1}, "Weight"},
		{TenantShare{Weight: math.NaN()}, "Weight"},
		{TenantShare{Weight: math.Inf(1)}, "Weight"},
		{TenantShare{Weight: 2e6}, "Weight"},
		{TenantShare{MaxInFlight: -1}, "MaxInFlight"},
		{TenantShare{MaxQueue: -1}, "MaxQueue"},
		{TenantShare{QueueShare: 1.5}, "QueueShare"},
		{TenantShare{QueueShare: math.NaN()}, "QueueShare"},
		{TenantShare{QueueShare: 0.5, MaxQueue: 2}, "both MaxQueue and QueueShare"},
	} {
		_, err := NewCore(Config{Concurrency: 1, Tenants: map[string]TenantShare{"x": tt.tc}})
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%+v: error %v, want one naming %s of tenant x", tt.tc, err, tt.want)
		}
	}
	c := newCore(t, Config{Concurrency: 1})
	for _, cost := range []float64{-1, math.NaN(), math.Inf(1)} {
		var tk Ticket
		if _, err := c.Arrive(t0, Request{Cost: cost}, &tk, true); err == nil || !strings.Contains(err.Error(), "Cost") {
			t.Errorf("cost %v: error %v, want one naming Cost", cost, err)
		}
		if _, err := c.Estimate(t0, Request{Cost: cost}); err == nil {
			t.Errorf("cost %v: Estimate accepted it", cost)
		}
	}
}

// TestEvictionByShare: at the bound, a tenant within its share evicts a
// flood's queued work of a higher class (the flood's excess is over-quota
// work), even as the flood's first competitor; a tenant over its share may
// displace low-tier work, not another's excess.
func TestEvictionByShare(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 2})
	arrive := func(ms int, req Request) (*Ticket, Decision) {
		t.Helper()
		tk := &Ticket{}
		d, err := c.Arrive(at(ms), req, tk, true)
		if err != nil {
			t.Fatal(err)
		}
		return tk, d
	}
	arrive(0, Request{Tenant: "f"})
	arrive(1, Request{Tenant: "f"})
	last, _ := arrive(2, Request{Tenant: "f"})
	if c.Queued() != 2 {
		t.Fatalf("queued %d, want the bound, 2", c.Queued())
	}
	_, d := arrive(3, Request{Tenant: "g", Class: ClassBatch})
	if d.Verdict != Queued {
		t.Fatalf("g's batch beside f's flood at the bound: %v %v, want queued", d.Verdict, d.Reason)
	}
	if r := last.Rejection(); r == nil || r.Reason != ReasonEvicted {
		t.Fatalf("f's newest interactive: %+v, want evicted by g's batch", r)
	}
	// f is over its share: its next request cannot evict g (within its
	// share) nor f's own, but would displace low-tier work.
	if _, d := arrive(4, Request{Tenant: "f"}); d.Verdict != Rejected || d.Reason != ReasonQueueFull {
		t.Fatalf("f's next: %v %v, want queue_full", d.Verdict, d.Reason)
	}

	c = newCore(t, Config{Concurrency: 1, MaxQueue: 2})
	arrive(0, Request{Tenant: "f"})
	low, _ := arrive(1, Request{Tenant: "l", Tier: TierLow})
	arrive(2, Request{Tenant: "f"})
	if _, d := arrive(3, Request{Tenant: "f"}); d.Verdict != Queued {
		t.Fatalf("f's excess beside low-tier work at the bound: %v %v, want queued", d.Verdict, d.Reason)
	}
	if r := low.Rejection(); r == nil || r.Reason != ReasonEvicted {
		t.Fatalf("the low-tier call: %+v, want evicted by f's excess", r)
	}
}
