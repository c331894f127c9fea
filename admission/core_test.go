package admission

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func newCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	c, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// warm records n samples of service time d, so estimates are known.
func warm(c *Core, d time.Duration, n int) {
	for range n {
		c.record(time.Time{}, "", 0, 0, Outcome{ServiceTime: d})
	}
}

func mustArrive(t *testing.T, c *Core, now time.Time, req Request, tk *Ticket) Decision {
	t.Helper()
	d, err := c.Arrive(now, req, tk, true)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConfigErrorsNameTheField(t *testing.T) {
	bad := func(mut func(*Config)) Config {
		c := Config{Concurrency: 1, MaxQueue: 1}
		mut(&c)
		return c
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Concurrency"},
		{bad(func(c *Config) { c.Concurrency = -3 }), "Concurrency"},
		{bad(func(c *Config) { c.MaxQueue = -1 }), "MaxQueue"},
		{bad(func(c *Config) { c.MaxQueuePerTenant = -1 }), "MaxQueuePerTenant"},
		{bad(func(c *Config) { c.WaitEstimator = 7 }), "WaitEstimator"},
		{bad(func(c *Config) { c.ServiceWindow = -1 }), "ServiceWindow"},
		{bad(func(c *Config) { c.ServiceWindow = 1 << 30 }), "ServiceWindow"},
		{bad(func(c *Config) { c.MaxKeys = -1 }), "MaxKeys"},
		{bad(func(c *Config) { c.InitialServiceTime = -time.Second }), "InitialServiceTime"},
		{bad(func(c *Config) { c.LIFOTarget = -1 }), "LIFOTarget"},
		{bad(func(c *Config) { c.LIFOInterval = -1 }), "LIFOInterval"},
		{bad(func(c *Config) { c.Ranks = &Ranks{} }), "Ranks.Classes"},
		{bad(func(c *Config) { r := DefaultRanks(); r.Default = "nope"; c.Ranks = r }), "Ranks.Default"},
		{bad(func(c *Config) { r := DefaultRanks(); r.Classes["x"] = 99; c.Ranks = r }), `Ranks.Classes["x"]`},
		{bad(func(c *Config) { r := DefaultRanks(); r.Retry = -1; c.Ranks = r }), "Ranks.Retry"},
		{bad(func(c *Config) { r := DefaultRanks(); r.LowTier = 16; c.Ranks = r }), "Ranks.LowTier"},
		{bad(func(c *Config) { r := DefaultRanks(); r.HighTierBoost = 15; c.Ranks = r }), "Ranks.HighTierBoost"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestRanksDefaultShedOrder(t *testing.T) {
	r := DefaultRanks()
	for _, tc := range []struct {
		req  Request
		want int
	}{
		{Request{}, 4},
		{Request{Class: ClassInteractive}, 4},
		{Request{Class: ClassBatch}, 3},
		{Request{Class: ClassSpeculative}, 0},
		{Request{Class: ClassInteractive, Attempt: 1}, 1},
		{Request{Class: ClassSpeculative, Attempt: 2}, 0},
		{Request{Class: ClassInteractive, Tier: TierLow}, 2},
		{Request{Class: ClassBatch, OverQuota: true}, 2},
		{Request{Class: ClassInteractive, Tier: TierLow, Attempt: 1}, 1},
		{Request{Class: ClassInteractive, Tier: TierHigh}, 5},
		{Request{Class: ClassBatch, Tier: TierHigh}, 4},
		{Request{Class: ClassSpeculative, Tier: TierHigh}, 0},
		{Request{Class: ClassInteractive, Tier: TierHigh, Attempt: 1}, 1},
		{Request{Class: ClassInteractive, Tier: TierHigh, OverQuota: true}, 2},
	} {
		got, err := r.Rank(&tc.req)
		if err != nil || got != tc.want {
			t.Errorf("Rank(%+v) = %d, %v; want %d", tc.req, got, err, tc.want)
		}
	}
	if _, err := r.Rank(&Request{Class: "urgent"}); err == nil || !strings.Contains(err.Error(), "urgent") {
		t.Errorf("unknown class: err = %v", err)
	}
	if _, err := r.Rank(&Request{Attempt: -1}); err == nil {
		t.Error("negative attempt accepted")
	}
	if n := r.Count(); n != 6 {
		t.Errorf("Count = %d, want 6", n)
	}
}

func TestConfiguredRanksAreCopied(t *testing.T) {
	r := DefaultRanks()
	c := newCore(t, Config{Concurrency: 1, Ranks: r})
	r.Classes[ClassBatch] = 0 // the caller's later change must not reach the core
	if got, _ := c.Rank(Request{Class: ClassBatch}); got != 3 {
		t.Fatalf("rank = %d after mutating the caller's Ranks, want 3", got)
	}
}

func TestCoreGrantsFreeSlotsThenQueues(t *testing.T) {
	c := newCore(t, Config{Concurrency: 2, MaxQueue: 10})
	for i := range 2 {
		if d := mustArrive(t, c, at(0), Request{}, &Ticket{}); d.Verdict != Granted {
			t.Fatalf("arrival %d: %v, want Granted", i, d.Verdict)
		}
	}
	var tk Ticket
	if d := mustArrive(t, c, at(0), Request{}, &tk); d.Verdict != Queued {
		t.Fatalf("third arrival: %v, want Queued", d.Verdict)
	}
	c.Release(at(100), Request{}, Outcome{ServiceTime: 100 * time.Millisecond})
	ev := c.Events()
	if len(ev) != 1 || ev[0] != &tk || !tk.Granted() || tk.QueueTime() != 100*time.Millisecond {
		t.Fatalf("events %v, granted %v, queue time %v", ev, tk.Granted(), tk.QueueTime())
	}
	if c.InFlight() != 2 || c.Queued() != 0 {
		t.Fatalf("in flight %d queued %d", c.InFlight(), c.Queued())
	}
}

func TestCoreZeroQueueRefusesWhenBusy(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	d := mustArrive(t, c, at(0), Request{}, &Ticket{})
	if d.Verdict != Rejected || d.Reason != ReasonQueueFull || d.RetryAfter <= 0 {
		t.Fatalf("decision %+v, want queue_full with a RetryAfter", d)
	}
}

func TestCoreAdmitsByWaitNotDepth(t *testing.T) {
	// Two slots, 1s per call: a newcomer behind 3 queued items needs 4
	// completions, 2s. With p95 1s it fits a 3.5s deadline but not 2.5s.
	c := newCore(t, Config{Concurrency: 2, MaxQueue: 100, FIFOOnly: true})
	warm(c, time.Second, 32)
	for range 2 {
		mustArrive(t, c, at(0), Request{}, &Ticket{})
	}
	for range 3 {
		mustArrive(t, c, at(0), Request{}, &Ticket{})
	}
	wait := c.waitFor(at(0), 4, "", 1, &place{class: noDeadline, due: at(0), units: 1})
	if wait < 1900*time.Millisecond || wait > 2100*time.Millisecond {
		t.Fatalf("estimated wait %v, want about 2s", wait)
	}
	d := mustArrive(t, c, at(0), Request{Deadline: at(2500)}, &Ticket{})
	if d.Verdict != Rejected || d.Reason != ReasonQueueWait {
		t.Fatalf("tight deadline: %+v, want queue_wait", d)
	}
	// Honest RetryAfter: the backlog must drain by wait + p95 − budget.
	if want := d.EstimatedWait + d.ServiceP95 - 2500*time.Millisecond; d.RetryAfter != want {
		t.Fatalf("RetryAfter %v, want %v", d.RetryAfter, want)
	}
	if d := mustArrive(t, c, at(0), Request{Deadline: at(3500)}, &Ticket{}); d.Verdict != Queued {
		t.Fatalf("loose deadline: %+v, want Queued", d)
	}

	// The same depth on a bad day (10s calls) turns into a refusal: depth
	// thresholds cannot see this, wait estimates do.
	slow := newCore(t, Config{Concurrency: 2, MaxQueue: 100, FIFOOnly: true})
	warm(slow, 10*time.Second, 32)
	for range 5 {
		mustArrive(t, slow, at(0), Request{}, &Ticket{})
	}
	if d := mustArrive(t, slow, at(0), Request{Deadline: at(3500)}, &Ticket{}); d.Verdict != Rejected {
		t.Fatalf("slow day: %+v, want Rejected", d)
	}
}

func TestCoreNeverStartsWorkThatCannotFinish(t *testing.T) {
	c := newCore(t, Config{Concurrency: 4, MaxQueue: 10})
	warm(c, time.Second, 32)
	// A free slot, but the deadline is shorter than the expected service.
	d := mustArrive(t, c, at(0), Request{Deadline: at(500)}, &Ticket{})
	if d.Verdict != Rejected || d.Reason != ReasonQueueWait {
		t.Fatalf("%+v, want queue_wait", d)
	}
	if d.RetryAfter <= 0 {
		t.Fatalf("RetryAfter %v, want > 0", d.RetryAfter)
	}
	// Already past its deadline.
	d = mustArrive(t, c, at(1000), Request{Deadline: at(999)}, &Ticket{})
	if d.Verdict != Rejected || d.Reason != ReasonExpired {
		t.Fatalf("%+v, want expired", d)
	}
	if c.InFlight() != 0 {
		t.Fatalf("in flight %d", c.InFlight())
	}
}

func TestCoreServesHighestRankFirstFIFOWithin(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, FIFOOnly: true})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	order := []Request{
		{Class: ClassSpeculative, Key: "s1"},
		{Class: ClassBatch, Key: "b1"},
		{Class: ClassInteractive, Attempt: 1, Key: "r1"},
		{Class: ClassInteractive, Key: "i1"},
		{Class: ClassBatch, Key: "b2"},
		{Class: ClassInteractive, Key: "i2"},
	}
	for i, req := range order {
		mustArrive(t, c, at(i), req, &Ticket{})
	}
	var got []string
	for i := range order {
		c.Release(at(100+i), Request{}, Outcome{Result: Unused})
		for _, tk := range c.Events() {
			got = append(got, tk.Request().Key)
		}
	}
	want := "i1 i2 b1 b2 r1 s1"
	if strings.Join(got, " ") != want {
		t.Fatalf("served %v, want %s", got, want)
	}
}

func TestCoreEvictsLowestRankAtTheBound(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 2, FIFOOnly: true})
	warm(c, time.Second, 32)
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	var spec, batch, inter, inter2 Ticket
	mustArrive(t, c, at(1), Request{Class: ClassSpeculative}, &spec)
	mustArrive(t, c, at(2), Request{Class: ClassBatch}, &batch)
	// Full. An interactive newcomer evicts the speculative item.
	if d := mustArrive(t, c, at(3), Request{Class: ClassInteractive}, &inter); d.Verdict != Queued {
		t.Fatalf("interactive: %+v", d)
	}
	ev := c.Events()
	if len(ev) != 1 || ev[0] != &spec {
		t.Fatalf("events %v, want the speculative ticket", ev)
	}
	if r := spec.Rejection(); r == nil || r.Reason != ReasonEvicted || r.RetryAfter <= 0 || !errors.Is(r, ErrEvicted) {
		t.Fatalf("evicted ticket's rejection: %+v", r)
	}
	// Next, batch is the lowest rank: evicted by another interactive.
	mustArrive(t, c, at(4), Request{Class: ClassInteractive}, &inter2)
	if ev := c.Events(); len(ev) != 1 || ev[0] != &batch {
		t.Fatalf("events %v, want the batch ticket", ev)
	}
	// Nothing lower remains: a batch newcomer is refused queue_full.
	d := mustArrive(t, c, at(5), Request{Class: ClassBatch}, &Ticket{})
	if d.Verdict != Rejected || d.Reason != ReasonQueueFull || d.RetryAfter <= 0 {
		t.Fatalf("batch at full queue: %+v", d)
	}
	if c.Queued() != 2 {
		t.Fatalf("queued %d", c.Queued())
	}
}

