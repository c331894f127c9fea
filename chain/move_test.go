package chain

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// acquireLater starts an Acquire of r and returns its result once it
// comes (synctest: the caller runs the bubble's clock with synctest.Wait).
func acquireLater(c *Chain, r Request) func() (*Permit, error) {
	type res struct {
		p   *Permit
		err error
	}
	ch := make(chan res, 1)
	go func() {
		p, err := c.Acquire(context.Background(), r)
		ch <- res{p, err}
	}()
	return func() (*Permit, error) {
		select {
		case x := <-ch:
			return x.p, x.err
		default:
			return nil, errors.New("still waiting")
		}
	}
}

// A call queued at a pool whose deployment cannot be reached leaves it at
// once for the next pool of its route — it is not granted a slot there to
// fail — and the connection failure adds no service time to the pool's
// estimates.
func TestQueuedCallLeavesAnUnreachablePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		first, err := c.Acquire(context.Background(), Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil || first.Request().Upstream != "a" {
			t.Fatalf("first call: %v at %+v", err, first.Request())
		}
		queued := queueAtA(t, c, 10*time.Second)
		start := time.Now()
		if err := first.Done(Outcome{Result: admission.Failure, Unreachable: true}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p, err := queued()
		if err != nil {
			t.Fatalf("the queued call: %v, want it moved to b", err)
		}
		if r := p.Request(); r.Upstream != "b" || r.Pool != 1 || r.UpstreamModel != "m-b" {
			t.Fatalf("the queued call went to %s (pool %d, %s), want b", r.Upstream, r.Pool, r.UpstreamModel)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("moved after %v, want at once", d)
		}
		if st := c.Pools()[0].Gate.Stats(); st.InFlight != 0 || st.Queued != 0 || st.ServiceSamples != 0 {
			t.Fatalf("pool a: %d in flight, %d queued, %d service samples; want none (a connection failure is no service time)", st.InFlight, st.Queued, st.ServiceSamples)
		}
		p.Drop()
	})
}

// queueAtA queues a call with the given budget at a, busy, of the
// failoverChain: b's slot is taken first (a call waits at a only while b
// cannot start it at once either) and given back once the call waits, so
// that b can take the call when it leaves a.
func queueAtA(t *testing.T, c *Chain, budget time.Duration) func() (*Permit, error) {
	t.Helper()
	atB, err := c.Acquire(context.Background(), Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
	if err != nil || atB.Request().Upstream != "b" {
		t.Fatalf("call with a busy: %v, want it at b", err)
	}
	queued := acquireLater(c, Request{Model: "m", Deadline: time.Now().Add(budget)})
	synctest.Wait()
	if q := c.Pools()[0].Gate.Stats().Queued; q != 1 {
		t.Fatalf("%d queued at a, want the call", q)
	}
	if err := atB.Done(Outcome{Result: admission.Success, ServiceTime: time.Second}); err != nil {
		t.Fatal(err)
	}
	return queued
}

// A call queued at an unreachable pool whose route has no other pool up
// is refused at once: queue_wait (503), told to come back when the first
// of its pools is probed.
func TestQueuedCallRefusedWhenEveryPoolIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		ctx := context.Background()
		atA, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		// 1.5 s: a, busy, cannot serve it in time; b can.
		atB, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(1500 * time.Millisecond)})
		if err != nil || atB.Request().Upstream != "b" {
			t.Fatalf("second call: %v, want b", err)
		}
		atB.Done(Outcome{Result: admission.Failure, Unreachable: true})
		queued := acquireLater(c, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		synctest.Wait()
		if q := c.Pools()[0].Gate.Stats().Queued; q != 1 {
			t.Fatalf("%d queued at a, want the third call", q)
		}
		time.Sleep(600 * time.Millisecond) // b's probe is 400 ms away
		start := time.Now()
		atA.Done(Outcome{Result: admission.Failure, Unreachable: true})
		synctest.Wait()
		_, err = queued()
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueWait {
			t.Fatalf("the call queued at a: %v, want a queue_wait refusal", err)
		}
		if time.Since(start) != 0 || rej.RetryAfter != 400*time.Millisecond || rej.EstimatedWait != 400*time.Millisecond {
			t.Fatalf("refused after %v with %+v: want at once, with wait and Retry-After until b's probe (400ms)", time.Since(start), rej)
		}
	})
}

