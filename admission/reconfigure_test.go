package admission

import (
	"strings"
	"testing"
	"time"
)

// TestReconfigureQueueBoundBelowDepth lowers the waiting room's bound
// below the queue's depth: every queued ticket stays (no event), newcomers
// see the new bound until grants bring the depth under it, and the
// service-time window and counters carry on.
func TestReconfigureQueueBoundBelowDepth(t *testing.T) {
	cfg := Config{Concurrency: 2, MaxQueue: 4}
	c := newCore(t, cfg)
	warm(c, 100*time.Millisecond, 20)
	var held [2]Ticket
	for i := range held {
		if d := mustArrive(t, c, at(0), Request{}, &held[i]); d.Verdict != Granted {
			t.Fatalf("arrival %d: %v, want granted", i, d.Verdict)
		}
	}
	var queued [4]Ticket
	for i := range queued {
		if d := mustArrive(t, c, at(1), Request{}, &queued[i]); d.Verdict != Queued {
			t.Fatalf("queued arrival %d: %v", i, d.Verdict)
		}
	}
	before := c.Stats(at(2))

	cfg.MaxQueue = 1
	if err := c.Reconfigure(at(2), cfg); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 0 || c.Queued() != 4 || c.MaxQueue() != 1 {
		t.Fatalf("after lowering the bound: %d events, %d queued, bound %d; want 0, 4 kept, 1", len(ev), c.Queued(), c.MaxQueue())
	}
	after := c.Stats(at(2))
	if after.ServiceSamples != before.ServiceSamples || after.Enqueued != before.Enqueued || after.Admitted != before.Admitted {
		t.Fatalf("stats reset by a reload: before %+v after %+v", before, after)
	}
	var late Ticket
	if d := mustArrive(t, c, at(3), Request{}, &late); d.Verdict != Rejected || d.Reason != ReasonQueueFull {
		t.Fatalf("newcomer over the new bound: %v %v, want queue_full", d.Verdict, d.Reason)
	}
	// Three completions grant three of the four: one left, at the bound.
	for i := range 3 {
		c.Release(at(10+i), Request{}, Outcome{Result: Success, ServiceTime: 100 * time.Millisecond})
		if ev := c.Events(); len(ev) != 1 || !ev[0].Granted() {
			t.Fatalf("release %d: %d events, want one grant", i, len(ev))
		}
	}
	if d := mustArrive(t, c, at(20), Request{}, &late); d.Verdict != Rejected {
		t.Fatalf("at the new bound: %v, want refused", d.Verdict)
	}
	c.Release(at(21), Request{}, Outcome{Result: Success, ServiceTime: 100 * time.Millisecond})
	c.Events()
	if d := mustArrive(t, c, at(22), Request{}, &late); d.Verdict != Queued {
		t.Fatalf("under the new bound: %v, want queued", d.Verdict)
	}
}

// TestReconfigureConcurrency raises and lowers the slots: raising serves
// waiters at once, lowering lets the work in flight finish and grants
// nothing until it is under the new count.
func TestReconfigureConcurrency(t *testing.T) {
	cfg := Config{Concurrency: 1, MaxQueue: 8}
	c := newCore(t, cfg)
	warm(c, 100*time.Millisecond, 20)
	var ts [4]Ticket
	for i := range ts {
		mustArrive(t, c, at(0), Request{}, &ts[i])
	}
	if c.InFlight() != 1 || c.Queued() != 3 {
		t.Fatalf("in flight %d queued %d", c.InFlight(), c.Queued())
	}
	cfg.Concurrency = 3
	if err := c.Reconfigure(at(1), cfg); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 2 || c.InFlight() != 3 || c.Queued() != 1 {
		t.Fatalf("raised to 3: %d grants, %d in flight, %d queued; want 2, 3, 1", len(ev), c.InFlight(), c.Queued())
	}
	cfg.Concurrency = 1
	if err := c.Reconfigure(at(2), cfg); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 0 || c.InFlight() != 3 || c.Queued() != 1 {
		t.Fatalf("lowered to 1: %d events, %d in flight, %d queued; want nothing dropped", len(ev), c.InFlight(), c.Queued())
	}
	for i := range 2 {
		c.Release(at(3+i), Request{}, Outcome{Result: Success, ServiceTime: 100 * time.Millisecond})
		if ev := c.Events(); len(ev) != 0 {
			t.Fatalf("release %d above the new limit granted %d", i, len(ev))
		}
	}
	c.Release(at(6), Request{}, Outcome{Result: Success, ServiceTime: 100 * time.Millisecond})
	if ev := c.Events(); len(ev) != 1 {
		t.Fatalf("under the new limit: %d grants, want 1", len(ev))
	}
}