func TestCoreSharesTheBoundFairlyWithinARank(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 4, FIFOOnly: true})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	flood := make([]*Ticket, 4)
	for i := range flood {
		flood[i] = &Ticket{}
		mustArrive(t, c, at(i+1), Request{Tenant: "a"}, flood[i])
	}
	// Tenant b holds nothing: it may displace a's last-served item.
	var b Ticket
	if d := mustArrive(t, c, at(10), Request{Tenant: "b"}, &b); d.Verdict != Queued {
		t.Fatalf("b: %+v", d)
	}
	if ev := c.Events(); len(ev) != 1 || ev[0] != flood[3] || flood[3].Rejection().Reason != ReasonEvicted {
		t.Fatalf("events %v, want a's newest evicted", ev)
	}
	// a may not displace b's only item: a holds more.
	if d := mustArrive(t, c, at(11), Request{Tenant: "a"}, &Ticket{}); d.Reason != ReasonQueueFull {
		t.Fatalf("a again: %+v, want queue_full", d)
	}
}

func TestCoreTenantCap(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, MaxQueuePerTenant: 2})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	mustArrive(t, c, at(0), Request{Tenant: "a"}, &Ticket{})
	mustArrive(t, c, at(0), Request{Tenant: "a"}, &Ticket{})
	if d := mustArrive(t, c, at(0), Request{Tenant: "a"}, &Ticket{}); d.Reason != ReasonQueueFull {
		t.Fatalf("third of a: %+v, want queue_full", d)
	}
	if d := mustArrive(t, c, at(0), Request{Tenant: "b"}, &Ticket{}); d.Verdict != Queued {
		t.Fatalf("b: %+v", d)
	}
}

