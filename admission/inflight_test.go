package admission

import (
	"testing"
	"time"
)

// TestCoreReadsASlowdownInTheCallsItHolds: a gate whose window says 100 ms
// holds 16 calls that have all run a second — the dependency slowed and
// none of its slowed calls has completed to say so. A call with 600 ms
// left would wait one slot's time and then need the window's p95, which
// fits; but the calls in flight say the p95 is at least a second, so it
// is refused at once rather than queued to be started and cut at its
// deadline. Calls in flight no older than the p95 change nothing.
func TestCoreReadsASlowdownInTheCallsItHolds(t *testing.T) {
	for _, slowed := range []bool{false, true} {
		c := newCore(t, Config{Concurrency: 16, MaxQueue: 100, FIFOOnly: true})
		warm(c, 100*time.Millisecond, 256)
		for i := range 16 {
			mustArrive(t, c, at(i*5), Request{}, &Ticket{})
		}
		now := at(100) // the oldest call has run as long as the p95
		if slowed {
			now = at(1100)
		}
		d := mustArrive(t, c, now, Request{Deadline: now.Add(600 * time.Millisecond)}, &Ticket{})
		switch {
		case slowed && (d.Verdict != Rejected || d.Reason != ReasonQueueWait || d.ServiceP95 < time.Second):
			t.Errorf("16 calls in flight for a second, the window's p95 100ms: %+v, want queue_wait with a p95 of a second or more", d)
		case !slowed && (d.Verdict != Queued || d.ServiceP95 > 110*time.Millisecond):
			t.Errorf("16 calls in flight no longer than the p95: %+v, want queued with the window's p95", d)
		}
	}
}

// TestRunningForgetsTheCallsReleased: the record of calls in flight
// follows grants and releases, and its floor is the j-th oldest's age.
func TestRunningForgetsTheCallsReleased(t *testing.T) {
	var r running
	for i := range 10 {
		r.add(at(i * 100))
	}
	if got := r.overdue(at(1000)); got != 700*time.Millisecond {
		t.Fatalf("10 in flight started every 100ms from 0: floor %v at 1s, want the 4th oldest's age 700ms", got)
	}
	r.remove(at(0))
	r.remove(at(290)) // nearest the one started at 300ms
	if got := r.overdue(at(1000)); got != 600*time.Millisecond {
		t.Fatalf("after two releases: floor %v, want the 3rd oldest of 8 (started at 100, 200, 400…): 600ms", got)
	}
	for range 8 {
		r.remove(at(1000))
	}
	if len(r.at) != 0 || r.overdue(at(1000)) != 0 {
		t.Fatalf("all released: %v in flight, floor %v", r.at, r.overdue(at(1000)))
	}
}
