package admission

import (
	"testing"
	"time"
)

// TestCoreNoDequeueExpiryGrantsInTurn: with NoDequeueExpiry the request that
// TestCoreDropsExpiredWorkAtDequeue drops is granted instead, and nothing is
// counted as expired; a request whose caller left still leaves by Cancel.
func TestCoreNoDequeueExpiryGrantsInTurn(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, FIFOOnly: true, NoDequeueExpiry: true})
	warm(c, time.Second, 32)
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	var doomed, gone Ticket
	mustArrive(t, c, at(0), Request{Deadline: at(2600)}, &doomed)
	mustArrive(t, c, at(0), Request{Deadline: at(3500)}, &gone)
	if !c.Cancel(at(1000), &gone, ReasonExpired) {
		t.Fatal("Cancel of a queued ticket reported it decided")
	}
	c.Release(at(2000), Request{}, Outcome{ServiceTime: 2 * time.Second})
	ev := c.Events()
	if len(ev) != 1 || ev[0] != &doomed || !doomed.Granted() {
		t.Fatalf("events %v, doomed granted %v: want doomed granted although it cannot finish", ev, doomed.Granted())
	}
	if st := c.Stats(at(2000)); st.Rejected[ReasonExpired] != 1 || st.Granted != 1 {
		t.Fatalf("stats: expired %d (only the cancelled one), granted %d", st.Rejected[ReasonExpired], st.Granted)
	}
}

// TestCoreStartsQueuedWorkAtTheBarItWasAdmittedUnder: a queued request is
// started while the p95 service time still fits the time left — the
// promise admission made at arrival — even when the p99 would not. A
// higher bar at dequeue than at arrival drops admitted work whose promise
// holds: at a 2.5 s budget with a 1 s p95 and a 3 s p99, a request that
// waited 1 s would fail for certain instead of succeeding 19 times in 20.
func TestCoreStartsQueuedWorkAtTheBarItWasAdmittedUnder(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, FIFOOnly: true})
	warm(c, time.Second, 96)
	warm(c, 3*time.Second, 4)
	if st := c.Stats(at(0)); st.ServiceP95 > 1100*time.Millisecond || st.ServiceP99 < 2500*time.Millisecond {
		t.Fatalf("service p95 %v, p99 %v: the test needs p95 ≈ 1s and p99 ≈ 3s", st.ServiceP95, st.ServiceP99)
	}
	mustArrive(t, c, at(0), Request{}, &Ticket{})
	var kept, late Ticket
	if d := mustArrive(t, c, at(0), Request{Deadline: at(2500)}, &kept); d.Verdict != Queued {
		t.Fatalf("kept: %v, want queued (wait 1s + p95 1s fits 2.5s)", d.Verdict)
	}
	c.Release(at(1000), Request{}, Outcome{ServiceTime: time.Second})
	if !kept.Granted() {
		t.Fatalf("a request whose p95 still fits (1s + 1s ≤ 2.5s) was not started")
	}
	// The bar is still there: one whose p95 no longer fits is dropped.
	mustArrive(t, c, at(1000), Request{Deadline: at(3500)}, &late)
	c.Release(at(2700), Request{}, Outcome{ServiceTime: 1700 * time.Millisecond})
	if late.Granted() || c.Stats(at(2700)).Rejected[ReasonExpired] != 1 {
		t.Fatalf("a request with 0.8s left and a 1s p95 was started")
	}
}
