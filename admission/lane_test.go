package admission

import (
	"testing"
	"time"
)

// Calls of one rank whose callers wait differently are served by their
// deadlines, not by when they came: a 3 s call that came after 10 s calls
// goes before them, where first come first served would have it wait
// behind calls that had time to spare.
func TestLanesServeTheEarliestDeadlineFirst(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10})
	warm(c, 200*time.Millisecond, 64)
	mustArrive(t, c, t0, Request{}, &Ticket{}) // the slot
	var long [3]Ticket
	for i := range long {
		mustArrive(t, c, t0, Request{Deadline: at(10_000)}, &long[i])
	}
	var short Ticket
	if d := mustArrive(t, c, at(10), Request{Deadline: at(3_010)}, &short); d.Verdict != Queued {
		t.Fatalf("the short call: %v, want queued", d.Verdict)
	}
	if d := mustArrive(t, c, at(10), Request{Deadline: at(3_010)}, &Ticket{}); d.EstimatedWait > 400*time.Millisecond {
		t.Errorf("a second short call is told %v, want about two completions (the short call ahead of it, and the slot): the long calls are served after it", d.EstimatedWait)
	}
	c.Release(at(200), Request{}, Outcome{ServiceTime: 200 * time.Millisecond})
	if !short.Granted() {
		t.Fatal("the slot freed: the short call, due first, was not granted")
	}
	for i := range long {
		if long[i].Granted() {
			t.Fatalf("long call %d granted before the short one", i)
		}
	}
}

// Lanes go by deadline, not by the latest time a call can start: a
// short call due before a long one goes first even when the long call's
// p95 leaves it less time to start — both are then served in time, where
// serving the long call first would leave the short one too late.
func TestAShortCallDueFirstGoesBeforeALongOneThatMustStartFirst(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10})
	warmShapes(c, 100) // short calls 100 ms, long calls 1 s
	// The slot, taken.
	mustArrive(t, c, t0, Request{Key: "m", Shape: shortShape, Family: shortFamily}, &Ticket{})
	// The long call, due in 2 s, must start by about 1 s.
	var long Ticket
	if d := mustArrive(t, c, t0, Request{Key: "m", Shape: longShape, Family: longFamily, Deadline: at(2_000)}, &long); d.Verdict != Queued {
		t.Fatalf("the long call: %v, want queued", d.Verdict)
	}
	// The short call, of a shorter lane, due in 1.15 s, must start by
	// about 1.05 s: later than the long call, but before the long call
	// would end if it went first.
	var short Ticket
	if d := mustArrive(t, c, at(150), Request{Key: "m", Shape: shortShape, Family: shortFamily, Deadline: at(1_150)}, &short); d.Verdict != Queued {
		t.Fatalf("the short call: %v (wait %v), want queued: it is due before the long call, which goes after it", d.Verdict, d.EstimatedWait)
	}
	c.Release(at(300), Request{Key: "m", Shape: shortShape, Family: shortFamily}, Outcome{ServiceTime: 300 * time.Millisecond})
	if !short.Granted() || long.Granted() {
		t.Fatalf("the slot freed: short granted %v, long granted %v; want the short call, due first", short.Granted(), long.Granted())
	}
	c.Release(at(400), short.req, Outcome{ServiceTime: 100 * time.Millisecond})
	if !long.Granted() {
		t.Fatalf("the short call done at 0.4s: the long call, which can start until about 1s, was not granted (%+v)", long.Rejection())
	}
}

// A call overtaken by later calls of shorter deadlines past the time it
// must start is refused at once, not left to learn it at its deadline.
func TestOvertakenPastItsStartIsRefusedAtOnce(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 100})
	warm(c, 200*time.Millisecond, 64)
	mustArrive(t, c, t0, Request{}, &Ticket{}) // the slot
	// Its wait: one completion; its start-by: 2.1 s less the p95.
	var long Ticket
	if d := mustArrive(t, c, t0, Request{Deadline: at(2_100)}, &long); d.Verdict != Queued {
		t.Fatalf("the long call: %v, want queued", d.Verdict)
	}
	// Calls of budgets just under 2,048 ms — a shorter lane — go before
	// it, each 200 ms of work, and fit their own deadlines: the ninth puts
	// it past its start (1.9 s).
	for i := range 12 {
		mustArrive(t, c, at(i), Request{Deadline: at(i + 2_040)}, &Ticket{})
		if long.state != ticketQueued {
			break
		}
	}
	r := long.Rejection()
	if r == nil || r.Reason != ReasonQueueWait {
		t.Fatalf("the long call overtaken past its start: %+v, want refused queue_wait at once", r)
	}
	if long.decided.After(at(20)) {
		t.Errorf("refused at %v, want at the overtaking arrival", long.decided.Sub(t0))
	}
}

// A lane that stands — its callers refused for their wait for a while —
// cuts the allowance of its own newcomers, not of callers of another lane
// that the queue can serve in time.
func TestAStandingLaneDoesNotCutAnother(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 1000})
	warm(c, 200*time.Millisecond, 64)
	mustArrive(t, c, t0, Request{}, &Ticket{}) // the slot
	// Thirty calls of 10 s queued: 6 s of work.
	for range 30 {
		mustArrive(t, c, t0, Request{Deadline: at(10_000)}, &Ticket{})
	}
	// Short-deadline callers refused for their wait, without a pause,
	// for longer than a quarter of their budget: their lane stands.
	for ms := 0; ms <= 1_000; ms += 50 {
		mustArrive(t, c, at(ms), Request{Deadline: at(ms + 300)}, &Ticket{})
	}
	if !c.tenant("").standing(at(1_000), 4, laneOf(300*time.Millisecond, true)) {
		t.Fatal("the short lane does not stand: the scenario needs it to")
	}
	// A 10 s caller, told a wait of about 6 s that fits its deadline, is
	// queued: the short lane's standing is not its.
	d := mustArrive(t, c, at(1_000), Request{Deadline: at(11_000)}, &Ticket{})
	if d.Verdict != Queued || d.EstimatedWait < 5*time.Second {
		t.Fatalf("a long-deadline caller beside a standing short lane: %v, wait %v; want queued with its whole wait (about 6s)", d.Verdict, d.EstimatedWait)
	}
}