// With one pool, a call queued for a deployment that cannot be reached is
// refused at once (queue_wait, Retry-After until the pool's probe) rather
// than sent there to fail.
func TestQueuedCallRefusedByTheOnlyUnreachablePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := onePoolChain(t)
		first, err := c.Acquire(context.Background(), Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		queued := acquireLater(c, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		synctest.Wait()
		first.Done(Outcome{Result: admission.Failure, Unreachable: true})
		synctest.Wait()
		_, err = queued()
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueWait || rej.RetryAfter != DefaultProbeInterval {
			t.Fatalf("the queued call: %v, want queue_wait with Retry-After %v (the probe)", err, DefaultProbeInterval)
		}
	})
}

func onePoolChain(t *testing.T) *Chain {
	t.Helper()
	c, err := New(Config{Routing: &RoutingConfig{Pools: []PoolConfig{poolCfg("a/m", "a", "m", 1, time.Second)},
		Routes: map[string][]string{"m": {"a/m"}}}, Retries: RetryConfig{Disabled: true}, RefusalSpread: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// An admitted call whose deployment could not be reached, and that no
// other pool can take, is refused (queue_wait, Retry-After until the
// probe) — the shell answers 503, not 502 — its pool goes down at once,
// and the failure adds no service time to the pool's estimates.
func TestUnreachableCallIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := onePoolChain(t)
		ctx := context.Background()
		p, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		o := Outcome{Result: admission.Failure, Unreachable: true}
		if p.Failover(ctx, o) {
			t.Fatal("failover with one pool")
		}
		rej := p.Unreachable()
		if rej == nil || rej.Reason != admission.ReasonQueueWait || rej.RetryAfter != DefaultProbeInterval {
			t.Fatalf("refusal %+v, want queue_wait with Retry-After %v", rej, DefaultProbeInterval)
		}
		if !c.PoolState(0).Down {
			t.Fatal("the unreachable pool is not down")
		}
		time.Sleep(time.Second)
		p.Done(o)
		if st := c.Gate().Stats(); st.InFlight != 0 || st.ServiceSamples != 0 {
			t.Fatalf("%d in flight, %d service samples: want the slot back and no sample", st.InFlight, st.ServiceSamples)
		}
	})
}

// A call queued at a pool that slowed, and that can no longer start there
// in time, goes to the next pool of its route that can serve it, instead
// of being refused (or started and cut at its deadline).
func TestQueuedCallLeavesASlowedPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		ctx := context.Background()
		first, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		// 3 s: a serves it in time by its estimate (1 s wait, 1 s service).
		queued := queueAtA(t, c, 3*time.Second)
		// a's call took 5 s: the queued call cannot finish there by its
		// deadline any more; b, idle, serves it in 1 s.
		first.Done(Outcome{Result: admission.Success, ServiceTime: 5 * time.Second})
		synctest.Wait()
		p, err := queued()
		if err != nil {
			t.Fatalf("the call queued at the slowed a: %v, want it moved to b", err)
		}
		if p.Request().Upstream != "b" {
			t.Fatalf("it went to %s, want b", p.Request().Upstream)
		}
		p.Drop()
	})
}

// A call that leaves its pool goes only where it would be served in time
// and not late: a pool whose estimate meets its deadline only after a wait
// of over a third of what is left of it (or whose queue serves
// newest-first) would start it with little of its budget left, if at all
// — a call admitted for its wait, overtaken there, and started with barely
// its p95 left is cut at its deadline one time in twenty, billed. It is
// refused at once instead (queue_wait), with the wait it would have had.
func TestMovedCallIsNotSentToBeServedLate(t *testing.T) {
	rc := twoPools()
	rc.Routes["n"] = []string{"b/m"}
	c := routeCore(t, Config{Routing: rc})
	for range 3 { // b's slot and two queued: a newcomer would wait 2s at b, by its estimate
		if _, tk := arriveAt(t, c, t0, Request{Model: "n"}); tk.Request().Pool != 1 {
			t.Fatalf("call of n went to pool %d, want b", tk.Request().Pool)
		}
	}
	rt := c.stages.route
	leftA := rt.pools[0].bit()
	// 10s left: 2s of wait and 1s of service at b, the wait within a third.
	r := Request{Model: "m", Deadline: t0.Add(10 * time.Second)}
	if nc, ok, rej := rt.elsewhere(t0, &r, leftA); !ok || nc.p != rt.pools[1] {
		t.Fatalf("call with 10s left: moved %v (refused %+v), want moved to b", ok, rej)
	}
	// 5s left: b's estimate meets it, after a wait of 2s — over a third.
	r = Request{Model: "m", Deadline: t0.Add(5 * time.Second)}
	_, ok, rej := rt.elsewhere(t0, &r, leftA)
	if ok || rej == nil || rej.Reason != admission.ReasonQueueWait || rej.EstimatedWait != 2*time.Second {
		t.Fatalf("call with 5s left: moved %v, refused %+v; want refused queue_wait, estimated wait 2s", ok, rej)
	}
}