func TestCoreRoundRobinsTenantsWithinARank(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 20, FIFOOnly: true})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	for i := range 4 {
		mustArrive(t, c, at(1), Request{Tenant: "a", Key: "a" + string(rune('0'+i))}, &Ticket{})
	}
	mustArrive(t, c, at(2), Request{Tenant: "b", Key: "b0"}, &Ticket{})
	mustArrive(t, c, at(2), Request{Tenant: "b", Key: "b1"}, &Ticket{})
	var got []string
	for i := range 6 {
		c.Release(at(10+i), Request{}, Outcome{Result: Unused})
		for _, tk := range c.Events() {
			got = append(got, tk.Request().Key)
		}
	}
	if want := "a0 b0 a1 b1 a2 a3"; strings.Join(got, " ") != want {
		t.Fatalf("served %v, want %s", got, want)
	}
}

func TestCoreDropsExpiredWorkAtDequeue(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, FIFOOnly: true})
	warm(c, time.Second, 32)
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	var doomed, fine Ticket
	mustArrive(t, c, at(0), Request{Deadline: at(2600)}, &doomed) // fits at arrival (wait 1s + p95 1s)
	mustArrive(t, c, at(0), Request{Deadline: at(60000)}, &fine)
	// The first call runs long: at 2s, doomed can no longer finish by 2.6s.
	c.Release(at(2000), Request{}, Outcome{ServiceTime: 2 * time.Second})
	ev := c.Events()
	if len(ev) != 2 || ev[0] != &doomed || ev[1] != &fine {
		t.Fatalf("events %v", ev)
	}
	if r := doomed.Rejection(); r == nil || r.Reason != ReasonExpired || r.RetryAfter <= 0 {
		t.Fatalf("doomed: %+v", r)
	}
	if !fine.Granted() || c.InFlight() != 1 {
		t.Fatalf("fine granted %v, in flight %d", fine.Granted(), c.InFlight())
	}
}

