package admission

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestHeadroomReachesZeroBeforeTheFirstRefusal: a tenant that keeps
// sending — one request at a time, none completing — is told Remaining
// > 0 before every request the gate then admits, and Remaining = 0
// before every one it refuses: the count is the admission rule's own. It
// holds with the tenant capped or not, other tenants waiting or not, a
// bounded waiting room, and standing queues; and Limit is what it holds
// plus Remaining.
func TestHeadroomReachesZeroBeforeTheFirstRefusal(t *testing.T) {
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{Concurrency: 1 + rng.IntN(16), MaxQueue: rng.IntN(64), InitialServiceTime: time.Second}
		tc := TenantShare{Weight: 1}
		if rng.IntN(2) == 0 {
			tc.MaxInFlight = 1 + rng.IntN(8)
		}
		cfg.Tenants = map[string]TenantShare{"a": tc, "b": {Weight: 1}}
		name := fmt.Sprintf("seed %d: concurrency %d, max_queue %d, cap %d", seed, cfg.Concurrency, cfg.MaxQueue, tc.MaxInFlight)
		c := newCore(t, cfg)
		warm(c, time.Duration(200+rng.IntN(800))*time.Millisecond, 64)
		now := t0
		// Another tenant's load: some of the slots, some of the queue.
		for range rng.IntN(cfg.Concurrency + cfg.MaxQueue/2 + 1) {
			mustArrive(t, c, now, Request{Tenant: "b", Deadline: now.Add(time.Minute)}, &Ticket{})
		}
		budget := time.Duration(500+rng.IntN(20000)) * time.Millisecond
		refused := false
		for i := 0; i < 500 && !refused; i++ {
			now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
			req := Request{Tenant: "a", Deadline: now.Add(budget)}
			h, err := c.Headroom(now, req)
			if err != nil {
				t.Fatal(err)
			}
			held := 0
			if ts := c.tenants["a"]; ts != nil {
				held = ts.inFlight + ts.queued
			}
			if h.Limit != held+h.Remaining || h.Reset <= 0 {
				t.Fatalf("%s, request %d: %+v, holding %d: want Limit = held + Remaining and a positive Reset", name, i, h, held)
			}
			d := mustArrive(t, c, now, req, &Ticket{})
			refused = d.Verdict == Rejected
			switch {
			case refused && h.Remaining > 0:
				t.Fatalf("%s, request %d: refused (%v) with Remaining %d", name, i, d.Reason, h.Remaining)
			case !refused && h.Remaining == 0 && !(d.EstimatedWait == 0 && d.ServiceP95 > budget):
				// (The probe of an idle slot, a call whose p95 is past
				// its budget, is let through uncounted.)
				t.Fatalf("%s, request %d: admitted (%v, wait %v) with Remaining 0", name, i, d.Verdict, d.EstimatedWait)
			case refused && h.Reset != d.RetryAfter && d.Reason == ReasonQueueWait:
				t.Errorf("%s, request %d: Reset %v, the refusal's Retry-After %v", name, i, h.Reset, d.RetryAfter)
			}
		}
		if !refused {
			t.Fatalf("%s: never refused", name)
		}
	}
}
