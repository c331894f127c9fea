package admission

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestCoreRefusesOvertakenWorkAtOnce: a queued batch call is pushed back by
// interactive calls arriving after it; once the work ahead of it no longer
// lets it start by its deadline less its p95, it is refused at once, with
// reason queue_wait — not at dequeue, nor when its deadline passes. With
// NoEarlyRefusal it stays queued.
func TestCoreRefusesOvertakenWorkAtOnce(t *testing.T) {
	for _, off := range []bool{false, true} {
		c := newCore(t, Config{Concurrency: 1, MaxQueue: 100, FIFOOnly: true, NoEarlyRefusal: off})
		warm(c, 100*time.Millisecond, 32)
		mustArrive(t, c, at(0), Request{}, &Ticket{}) // the slot, taken
		var batch Ticket
		if d := mustArrive(t, c, at(0), Request{Class: ClassBatch, Deadline: at(1000)}, &batch); d.Verdict != Queued {
			t.Fatalf("batch: %v, want queued", d.Verdict)
		}
		refusedAt := -1
		for i := 1; i <= 12; i++ {
			mustArrive(t, c, at(i), Request{Class: ClassInteractive, Deadline: at(10_000)}, &Ticket{})
			for _, tk := range c.Events() {
				if tk == &batch {
					refusedAt = i
				}
			}
		}
		if off {
			if refusedAt >= 0 || batch.state != ticketQueued {
				t.Fatalf("NoEarlyRefusal: the batch call was decided (after %d arrivals)", refusedAt)
			}
			continue
		}
		// Eight interactive calls ahead, plus its own: 900 ms of work
		// from 8 ms on, past its 1 s deadline less its 100 ms p95.
		if refusedAt != 8 {
			t.Fatalf("refused after %d interactive arrivals, want 8", refusedAt)
		}
		rej := batch.Rejection()
		if rej == nil || rej.Reason != ReasonQueueWait || rej.RetryAfter <= 0 {
			t.Fatalf("rejection %+v, want queue_wait with a Retry-After", rej)
		}
		if q := batch.QueueTime(); q != 8*time.Millisecond {
			t.Fatalf("told after %v in the queue, want 8ms: at the arrival that pushed it past its deadline", q)
		}
	}
}

// TestCoreStandingQueueKeepsWaitsShort: under sustained overload the wait
// a newcomer may be promised shrinks to its allowance once its queue has
// been refusing for a quarter of its budget, and only then: a burst that
// fills the queue briefly is absorbed up to the deadlines.
func TestCoreStandingQueueKeepsWaitsShort(t *testing.T) {
	const budget = 2 * time.Second
	run := func(off bool, dur time.Duration) (early, late time.Duration) {
		c := newCore(t, Config{Concurrency: 1, MaxQueue: 1000, FIFOOnly: true, NoEarlyRefusal: off})
		warm(c, 100*time.Millisecond, 64) // 10 calls a second
		h := &harness{t: t, c: c, service: func(string) time.Duration { return 100 * time.Millisecond }}
		var arrivals []*arrival
		for i := range int(dur / (20 * time.Millisecond)) { // 50 a second: 5×
			now := t0.Add(time.Duration(i) * 20 * time.Millisecond)
			arrivals = append(arrivals, &arrival{at: now, req: Request{Deadline: now.Add(budget)}})
		}
		h.run(arrivals)
		for _, a := range arrivals {
			if a.decision.Verdict == Rejected {
				continue
			}
			if a.at.Sub(t0) < budget/4 {
				early = max(early, a.decision.EstimatedWait)
			} else if a.at.Sub(t0) > budget {
				late = max(late, a.decision.EstimatedWait)
			}
		}
		return early, late
	}
	allowance := max(budget/20, 4*100*time.Millisecond) // 400ms
	early, late := run(false, 5*time.Second)
	if early <= allowance {
		t.Errorf("in the first quarter of a budget the longest wait promised was %v: a burst must be absorbed up to the deadline", early)
	}
	if late > allowance {
		t.Errorf("in a standing queue a newcomer was promised %v, above its allowance %v", late, allowance)
	}
	if _, lateOff := run(true, 5*time.Second); lateOff <= allowance {
		t.Errorf("with NoEarlyRefusal the longest wait promised in a standing queue was %v: the test cannot tell", lateOff)
	}
}