func TestCoreSwitchesToLIFOUnderOverloadAndBack(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 100, LIFOTarget: 100 * time.Millisecond, LIFOInterval: time.Second})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	for i := range 10 {
		mustArrive(t, c, at(i*10), Request{Key: "k" + string(rune('0'+i))}, &Ticket{})
	}
	// Oldest item 0.5s old: above target, interval starts.
	c.Release(at(500), Request{}, Outcome{Result: Unused})
	if ev := c.Events(); ev[0].Request().Key != "k0" || c.Stats(at(500)).Mode != FIFO {
		t.Fatalf("first serve %s, mode %v", ev[0].Request().Key, c.Stats(at(500)).Mode)
	}
	// Still above target one interval later: LIFO, newest first.
	c.Release(at(1600), Request{}, Outcome{Result: Unused})
	if ev := c.Events(); ev[0].Request().Key != "k9" || c.Stats(at(1600)).Mode != LIFO {
		t.Fatalf("after interval: served %s, mode %v", ev[0].Request().Key, c.Stats(at(1600)).Mode)
	}
	// The queue empties: back to FIFO.
	for i := range 8 {
		c.Release(at(1700+i), Request{}, Outcome{Result: Unused})
	}
	c.Events()
	if c.Queued() != 0 || c.Stats(at(2000)).Mode != FIFO {
		t.Fatalf("queued %d mode %v", c.Queued(), c.Stats(at(2000)).Mode)
	}
}

