package admission

import (
	"testing"
	"time"
)

// FuzzCore drives a Core with arbitrary operations and checks that nothing a
// caller can pass panics and that the books always balance: every ticket is
// queued, granted or refused exactly once, and the counts agree.
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 200, 201, 202})
	f.Add([]byte{3, 3, 3, 3, 3, 3, 3, 3, 130, 130, 130, 64, 65, 66, 67})
	f.Fuzz(func(t *testing.T, ops []byte) {
		c, err := NewCore(Config{Concurrency: 2, MaxQueue: 5, MaxQueuePerTenant: 3, LIFOInterval: 10 * time.Millisecond, LIFOTarget: 5 * time.Millisecond,
			Tenants: map[string]TenantShare{"a": {Weight: 3, MaxInFlight: 1}, "b": {MaxQueue: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		classes := []string{"", ClassInteractive, ClassBatch, ClassSpeculative, "bogus"}
		now := t0
		var queued []*Ticket
		inFlight := 0
		var granted []Request // what holds a slot, released oldest first
		for i, op := range ops {
			now = now.Add(time.Duration(op%7) * time.Millisecond)
			switch op % 4 {
			case 0, 1: // arrive
				req := Request{
					Class:    classes[int(op/4)%len(classes)],
					Tenant:   string(rune('a' + int(op/8)%3)),
					Tier:     Tier(op/16) % 4,
					Attempt:  int(op/32)%3 - 1,
					Key:      string(rune('k' + int(op/64))),
					Deadline: deadlineFor(now, op),
					Cost:     float64(int(op/2)%5) * 4, // 0 (for 1) to 16
				}
				tk := &Ticket{}
				d, err := c.Arrive(now, req, tk, op%2 == 0)
				if err != nil {
					continue
				}
				switch d.Verdict {
				case Granted:
					inFlight++
					granted = append(granted, req)
				case Queued:
					queued = append(queued, tk)
				case Rejected:
					if d.RetryAfter <= 0 {
						t.Fatalf("op %d: rejection without RetryAfter: %+v", i, d)
					}
				}
			case 2: // release
				if inFlight > 0 {
					inFlight--
					req := granted[0]
					granted = granted[1:]
					c.Release(now, req, Outcome{Result: Result(op/4) % 5, ServiceTime: time.Duration(op) * time.Millisecond})
				}
			case 3: // cancel one, or change concurrency
				if len(queued) > 0 && op&4 == 0 {
					c.Cancel(now, queued[int(op)%len(queued)], Reason(op/8)%numReasons)
				} else {
					_ = c.SetConcurrency(now, int(op/8)%4)
				}
			}
			for _, tk := range c.Events() {
				if tk.Granted() {
					inFlight++
					granted = append(granted, tk.Request())
				} else if r := tk.Rejection(); r == nil || r.RetryAfter <= 0 {
					t.Fatalf("op %d: decided ticket without a refusal: %+v", i, r)
				}
			}
			// Drop decided tickets from our list.
			live := queued[:0]
			for _, tk := range queued {
				if tk.state == ticketQueued {
					live = append(live, tk)
				}
			}
			queued = live
			if c.Queued() != len(queued) || c.InFlight() != inFlight {
				t.Fatalf("op %d: core says queued %d in flight %d, we count %d and %d", i, c.Queued(), c.InFlight(), len(queued), inFlight)
			}
			depth := 0
			for r := range c.levels {
				depth += c.levels[r].depth
			}
			if depth != c.Queued() {
				t.Fatalf("op %d: levels hold %d, queued %d", i, depth, c.Queued())
			}
			held := 0
			for _, ts := range c.tenants {
				held += ts.inFlight
				if ts.inFlight > 0 && ts.maxInFlight > 0 && ts.inFlight > ts.maxInFlight {
					t.Fatalf("op %d: tenant %q holds %d slots, its cap is %d", i, ts.name, ts.inFlight, ts.maxInFlight)
				}
			}
			if held != inFlight {
				t.Fatalf("op %d: tenants hold %d slots, in flight %d", i, held, inFlight)
			}
			if c.Queued() > 5 {
				t.Fatalf("op %d: the bound was passed: %d queued", i, c.Queued())
			}
		}
	})
}

func deadlineFor(now time.Time, op byte) time.Time {
	switch op % 3 {
	case 0:
		return time.Time{}
	case 1:
		return now.Add(time.Duration(op) * time.Millisecond)
	}
	return now.Add(-time.Millisecond)
}
