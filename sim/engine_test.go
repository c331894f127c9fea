package sim

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/sluicehq/sluice/retrybudget"
	"github.com/sluicehq/sluice/sim/scenario"
)

// exact is a scenario small enough to follow by hand: one slot, every call
// takes exactly 1s, one class with the given deadline, one naive source.
func exact(deadline time.Duration) *scenario.Scenario {
	return &scenario.Scenario{
		Name:     "exact",
		Requests: 10,
		Upstream: scenario.Upstream{Concurrency: 1, Service: scenario.Service{Lognormal: &scenario.Lognormal{Median: time.Second}}, CostPerCall: 1},
		Classes:  []scenario.Class{{Name: "interactive", Deadline: deadline}},
		Traffic:  []scenario.Source{{Class: "interactive", Client: "naive", MaxAttempts: 1, AttemptTimeout: deadline}},
	}
}

// runScripted runs policy on sc with arrivals at exactly the given offsets
// (in milliseconds) for each source in turn.
func runScripted(t *testing.T, sc *scenario.Scenario, policy string, arrivals ...[]int) *Result {
	t.Helper()
	r, err := scripted(t, sc, policy, arrivals...).run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// scripted is runScripted's setup, for a test that changes it before the
// run (such as one that runs longer).
func scripted(t *testing.T, sc *scenario.Scenario, policy string, arrivals ...[]int) *setup {
	t.Helper()
	s, err := newSetup(sc, policy, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, ms := range arrivals {
		s.sources[i].script = []time.Duration{}
		for _, m := range ms {
			s.sources[i].script = append(s.sources[i].script, time.Duration(m)*time.Millisecond)
		}
	}
	// The arrival window is sized for Poisson traffic; scripted arrivals
	// may come later, so let the run go on long enough for them.
	s.window = max(s.window, time.Minute)
	s.end = s.window + time.Minute
	return s
}

type want struct {
	onTime, billed, wasted, attempts, withdrawn int
	refusals                                    map[string]int
}

func check(t *testing.T, r *Result, w want) {
	t.Helper()
	if r.OnTime != w.onTime || r.Billed != w.billed || r.Wasted != w.wasted || r.Attempts != w.attempts || r.Withdrawn != w.withdrawn {
		t.Errorf("%s: on time %d billed %d wasted %d attempts %d withdrawn %d; want %d %d %d %d %d",
			r.Policy, r.OnTime, r.Billed, r.Wasted, r.Attempts, r.Withdrawn, w.onTime, w.billed, w.wasted, w.attempts, w.withdrawn)
	}
	if w.refusals == nil {
		w.refusals = map[string]int{}
	}
	if !maps.Equal(r.Refusals, w.refusals) {
		t.Errorf("%s: refusals %v, want %v", r.Policy, r.Refusals, w.refusals)
	}
}

// TestBaselinesExecuteWorkWhoseCallerLeft: three callers willing to wait
// 1.5s arrive within 200ms at a one-slot upstream of 1s calls. A FIFO serves
// all three; only the first answer is received, the other two are billed and
// wasted. Sluice refuses the two at once, since 1s of wait plus 1s of
// service cannot fit in 1.5s.
func TestBaselinesExecuteWorkWhoseCallerLeft(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	arr := []int{0, 100, 200}
	check(t, runScripted(t, sc, "fifo", arr), want{onTime: 1, billed: 3, wasted: 2, attempts: 3,
		refusals: map[string]int{"timeout": 2}})
	for _, p := range []string{"wait-p50", "wait-mean", "expiry", "lifo", "priority", "sluice"} {
		check(t, runScripted(t, sc, p, arr), want{onTime: 1, billed: 1, attempts: 3,
			refusals: map[string]int{"queue_wait": 2}})
	}
}

func TestDepthThresholdAndSmallQueueRefuseAtTheirBound(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	sc.Baselines = scenario.Baselines{DepthThreshold: 1, SmallQueue: 1}
	for _, p := range []string{"depth-threshold", "small-queue"} {
		// #1 waits (and is served too late), #2 finds the queue full.
		check(t, runScripted(t, sc, p, []int{0, 100, 200}), want{onTime: 1, billed: 2, wasted: 1, attempts: 3,
			refusals: map[string]int{"queue_full": 1, "timeout": 1}})
	}
}

func TestQueueTimeoutDropsWhatWaitedTooLong(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	sc.Baselines.QueueTimeout = 500 * time.Millisecond
	// #1 and #2 are dropped 500ms after they were queued, before the slot
	// frees at 1s; #3 arrives at 1.2s to an idle upstream.
	check(t, runScripted(t, sc, "queue-timeout", []int{0, 100, 200, 1200}), want{onTime: 2, billed: 2, attempts: 4,
		refusals: map[string]int{"queue_timeout": 2}})
}

// TestSluiceWithdrawsQueuedWorkWhoseCallerLeft: sluice starts out believing
// calls take 100ms, so it queues #1; its caller gives up at 600ms and sluice
// withdraws it. The FIFO runs it anyway.
func TestSluiceWithdrawsQueuedWorkWhoseCallerLeft(t *testing.T) {
	sc := exact(10 * time.Second)
	sc.Traffic[0].AttemptTimeout = 500 * time.Millisecond
	sc.Sluice.InitialServiceTime = 100 * time.Millisecond
	check(t, runScripted(t, sc, "sluice", []int{0, 100}), want{billed: 1, wasted: 1, attempts: 2, withdrawn: 1,
		refusals: map[string]int{"timeout": 2}})
	check(t, runScripted(t, sc, "fifo", []int{0, 100}), want{billed: 2, wasted: 2, attempts: 2,
		refusals: map[string]int{"timeout": 2}})
}

// TestExpiryAtDequeue: #1 is queued under the 100ms initial estimate; when
// the slot frees at 1s the Core has learnt that calls take 1s, and #1's
// caller leaves at 1.6s. With expiry it is dropped unstarted; without, it is
// started and wasted.
func TestExpiryAtDequeue(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	sc.Sluice.InitialServiceTime = 100 * time.Millisecond
	check(t, runScripted(t, sc, "expiry", []int{0, 100}), want{onTime: 1, billed: 1, attempts: 2,
		refusals: map[string]int{"expired": 1}})
	check(t, runScripted(t, sc, "wait-mean", []int{0, 100}), want{onTime: 1, billed: 2, wasted: 1, attempts: 2,
		refusals: map[string]int{"timeout": 1}})
}

func TestNaiveRetriesAtOnceUpToMaxAttempts(t *testing.T) {
	sc := exact(10 * time.Second)
	sc.Traffic[0].MaxAttempts = 3
	sc.Baselines.SmallQueue = 1
	// #2 finds the queue full three times in a row, at the same instant.
	check(t, runScripted(t, sc, "small-queue", []int{0, 100, 200}), want{onTime: 2, billed: 2, attempts: 5,
		refusals: map[string]int{"queue_full": 3}})
}

// TestNaiveRetriesTimeoutsAndPaysForBoth: #1's first attempt starts at 1s
// and times out at 1.6s while its call runs; the retry queues behind it and
// is answered at 3s, after the caller's 1.6s deadline. Both are billed and
// wasted.
func TestNaiveRetriesTimeoutsAndPaysForBoth(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	sc.Traffic[0].MaxAttempts = 2
	r := runScripted(t, sc, "fifo", []int{0, 100})
	check(t, r, want{onTime: 1, billed: 3, wasted: 2, attempts: 3, refusals: map[string]int{"timeout": 1}})
	if r.Late != 1 {
		t.Errorf("late answers %d, want 1 (the retry, answered at 3s for a 1.6s deadline)", r.Late)
	}
}

// TestPoliteHonoursRetryAfterAndItsDeadline: #1 is refused at 100ms with a
// Retry-After of 1.5s — the one completion (1s) its wait needs, and half a
// slot not to race it (chain/spread.go) — and gives up at once, since 1.6s
// is its deadline: the retry could not have finished in time anyway. A
// naive caller makes all three attempts at 100ms.
func TestPoliteHonoursRetryAfterAndItsDeadline(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	sc.Traffic[0].MaxAttempts = 3
	sc.Traffic[0].Client = "polite"
	check(t, runScripted(t, sc, "priority", []int{0, 100}), want{onTime: 1, billed: 1, attempts: 2,
		refusals: map[string]int{"queue_wait": 1}})
	sc.Traffic[0].Client = "naive"
	check(t, runScripted(t, sc, "priority", []int{0, 100}), want{onTime: 1, billed: 1, attempts: 4,
		refusals: map[string]int{"queue_wait": 3}})
}

// TestRetryBudgetRefusesRetries: with a budget that earns almost nothing
// from time, two first attempts deposit 0.2 tokens, so the gateway refuses
// both of #1's retries with retry_budget instead of asking the Core.
func TestRetryBudgetRefusesRetries(t *testing.T) {
	sc := exact(34 * time.Second)
	sc.Upstream.Service.Lognormal.Median = 10 * time.Second
	sc.Traffic[0].MaxAttempts = 3
	sc.Traffic[0].AttemptTimeout = 11 * time.Second
	sc.Sluice.RetryBudget = retrybudget.Config{MinPerSecond: 0.001}
	check(t, runScripted(t, sc, "sluice", []int{0, 100}), want{onTime: 1, billed: 1, attempts: 4,
		refusals: map[string]int{"queue_wait": 1, "retry_budget": 2}})
	check(t, runScripted(t, sc, "priority", []int{0, 100}), want{onTime: 1, billed: 1, attempts: 4,
		refusals: map[string]int{"queue_wait": 3}})
}

// TestPriorityServesInteractiveFirst: speculative work fills the queue
// first; an interactive request arriving later is served before it with
// priority shedding, after it without.
func TestPriorityServesInteractiveFirst(t *testing.T) {
	sc := exact(10 * time.Second)
	sc.Classes = append(sc.Classes, scenario.Class{Name: "speculative", Deadline: 3500 * time.Millisecond})
	sc.Traffic = append(sc.Traffic, scenario.Source{Class: "speculative", Client: "naive", MaxAttempts: 1, AttemptTimeout: 3500 * time.Millisecond})
	spec, inter := []int{0, 10, 20, 30}, []int{40}
	for _, c := range []struct {
		policy       string
		interLatency float64
	}{{"priority", 2000 - 40}, {"lifo", 4000 - 40}} {
		r := runScripted(t, sc, c.policy, inter, spec)
		if got := r.Sources[0]; got.OnTime != 1 || got.P50Ms < c.interLatency-10 || got.P50Ms > c.interLatency+10 {
			t.Errorf("%s: interactive on time %d, latency %.0fms; want 1 at %.0fms", c.policy, got.OnTime, got.P50Ms, c.interLatency)
		}
	}
}

// TestCostAndLatencyAccounting checks the money and the latency figures on
// the first test's FIFO run: three calls billed at $1, two wasted, one
// answer after exactly 1s.
func TestCostAndLatencyAccounting(t *testing.T) {
	r := runScripted(t, exact(1500*time.Millisecond), "fifo", []int{0, 100, 200})
	if r.BilledCost != 3 || r.WastedCost != 2 {
		t.Errorf("billed $%v wasted $%v, want 3 and 2", r.BilledCost, r.WastedCost)
	}
	if r.P50Ms < 995 || r.P50Ms > 1005 || r.WastePct < 66.6 || r.WastePct > 66.7 {
		t.Errorf("p50 %.1fms waste %.2f%%, want 1000ms and 66.67%%", r.P50Ms, r.WastePct)
	}
	if r.AttemptsPerRequest != 1 || r.SuccessPct < 33.3 || r.SuccessPct > 33.4 {
		t.Errorf("attempts/request %v success %v", r.AttemptsPerRequest, r.SuccessPct)
	}
}
