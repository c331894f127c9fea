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