// TestReconfigureTenants changes a tenant's cap, weight and queue share:
// its queued work held back by the old cap is served as soon as the cap is
// raised, and a lowered queue share refuses its next newcomer while what
// it has queued stays.
func TestReconfigureTenants(t *testing.T) {
	cfg := Config{Concurrency: 4, MaxQueue: 16, Tenants: map[string]TenantShare{"a": {MaxInFlight: 1}}}
	c := newCore(t, cfg)
	warm(c, 100*time.Millisecond, 20)
	var ts [3]Ticket
	for i := range ts {
		mustArrive(t, c, at(0), Request{Tenant: "a"}, &ts[i])
	}
	if c.InFlight() != 1 || c.Queued() != 2 {
		t.Fatalf("capped tenant: in flight %d queued %d, want 1 and 2", c.InFlight(), c.Queued())
	}
	cfg.Tenants = map[string]TenantShare{"a": {MaxInFlight: 3, Weight: 2, MaxQueue: 1}}
	if err := c.Reconfigure(at(1), cfg); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 2 || c.InFlight() != 3 {
		t.Fatalf("cap raised to 3: %d grants, %d in flight; want 2 and 3", len(ev), c.InFlight())
	}
	if ts := c.tenants["a"]; ts.weight != 2 || ts.maxQueue != 1 {
		t.Fatalf("tenant state %+v, want weight 2 and a queue share of 1", *ts)
	}
	// At its cap again: one queues, the next is past its new share.
	var more [2]Ticket
	if d := mustArrive(t, c, at(2), Request{Tenant: "a"}, &more[0]); d.Verdict != Queued {
		t.Fatalf("at the cap: %v, want queued", d.Verdict)
	}
	if d := mustArrive(t, c, at(2), Request{Tenant: "a"}, &more[1]); d.Verdict != Rejected || d.Reason != ReasonQueueFull {
		t.Fatalf("past the new queue share: %v %v, want queue_full", d.Verdict, d.Reason)
	}
	// Removing the tenant's entry gives it the defaults: no cap.
	cfg.Tenants = nil
	if err := c.Reconfigure(at(3), cfg); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 1 || c.InFlight() != 4 {
		t.Fatalf("cap removed: %d grants, %d in flight; want 1 and 4", len(ev), c.InFlight())
	}
}

// TestReconfigureRefusesWithoutChange: an invalid config, or one that
// changes what cannot change while the gate runs, is refused naming the
// field, and the running policy stays whole.
func TestReconfigureRefusesWithoutChange(t *testing.T) {
	cfg := Config{Concurrency: 2, MaxQueue: 4}
	c := newCore(t, cfg)
	ranks := DefaultRanks()
	ranks.Classes["urgent"] = 6
	for _, tc := range []struct {
		mut   func(*Config)
		field string
	}{
		{func(c *Config) { c.Concurrency = -1 }, "Concurrency"},
		{func(c *Config) { c.MaxQueue = -1 }, "MaxQueue"},
		{func(c *Config) { c.Tenants = map[string]TenantShare{"a": {Weight: -1}} }, "Weight"},
		{func(c *Config) { c.Ranks = ranks }, "Ranks"},
		{func(c *Config) { c.WaitEstimator = ByMedian }, "WaitEstimator"},
		{func(c *Config) { c.ServiceWindow = 512 }, "ServiceWindow"},
		{func(c *Config) { c.InitialServiceTime = time.Second }, "InitialServiceTime"},
		{func(c *Config) { c.FIFOOnly = true }, "FIFOOnly"},
		{func(c *Config) { c.NoEarlyRefusal = true }, "NoEarlyRefusal"},
	} {
		next := Config{Concurrency: 7, MaxQueue: 9}
		tc.mut(&next)
		err := c.Reconfigure(at(0), next)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming it", tc.field, err)
		}
		if c.Concurrency() != 2 || c.MaxQueue() != 4 {
			t.Fatalf("%s: refused, yet concurrency %d and bound %d changed", tc.field, c.Concurrency(), c.MaxQueue())
		}
	}
	// Zero slots: the slots as they are.
	if err := c.Reconfigure(at(0), Config{MaxQueue: 5}); err != nil || c.Concurrency() != 2 || c.MaxQueue() != 5 {
		t.Fatalf("zero concurrency: %v, concurrency %d bound %d; want 2 kept, bound 5", err, c.Concurrency(), c.MaxQueue())
	}
	// The defaults written out are the same ranks.
	if err := c.Reconfigure(at(0), Config{Concurrency: 3, MaxQueue: 4, Ranks: DefaultRanks()}); err != nil {
		t.Fatalf("the default ranks spelled out: %v", err)
	}
}