// TestCoreEveryCallerHearsInTime is the promise of issue 21 at the core:
// a one-class storm at 5× the capacity of 16 slots (lognormal service,
// median 200 ms, σ 0.5; 2 s deadlines; the default waiting room of 480),
// adaptive LIFO on. Every call is answered in time or refused, and the
// refusals come early: none is left waiting out its deadline, the p99 of
// the time to a refusal is within a tenth of the deadline, and the slots
// stay busy with calls that finish in time.
func TestCoreEveryCallerHearsInTime(t *testing.T) {
	const (
		slots    = 16
		median   = 200 * time.Millisecond
		deadline = 2 * time.Second
		dur      = 60 * time.Second
	)
	for _, off := range []bool{false, true} {
		c := newCore(t, Config{Concurrency: slots, MaxQueue: 480, NoEarlyRefusal: off})
		rng := rand.New(rand.NewPCG(21, 5))
		h := &harness{t: t, c: c, service: func(string) time.Duration { return lognormal(rng, median, 0.5) }}
		for range 256 {
			c.record(time.Time{}, "", 0, 0, Outcome{ServiceTime: lognormal(rng, median, 0.5)})
		}
		capacity := slots / c.all.mean().Seconds()
		arrivals := poisson(rng, t0, 5*capacity, dur, Request{})
		for _, a := range arrivals {
			a.req.Deadline = a.at.Add(deadline)
		}
		h.run(arrivals)
		var refusal []time.Duration
		onTime, late, unanswered := 0, 0, 0
		for _, a := range arrivals {
			switch {
			case a.decision.Verdict == Rejected:
				refusal = append(refusal, 0)
			case !a.granted.IsZero() && a.success():
				onTime++
			case !a.granted.IsZero():
				late++
			case a.ticket.Rejection() != nil && a.ticket.QueueTime() < deadline:
				refusal = append(refusal, a.ticket.QueueTime())
			default:
				// Refused after its deadline, or never: its caller
				// waited it out and heard nothing.
				unanswered++
			}
		}
		slices.Sort(refusal)
		p99 := refusal[len(refusal)*99/100]
		goodput := float64(onTime) / dur.Seconds() / capacity
		t.Logf("NoEarlyRefusal %v: goodput %.1f%% of capacity, late %d, unanswered %d of %d, refusal p99 %v",
			off, 100*goodput, late, unanswered, len(arrivals), p99)
		if off {
			if unanswered == 0 && p99 <= deadline/10 {
				t.Errorf("without early refusal every caller heard in time: the test cannot tell")
			}
			continue
		}
		if unanswered != 0 {
			t.Errorf("%d calls never heard before their deadline", unanswered)
		}
		if p99 > deadline/10 {
			t.Errorf("refusal p99 %v, want within a tenth of the deadline (%v)", p99, deadline/10)
		}
		if goodput < 0.95 {
			t.Errorf("goodput %.1f%% of capacity, want ≥ 95%%", 100*goodput)
		}
		if served := onTime + late; float64(late) > 0.01*float64(served) {
			t.Errorf("%d of %d calls served finished late, want ≤ 1%%", late, served)
		}
	}
}

// TestCoreLetsAnEvenOddsCallTakeAnIdleSlot: a call whose budget is above
// the median service time but below the p95 takes a slot that is free
// with nothing queued — refusing it would idle the slot, and a gate whose
// p95 has crept past every budget would never complete another call to
// learn otherwise — but never waits for one, and is refused below the
// median, as a retry (first attempts probe; a retry is shed first), or
// with NoEarlyRefusal.
func TestCoreLetsAnEvenOddsCallTakeAnIdleSlot(t *testing.T) {
	for _, off := range []bool{false, true} {
		c := newCore(t, Config{Concurrency: 2, MaxQueue: 10, FIFOOnly: true, NoEarlyRefusal: off})
		for range 10 { // p50 1s, p95 3s, interleaved: ten 3s in a row would be a level shift
			warm(c, time.Second, 9)
			warm(c, 3*time.Second, 1)
		}
		between := Request{Deadline: at(2000)}
		d := mustArrive(t, c, at(0), between, &Ticket{})
		if off {
			if d.Verdict != Rejected {
				t.Fatalf("NoEarlyRefusal: a call below its p95 was %v, want refused", d.Verdict)
			}
			continue
		}
		if d.Verdict != Granted {
			t.Fatalf("a free slot, nothing queued, budget above the median: %v, want granted", d.Verdict)
		}
		if d := mustArrive(t, c, at(0), Request{Deadline: at(900)}, &Ticket{}); d.Verdict != Rejected {
			t.Fatalf("a budget below the median: %v, want refused", d.Verdict)
		}
		retry := between
		retry.Attempt = 1
		if d := mustArrive(t, c, at(0), retry, &Ticket{}); d.Verdict != Rejected || d.Reason != ReasonQueueWait {
			t.Fatalf("a retry with a budget below its p95: %+v, want queue_wait (a retry is not a probe)", d)
		}
		mustArrive(t, c, at(0), Request{}, &Ticket{}) // the last slot
		if d := mustArrive(t, c, at(0), between, &Ticket{}); d.Verdict != Rejected || d.Reason != ReasonQueueWait {
			t.Fatalf("no slot free: %+v, want queue_wait (it never waits)", d)
		}
	}
}

