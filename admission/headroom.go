package admission

import (
	"math"
	"sort"
	"time"
)

// Headroom is a tenant's room at the gate, as a caller pacing itself reads
// a provider's rate-limit headers: how many calls like one request it may
// have in flight and waiting at once, how many more of them would be
// admitted now, and how soon one more place frees.
type Headroom struct {
	// Limit is the calls the tenant may hold at once — in flight and
	// waiting — under the current estimates: those it holds now plus
	// Remaining. It moves with the estimates, the concurrency and the
	// other tenants' demand.
	Limit int
	// Remaining is how many more calls like the request would be admitted
	// now, each waiting behind the ones before it: zero means the next
	// one would be refused (or would only be let through as a probe of a
	// slot nobody else wants).
	Remaining int
	// Reset is how soon one more place is expected: with Remaining at
	// zero, the Retry-After a refusal would carry now; else the time
	// between two completions while every slot is busy.
	Reset time.Duration
}

// Headroom is the room of req's tenant for more requests like req, at now,
// each with req's budget (Deadline − now for the first: the extras are
// taken to arrive with the same budget). Nothing changes: a tenant not seen
// yet is looked at through a state the Core does not keep. It counts by
// the admission rule itself (decide), as if each extra request queued
// behind the ones before it, against the tenant's and the gate's bounds on
// the waiting room; the probe of an idle slot is not counted, so Remaining
// reaches zero no later than the first refusal.
func (c *Core) Headroom(now time.Time, req Request) (Headroom, error) {
	rank, err := c.ranks.Rank(&req)
	if err != nil {
		return Headroom{}, err
	}
	cost, err := req.cost()
	if err != nil {
		return Headroom{}, err
	}
	ts := c.tenants[req.Tenant]
	if ts == nil {
		ts = c.newTenant(req.Tenant)
	}
	held := ts.inFlight + ts.queued
	var budget time.Duration
	if !req.Deadline.IsZero() {
		if budget = req.Deadline.Sub(now); budget <= 0 {
			return Headroom{Limit: held, Reset: c.perSlot()}, nil
		}
	}
	pl := c.placeOf(now, &req)
	p95 := pl.p95
	free := c.concurrency - c.inFlight
	ahead := c.ahead(now, rank, req.Tenant, ts, cost, &pl)
	standing := !c.cfg.NoEarlyRefusal && ts.standing(now, rank, pl.class)
	// grantable extras take a slot at once: free slots nothing waits for,
	// within the tenant's cap.
	grantable := max(0, free-int(math.Ceil(ahead)))
	if ts.maxInFlight > 0 {
		grantable = min(grantable, max(0, ts.maxInFlight-ts.inFlight))
	}
	// The waiting room left to the tenant's extras; at the gate's bound, a
	// newcomer that may evict over-share work still gets in (one is
	// counted: the next is decided once it has).
	queueRoom := c.cfg.MaxQueue - c.queued
	if queueRoom <= 0 && c.victimFor(rank, ts, cost) != nil {
		queueRoom = 1
	}
	if ts.maxQueue > 0 {
		queueRoom = min(queueRoom, ts.maxQueue-ts.queued)
	}
	upper := grantable + max(0, queueRoom)
	// waitOfExtra is the estimated wait of the k-th extra request (from
	// 0): k of its own ahead of it, each of its work, besides what is
	// ahead now.
	waitOfExtra := func(k int) time.Duration {
		wait := c.drain(now, rank, pl.class, pl.due, ts, ahead+float64(k)*pl.units+1-float64(free))
		if ts.maxInFlight > 0 {
			// At its cap the tenant waits for its own slots (cappedWait),
			// the extras before it that found none queued too.
			if capRoom := max(0, ts.maxInFlight-ts.inFlight); k >= capRoom {
				wait = max(wait, scale(ts.queued+k-capRoom+1, c.serviceForRate(), ts.maxInFlight))
			}
		}
		return wait
	}
	fits := func(k int) bool {
		if k >= upper {
			return false
		}
		wait := waitOfExtra(k)
		switch {
		case budget <= 0:
			return true
		case wait+p95 > budget:
			return false
		case standing && wait > 0 && wait > c.allowance(budget):
			return false
		}
		return true
	}
	// The extras' waits grow with k: the first that does not fit is found
	// by bisection.
	room := sort.Search(upper+1, func(k int) bool { return !fits(k) })
	h := Headroom{Limit: held + room, Remaining: room, Reset: c.perSlot()}
	if room == 0 && budget > 0 {
		h.Reset = c.retryAfter(waitOfExtra(0), p95, budget)
	}
	return h, nil
}