// TestGateReconfigureWakesWaiters: the blocking gate's waiters granted by
// a raised limit are woken.
func TestGateReconfigureWakesWaiters(t *testing.T) {
	cfg := Config{Concurrency: 1, MaxQueue: 4}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Acquire(t.Context(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		q, err := g.Acquire(t.Context(), Request{})
		if err == nil {
			q.Done(Outcome{Result: Success})
		}
		got <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for g.Stats().Queued != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
		time.Sleep(time.Millisecond)
	}
	cfg.Concurrency = 2
	if err := g.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the raise: %v", err)
	}
	if g.MaxQueue() != 4 {
		t.Fatalf("bound %d", g.MaxQueue())
	}
	p.Done(Outcome{Result: Success})
}

// TestTrialConcurrencyEstimatesAtTheSettledSlots: a gate given 4 slots of
// which 2 are settled sends calls to all 4 but estimates waits, and
// refuses by them, at 2 — the rate a learnt limit's slow start has
// measured, not the one it is trying; SetConcurrency counts every slot
// again; a settled count outside 1..n is an error.
func TestTrialConcurrencyEstimatesAtTheSettledSlots(t *testing.T) {
	c := newCore(t, Config{Concurrency: 2, MaxQueue: 100, FIFOOnly: true})
	warm(c, time.Second, 32)
	if err := c.SetTrialConcurrency(at(0), 4, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if d := mustArrive(t, c, at(0), Request{}, &Ticket{}); d.Verdict != Granted {
			t.Fatalf("call %d: %+v, want granted: all 4 slots are sent to", i, d)
		}
	}
	for range 3 {
		mustArrive(t, c, at(0), Request{}, &Ticket{})
	}
	// Four completions at two slots of 1s: 2s, not the 1s four slots give.
	if wait := c.waitFor(at(0), 4, "", 1, &place{class: noDeadline, due: at(0), units: 1}); wait < 1900*time.Millisecond || wait > 2100*time.Millisecond {
		t.Errorf("estimated wait %v at 2 settled slots of 4, want about 2s", wait)
	}
	if d := mustArrive(t, c, at(0), Request{Deadline: at(2500)}, &Ticket{}); d.Verdict != Rejected || d.Reason != ReasonQueueWait {
		t.Errorf("a 2.5s deadline behind 3 queued at 2 settled slots: %+v, want queue_wait", d)
	}
	if err := c.SetConcurrency(at(0), 4); err != nil {
		t.Fatal(err)
	}
	if wait := c.waitFor(at(0), 4, "", 1, &place{class: noDeadline, due: at(0), units: 1}); wait > 1100*time.Millisecond {
		t.Errorf("estimated wait %v once all 4 slots are settled, want about 1s", wait)
	}
	for _, settled := range []int{0, 5} {
		if err := c.SetTrialConcurrency(at(0), 4, settled); err == nil || !strings.Contains(err.Error(), "settled") {
			t.Errorf("settled %d of 4: error %v, want one naming the settled concurrency", settled, err)
		}
	}
}
