package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newGate(t *testing.T, cfg Config) *Gate {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type result struct {
	p   *Permit
	err error
	at  time.Time
}

// acquireAsync starts Acquire in a goroutine and returns where its result
// will arrive.
func acquireAsync(ctx context.Context, g *Gate, req Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		p, err := g.Acquire(ctx, req)
		ch <- result{p, err, time.Now()}
	}()
	return ch
}

func TestGateWaiterIsGrantedWhenASlotFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, Config{Concurrency: 1, MaxQueue: 4})
		hold, err := g.Acquire(t.Context(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ch := acquireAsync(t.Context(), g, Request{})
		synctest.Wait()
		if st := g.Stats(); st.Queued != 1 {
			t.Fatalf("queued %d, want the second caller waiting", st.Queued)
		}
		time.Sleep(3 * time.Second) // virtual: the first call takes 3s
		hold.Done(Outcome{})
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.p.QueueTime() != 3*time.Second || r.at.Sub(start) != 3*time.Second {
			t.Fatalf("queue time %v, returned after %v", r.p.QueueTime(), r.at.Sub(start))
		}
		if st := g.Stats(); st.ServiceSamples != 1 || st.ServiceMean < 2900*time.Millisecond {
			t.Fatalf("the 3s call was not recorded: %+v", st)
		}
		r.p.Done(Outcome{})
	})
}

func TestGateEvictionWakesTheWaiterAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, Config{Concurrency: 1, MaxQueue: 1})
		hold, _ := g.Acquire(t.Context(), Request{})
		spec := acquireAsync(t.Context(), g, Request{Class: ClassSpeculative})
		synctest.Wait()
		inter := acquireAsync(t.Context(), g, Request{Class: ClassInteractive})
		synctest.Wait()
		select {
		case r := <-spec:
			var rej *Rejection
			if !errors.As(r.err, &rej) || rej.Reason != ReasonEvicted || !errors.Is(r.err, ErrEvicted) || rej.RetryAfter <= 0 {
				t.Fatalf("speculative waiter got %v", r.err)
			}
		default:
			t.Fatal("the evicted waiter was not woken")
		}
		hold.Done(Outcome{})
		r := <-inter
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.p.Done(Outcome{})
	})
}

func TestGateWaiterIsToldAtItsDeadlineNotWhenASlotFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, Config{Concurrency: 1, MaxQueue: 4})
		hold, _ := g.Acquire(t.Context(), Request{})
		start := time.Now()

		// The context's deadline.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		viaCtx := acquireAsync(ctx, g, Request{})
		// A request deadline earlier than its context's: a timer of its own.
		viaReq := acquireAsync(t.Context(), g, Request{Deadline: start.Add(2 * time.Second)})

		r := <-viaReq
		if !errors.Is(r.err, ErrExpired) || r.at.Sub(start) != 2*time.Second {
			t.Fatalf("request deadline: %v after %v", r.err, r.at.Sub(start))
		}
		r = <-viaCtx
		var rej *Rejection
		if !errors.As(r.err, &rej) || rej.Reason != ReasonExpired || !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("ctx deadline: %v", r.err)
		}
		if r.at.Sub(start) != 5*time.Second || rej.RetryAfter <= 0 {
			t.Fatalf("told after %v with RetryAfter %v", r.at.Sub(start), rej.RetryAfter)
		}
		if st := g.Stats(); st.Queued != 0 || st.Rejected[ReasonExpired] != 2 {
			t.Fatalf("stats %+v", st)
		}
		hold.Done(Outcome{})
	})
}

func TestGateCancelReturnsContextError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, Config{Concurrency: 1, MaxQueue: 4})
		hold, _ := g.Acquire(t.Context(), Request{})
		ctx, cancel := context.WithCancel(t.Context())
		ch := acquireAsync(ctx, g, Request{})
		synctest.Wait()
		cancel()
		if r := <-ch; !errors.Is(r.err, context.Canceled) || r.p != nil {
			t.Fatalf("got %v %v", r.p, r.err)
		}
		if st := g.Stats(); st.Queued != 0 || st.Canceled != 1 {
			t.Fatalf("stats %+v", st)
		}
		// Already cancelled: refused before touching the queue.
		if _, err := g.Acquire(ctx, Request{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled ctx: %v", err)
		}
		hold.Done(Outcome{})
	})
}

// TestGateCancelVersusGrantRace: the slot frees at the very instant the
// waiter gives up. Whichever wins, no slot leaks and no permit is lost.
func TestGateCancelVersusGrantRace(t *testing.T) {
	for i := range 200 {
		synctest.Test(t, func(t *testing.T) {
			g := newGate(t, Config{Concurrency: 1, MaxQueue: 4})
			hold, _ := g.Acquire(t.Context(), Request{})
			ctx, cancel := context.WithCancel(t.Context())
			ch := acquireAsync(ctx, g, Request{})
			synctest.Wait()
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); cancel() }()
			go func() { defer wg.Done(); hold.Done(Outcome{}) }()
			wg.Wait()
			r := <-ch
			if r.err == nil {
				r.p.Done(Outcome{}) // won the race: a usable permit
			} else if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("iteration %d: %v", i, r.err)
			}
			if st := g.Stats(); st.InFlight != 0 || st.Queued != 0 {
				t.Fatalf("iteration %d: leaked: in flight %d, queued %d", i, st.InFlight, st.Queued)
			}
			p, err := g.TryAcquire(Request{})
			if err != nil {
				t.Fatalf("iteration %d: the slot is gone: %v", i, err)
			}
			p.Drop()
		})
	}
}