func TestCoreFIFOOnlyNeverSwitches(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 100, FIFOOnly: true})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	for i := range 5 {
		mustArrive(t, c, at(0), Request{Key: string(rune('0' + i))}, &Ticket{})
	}
	for i := range 5 {
		c.Release(at(10_000*(i+1)), Request{}, Outcome{Result: Unused})
		if ev := c.Events(); ev[0].Request().Key != string(rune('0'+i)) {
			t.Fatalf("served %s at step %d", ev[0].Request().Key, i)
		}
	}
}

func TestCoreCancel(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	var a, b Ticket
	mustArrive(t, c, at(0), Request{}, &a)
	mustArrive(t, c, at(0), Request{}, &b)
	if !c.Cancel(at(5), &a, reasonNone) || c.Queued() != 1 {
		t.Fatal("cancel of a queued ticket failed")
	}
	if !c.Cancel(at(5), &b, ReasonExpired) || b.Rejection().Reason != ReasonExpired {
		t.Fatal("expiry of a queued ticket failed")
	}
	if c.Cancel(at(6), &b, reasonNone) {
		t.Fatal("second cancel reported the ticket still queued")
	}
	st := c.Stats(at(6))
	if st.Canceled != 1 || st.Rejected[ReasonExpired] != 1 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCoreSetConcurrency(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	tickets := make([]*Ticket, 4)
	for i := range tickets {
		tickets[i] = &Ticket{}
		mustArrive(t, c, at(0), Request{}, tickets[i])
	}
	if err := c.SetConcurrency(at(1), 3); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Events()); n != 2 || c.InFlight() != 3 || c.Queued() != 2 {
		t.Fatalf("raised: %d granted, in flight %d, queued %d", n, c.InFlight(), c.Queued())
	}
	if err := c.SetConcurrency(at(2), 1); err != nil {
		t.Fatal(err)
	}
	// Lowered below in flight: two completions grant nothing, the third does.
	c.Release(at(3), Request{}, Outcome{Result: Unused})
	c.Release(at(4), Request{}, Outcome{Result: Unused})
	if n := len(c.Events()); n != 0 || c.Queued() != 2 {
		t.Fatalf("after lowering: %d granted, queued %d", n, c.Queued())
	}
	c.Release(at(5), Request{}, Outcome{Result: Unused})
	if n := len(c.Events()); n != 1 {
		t.Fatalf("at the new limit: %d granted, want 1", n)
	}
	if err := c.SetConcurrency(at(6), 0); err == nil {
		t.Fatal("SetConcurrency(0) accepted")
	}
}