// TestCoreExpiresQueuedWorkAtItsLatestStart: queued work whose deadline
// less its p95 has passed is refused (expired) at the next decision the
// gate makes, wherever it waits — here at the front of its queue behind a
// slot that does not free — and not only when it would be dequeued.
func TestCoreExpiresQueuedWorkAtItsLatestStart(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, FIFOOnly: true})
	warm(c, 100*time.Millisecond, 32)
	mustArrive(t, c, at(0), Request{}, &Ticket{}) // the slot, held
	var front, behind Ticket
	mustArrive(t, c, at(0), Request{Deadline: at(1000)}, &front)
	mustArrive(t, c, at(0), Request{Deadline: at(10_000)}, &behind)
	mustArrive(t, c, at(750), Request{Class: ClassSpeculative}, &Ticket{})
	if front.state != ticketQueued {
		t.Fatalf("before its latest start (900ms) the front call was decided: %v", front.Rejection())
	}
	c.Events()
	mustArrive(t, c, at(950), Request{Class: ClassSpeculative}, &Ticket{})
	if r := front.Rejection(); r == nil || r.Reason != ReasonExpired || front.QueueTime() != 950*time.Millisecond {
		t.Fatalf("front call at 950ms: %+v after %v, want expired then", r, front.QueueTime())
	}
	if behind.state != ticketQueued {
		t.Fatalf("the call behind it, with time to spare, was decided: %v", behind.Rejection())
	}
}

// TestWindowFollowsALevelShift: when the service time steps up fourfold,
// the window's estimates follow within a few samples — its mean, p50 and
// p95 at least half again as high after eight slow samples of 256 —
// instead of creeping up a thirty-second of the way per sample; and on a
// steady distribution no change point moves them.
func TestWindowFollowsALevelShift(t *testing.T) {
	w := newWindow(256, true)
	rng := rand.New(rand.NewPCG(3, 4))
	steadyShifted := 0
	for i := range 4096 {
		w.add(lognormal(rng, 100*time.Millisecond, 0.5))
		if i >= 256 && w.off != 0 {
			steadyShifted++
		}
	}
	if steadyShifted > 4096/100 {
		t.Errorf("on a steady lognormal (σ 0.5) the level shifted at %d of 3840 samples, want under 1%%", steadyShifted)
	}
	mean, _ := w.quantiles()
	before := w.mean()
	for range 8 {
		w.add(lognormal(rng, 400*time.Millisecond, 0.5))
	}
	p50, p95 := w.quantiles()
	if m := w.mean(); m < before*3/2 || p50 < mean*3/2 {
		t.Errorf("after eight samples four times slower: mean %v (was %v), p50 %v (was %v), p95 %v; want half again as high at least", m, before, p50, mean, p95)
	}
	// The window fills with the new level: the estimates stay there, and
	// the window is one level again.
	for range 512 {
		w.add(lognormal(rng, 400*time.Millisecond, 0.5))
	}
	if f, m := w.off, w.mean(); f != 0 || m < 350*time.Millisecond || m > 550*time.Millisecond {
		t.Errorf("at the new level: shift %v, mean %v, want 1 and about 450ms", f, m)
	}
}

// TestCoreCountsTheRanksAboveStillArriving: a retry ranks below its
// tenant's first attempts; while those take every slot as they come, the
// retry would not start however short the queue ahead of it is now, and it
// is refused at once rather than promised a start — the ranks above go on
// taking slots at the rate they were granted them. Without early refusal
// it is queued, to wait out its deadline.
func TestCoreCountsTheRanksAboveStillArriving(t *testing.T) {
	for _, off := range []bool{false, true} {
		c := newCore(t, Config{Concurrency: 2, MaxQueue: 100, FIFOOnly: true, NoEarlyRefusal: off})
		warm(c, 100*time.Millisecond, 64)
		h := &harness{t: t, c: c, service: func(string) time.Duration { return 100 * time.Millisecond }}
		var arrivals []*arrival
		for i := range 160 { // 20 a second for 8s: every slot, as it frees
			now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
			arrivals = append(arrivals, &arrival{at: now, req: Request{Deadline: now.Add(time.Second)}})
		}
		retry := &arrival{at: t0.Add(6025 * time.Millisecond), req: Request{Attempt: 1, Deadline: t0.Add(7025 * time.Millisecond)}}
		arrivals = append(arrivals, retry)
		arrivals = merge(arrivals)
		h.run(arrivals)
		if off {
			if retry.decision.Verdict != Queued {
				t.Errorf("NoEarlyRefusal: the retry was %v, want queued", retry.decision.Verdict)
			}
			continue
		}
		if retry.decision.Verdict != Rejected || retry.decision.Reason != ReasonQueueWait {
			t.Errorf("a retry below first attempts that take every slot: %+v, want queue_wait at once", retry.decision)
		}
	}
}