func TestPermitDoneTwiceCountsOnce(t *testing.T) {
	g := newGate(t, Config{Concurrency: 2, MaxQueue: 4})
	p1, _ := g.TryAcquire(Request{})
	p2, _ := g.TryAcquire(Request{})
	p1.Done(Outcome{ServiceTime: time.Second})
	p1.Done(Outcome{ServiceTime: time.Second})
	p1.Drop()
	st := g.Stats()
	if st.InFlight != 1 || st.ServiceSamples != 1 || st.Completed[Success] != 1 {
		t.Fatalf("after Done twice: %+v", st)
	}
	p2.Drop()
	p2.Done(Outcome{})
	st = g.Stats()
	if st.InFlight != 0 || st.ServiceSamples != 1 || st.Completed[Unused] != 1 {
		t.Fatalf("after Drop: %+v", st)
	}
	var nilPermit *Permit
	nilPermit.Done(Outcome{}) // must not panic
	(&Permit{}).Drop()
}

func TestGateSetConcurrencyWithWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, Config{Concurrency: 1, MaxQueue: 10})
		hold, _ := g.Acquire(t.Context(), Request{})
		var waiters []<-chan result
		for range 4 {
			waiters = append(waiters, acquireAsync(t.Context(), g, Request{}))
		}
		synctest.Wait()
		if err := g.SetConcurrency(3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var got []*Permit
		for _, ch := range waiters {
			select {
			case r := <-ch:
				got = append(got, r.p)
			default:
			}
		}
		if len(got) != 2 || g.Stats().Queued != 2 {
			t.Fatalf("raising to 3 granted %d, queued %d", len(got), g.Stats().Queued)
		}
		// Lower to 1 with 3 in flight: nothing is granted until only... none.
		if err := g.SetConcurrency(1); err != nil {
			t.Fatal(err)
		}
		hold.Done(Outcome{})
		got[0].Done(Outcome{})
		synctest.Wait()
		if st := g.Stats(); st.Queued != 2 || st.InFlight != 1 {
			t.Fatalf("after lowering: %+v", st)
		}
		got[1].Done(Outcome{})
		synctest.Wait()
		if st := g.Stats(); st.Queued != 1 || st.InFlight != 1 {
			t.Fatalf("at the new limit: %+v", st)
		}
		if err := g.SetConcurrency(0); err == nil {
			t.Fatal("SetConcurrency(0) accepted")
		}
		if err := g.SetConcurrency(2); err != nil {
			t.Fatal(err)
		}
		for _, ch := range waiters {
			select {
			case r := <-ch:
				r.p.Done(Outcome{})
			default:
			}
		}
		synctest.Wait()
		for _, ch := range waiters {
			select {
			case r := <-ch:
				r.p.Done(Outcome{})
			default:
			}
		}
		if st := g.Stats(); st.Queued != 0 || st.InFlight != 0 {
			t.Fatalf("at the end: %+v", st)
		}
	})
}

func TestTryAcquireNeverWaits(t *testing.T) {
	g := newGate(t, Config{Concurrency: 1, MaxQueue: 10, InitialServiceTime: time.Second})
	p, err := g.TryAcquire(Request{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.TryAcquire(Request{})
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Reason != ReasonQueueWait || rej.EstimatedWait != time.Second || rej.RetryAfter != time.Second {
		t.Fatalf("busy TryAcquire: %v", err)
	}
	p.Done(Outcome{})
}

func TestGateBadInputIsAnErrorNotAPanic(t *testing.T) {
	g := newGate(t, Config{Concurrency: 1, MaxQueue: 1})
	if _, err := g.Acquire(context.Background(), Request{Class: "vip"}); err == nil {
		t.Error("unknown class accepted")
	}
	if _, err := g.TryAcquire(Request{Attempt: -1}); err == nil {
		t.Error("negative attempt accepted")
	}
	//lint:ignore SA1012 a nil context is bad input that must not panic
	p, err := g.Acquire(nil, Request{Deadline: time.Now().Add(-time.Second)}) //nolint:staticcheck
	if !errors.Is(err, ErrExpired) || p != nil {
		t.Errorf("past deadline with a nil ctx: %v %v", p, err)
	}
	if _, err := g.Estimate(Request{Class: "vip"}); err == nil {
		t.Error("Estimate accepted an unknown class")
	}
	if st := g.Stats(); st.InFlight != 0 {
		t.Errorf("bad input took a slot: %+v", st)
	}
}
