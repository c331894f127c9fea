package admission

import (
	"testing"
	"time"
)

// Shed refuses every queued ticket at once, with the reason and the
// Retry-After given, and leaves the slots in flight alone: the owner knows
// none of the queued work can be served here (its dependency is down).
func TestCoreShedRefusesEveryQueuedTicket(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 8, InitialServiceTime: time.Second})
	if d, _ := c.Arrive(t0, Request{Deadline: t0.Add(time.Minute)}, new(Ticket), true); d.Verdict != Granted {
		t.Fatalf("first: %v", d.Verdict)
	}
	queued := []*Ticket{new(Ticket), new(Ticket), new(Ticket)}
	for i, tk := range queued {
		req := Request{Deadline: t0.Add(time.Minute)}
		if i == 2 {
			req.Class = ClassBatch
		}
		if d, _ := c.Arrive(t0, req, tk, true); d.Verdict != Queued {
			t.Fatalf("ticket %d: %v, want queued", i, d.Verdict)
		}
	}
	c.Events()
	if n := c.Shed(t0.Add(time.Second), ReasonQueueWait, 3*time.Second); n != 3 {
		t.Fatalf("shed %d, want 3", n)
	}
	ev := c.Events()
	if len(ev) != 3 || c.Queued() != 0 || c.InFlight() != 1 {
		t.Fatalf("%d events, %d queued, %d in flight; want 3, 0, 1", len(ev), c.Queued(), c.InFlight())
	}
	for _, tk := range queued {
		rej := tk.Rejection()
		if tk.Granted() || rej == nil || rej.Reason != ReasonQueueWait || rej.RetryAfter != 3*time.Second {
			t.Fatalf("a shed ticket: granted %v, %+v", tk.Granted(), rej)
		}
	}
	if n := c.Shed(t0.Add(time.Second), ReasonQueueWait, time.Second); n != 0 {
		t.Fatalf("shed %d of an empty queue", n)
	}
}