func TestCoreEstimateHasNoSideEffects(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 1})
	warm(c, time.Second, 32)
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	before := c.Stats(at(0))
	d, err := c.Estimate(at(0), Request{Class: ClassBatch})
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != Rejected || d.Reason != ReasonQueueFull {
		t.Fatalf("estimate %+v, want queue_full", d)
	}
	d, _ = c.Estimate(at(0), Request{Class: ClassInteractive, Tier: TierHigh})
	if d.Verdict != Queued || d.EstimatedWait != time.Second {
		t.Fatalf("estimate %+v, want Queued with 1s wait (it would evict)", d)
	}
	after := c.Stats(at(0))
	if before.Queued != after.Queued || before.Enqueued != after.Enqueued || len(after.Rejected) != 0 {
		t.Fatalf("Estimate changed the core: %+v → %+v", before, after)
	}
	if _, err := c.Estimate(at(0), Request{Class: "bogus"}); err == nil {
		t.Fatal("unknown class accepted")
	}
}

func TestCoreRetryAfterIsNeverZero(t *testing.T) {
	// No data at all: RetryAfter falls back to one second, never zero.
	c := newCore(t, Config{Concurrency: 1})
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	if d := mustArrive(t, c, at(0), Request{}, &Ticket{}); d.RetryAfter != time.Second {
		t.Fatalf("no data: RetryAfter %v", d.RetryAfter)
	}
	// With data, the floor is one completion's worth: p/concurrency.
	c2 := newCore(t, Config{Concurrency: 4})
	warm(c2, 2*time.Second, 32)
	for range 4 {
		mustArrive(t, c2, at(0), Request{}, &Ticket{})
	}
	if d := mustArrive(t, c2, at(0), Request{}, &Ticket{}); d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("floor: RetryAfter %v, want 500ms", d.RetryAfter)
	}
}

func TestCoreKeysServiceTimesSeparately(t *testing.T) {
	c := newCore(t, Config{Concurrency: 4, MaxQueue: 10, MaxKeys: 2})
	for range 32 {
		c.Release(at(0), Request{Key: "big"}, Outcome{ServiceTime: 8 * time.Second})
		c.Release(at(0), Request{Key: "small"}, Outcome{ServiceTime: 200 * time.Millisecond})
		c.Release(at(0), Request{Key: "third"}, Outcome{ServiceTime: time.Minute}) // beyond MaxKeys
	}
	// A free slot; the big model cannot finish in 5s, the small one can.
	if d := mustArrive(t, c, at(0), Request{Key: "big", Deadline: at(5000)}, &Ticket{}); d.Verdict != Rejected {
		t.Fatalf("big: %+v", d)
	}
	if d := mustArrive(t, c, at(0), Request{Key: "small", Deadline: at(5000)}, &Ticket{}); d.Verdict != Granted {
		t.Fatalf("small: %+v", d)
	}
	if ks := c.KeyStats("third"); ks.Samples != 0 || len(c.Keys()) != 2 {
		t.Fatalf("MaxKeys not enforced: %+v %v", ks, c.Keys())
	}
	if ks := c.KeyStats("small"); ks.P50 < 180*time.Millisecond || ks.P50 > 220*time.Millisecond {
		t.Fatalf("small p50 %v", ks.P50)
	}
}

func TestCoreCanceledSamplesOnlyRaiseTheEstimate(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1})
	warm(c, time.Second, 32)
	c.Release(at(0), Request{}, Outcome{Result: Canceled, ServiceTime: 10 * time.Millisecond})
	if n := c.Stats(at(0)).ServiceSamples; n != 32 {
		t.Fatalf("short canceled call recorded: %d samples", n)
	}
	c.Release(at(0), Request{}, Outcome{Result: Canceled, ServiceTime: 5 * time.Second})
	if n := c.Stats(at(0)).ServiceSamples; n != 33 {
		t.Fatalf("long canceled call not recorded: %d samples", n)
	}
	c.Release(at(0), Request{}, Outcome{Result: Success, ServiceTime: 1000 * time.Hour})
	if m := c.Stats(at(0)).ServiceMean; m > 25*time.Hour {
		t.Fatalf("a bogus sample was not clamped: mean %v", m)
	}
}
