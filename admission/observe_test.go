package admission

import (
	"testing"
	"time"
)

// An observed gate decides a burst as an enforcing one does — the same
// calls granted, queued and refused, for the same reasons — while it
// grants every call it would not refuse, and counts nothing as admitted
// or refused.
func TestObserveDecidesAsArriveWould(t *testing.T) {
	cfg := Config{Concurrency: 2, MaxQueue: 6, InitialServiceTime: 100 * time.Millisecond}
	enforce, observe := newCore(t, cfg), newCore(t, cfg)
	warm(enforce, 100*time.Millisecond, 64)
	warm(observe, 100*time.Millisecond, 64)
	for i := range 20 {
		// Short deadlines and longer ones in turn: the short ones fit a
		// slot or a short wait, then are refused for the wait; the
		// longer ones queue until the waiting room is full. Both come
		// with budgets of one lane (see lane.go): observe mode stands
		// the calls it lets past the concurrency for the queue they
		// would have waited in, in the order they came, which is the
		// order of one lane, and not the earliest-deadline-first order
		// of several.
		deadline := 300
		if i%2 == 1 {
			deadline = 500
		}
		req := Request{Deadline: at(deadline)}
		var tk Ticket
		want := mustArrive(t, enforce, at(0), req, &tk)
		got, err := observe.Observe(at(0), req, true)
		if err != nil {
			t.Fatal(err)
		}
		if got.Verdict != want.Verdict || got.Reason != want.Reason || got.EstimatedWait != want.EstimatedWait {
			t.Errorf("call %d: observed %v/%v wait %v, enforced %v/%v wait %v", i,
				got.Verdict, got.Reason, got.EstimatedWait, want.Verdict, want.Reason, want.EstimatedWait)
		}
	}
	es, os := enforce.Stats(at(0)), observe.Stats(at(0))
	if os.InFlight != es.InFlight+es.Queued {
		t.Errorf("observed in flight %d, want the enforced gate's in flight and queued %d+%d", os.InFlight, es.InFlight, es.Queued)
	}
	if es.Rejected[ReasonQueueFull] == 0 || es.Rejected[ReasonQueueWait] == 0 {
		t.Fatalf("the burst should be refused both ways when enforced: %v", es.Rejected)
	}
	if os.Admitted != 0 || len(os.Rejected) != 0 {
		t.Errorf("observe counted %d admitted, %v refused; want nothing", os.Admitted, os.Rejected)
	}
}

// Without wait, a call that would queue is one TryAcquire would refuse.
func TestObserveWithoutWaitRefusesWhatWouldQueue(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 5})
	warm(c, 100*time.Millisecond, 64)
	if d, _ := c.Observe(at(0), Request{Deadline: at(1000)}, false); d.Verdict != Granted {
		t.Fatalf("first call: %v, want granted", d.Verdict)
	}
	d, _ := c.Observe(at(0), Request{Deadline: at(1000)}, false)
	if d.Verdict != Rejected || d.Reason != ReasonQueueWait {
		t.Fatalf("second call: %v/%v, want refused queue_wait", d.Verdict, d.Reason)
	}
	if c.InFlight() != 1 {
		t.Errorf("in flight %d, want 1: the would-be refusal takes no slot", c.InFlight())
	}
}

// The gate's Observe never blocks, and its permits give their slots back.
func TestGateObserveGrantsBeyondTheConcurrency(t *testing.T) {
	g, err := New(Config{Concurrency: 1, MaxQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*Permit
	for range 3 {
		p, d, err := g.Observe(Request{}, true)
		if err != nil || p == nil {
			t.Fatalf("Observe: %v, %v (%v)", p, err, d.Verdict)
		}
		ps = append(ps, p)
	}
	if s := g.Stats(); s.InFlight != 3 || s.Queued != 0 {
		t.Fatalf("in flight %d queued %d, want 3 and 0", s.InFlight, s.Queued)
	}
	for _, p := range ps {
		p.Done(Outcome{Result: Success, ServiceTime: time.Millisecond})
	}
	if s := g.Stats(); s.InFlight != 0 {
		t.Fatalf("in flight %d after Done, want 0", s.InFlight)
	}
}
