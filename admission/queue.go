package admission

import (
	"slices"
	"time"
)

// Ticket is one request's place in a [Core]'s queue. The owner of the Core
// allocates it (or reuses one: a Ticket the Core has decided can be passed to
// Arrive again) and reads its outcome once the Core reports it in Events.
type Ticket struct {
	// Owner is free for the Core's owner, for example to find the waiter to
	// wake. The Core never reads it.
	Owner any

	req  Request
	rank int
	cost float64 // req.Cost, 1 when unset
	// units is its expected work, in calls of the gate's mean service
	// time: its shape's mean over the mean of all (see Core.unitsOf), so
	// that a queue of short calls is estimated to drain faster than one
	// of long calls; 1 without statistics of its own.
	units float64
	// due is its deadline, or its arrival without one: lanes are served
	// earliest due first (see lane.go).
	due      time.Time
	class    uint8 // its lane class (laneOf)
	ts       *tenantState
	enqueued time.Time
	// overload: queued while its queue stood (see Core.allowance) — served
	// newest-first among such, after the tickets promised a place before.
	overload bool
	// The decision, valid once state is decided.
	state   ticketState
	reason  Reason
	wait    time.Duration // estimated at arrival
	retry   time.Duration // RetryAfter of a rejection
	decided time.Time
	tq      *tenantQueue
	ln      *lane   // its lane in tq
	prev    *Ticket // within its lane
	next    *Ticket
}

type ticketState uint8

const (
	ticketIdle ticketState = iota
	ticketQueued
	ticketGranted
	ticketRejected
)

// Granted reports whether the Core granted the ticket a slot.
func (t *Ticket) Granted() bool { return t.state == ticketGranted }

// Request returns the request the ticket was queued for.
func (t *Ticket) Request() Request { return t.req }

// Rank is the rank the request was given.
func (t *Ticket) Rank() int { return t.rank }

// Units is the ticket's expected work, as Decision.Units.
func (t *Ticket) Units() float64 { return t.units }

// QueueTime is how long the ticket waited before it was decided.
func (t *Ticket) QueueTime() time.Duration { return t.decided.Sub(t.enqueued) }

// Rejection returns the refusal of a rejected ticket, nil otherwise.
func (t *Ticket) Rejection() *Rejection {
	if t.state != ticketRejected {
		return nil
	}
	return &Rejection{Reason: t.reason, EstimatedWait: t.wait, RetryAfter: t.retry, Rank: t.rank}
}

// tenantQueue is one tenant's queued tickets of one rank, in lanes by
// the budget they came with (see lane.go): one lane for callers that all
// wait alike.
type tenantQueue struct {
	tenant string
	ts     *tenantState
	n      int
	cost   float64 // of the queued tickets
	units  float64 // their expected work (Ticket.units)
	// finish is the tenant's virtual finish time in this rank: the start
	// tag of its next ticket is max(level.vtime, finish).
	finish float64
	// ring links of the rank's active tenants, in serving order.
	prev, next *tenantQueue
	// promises: the gate refuses early (Config.NoEarlyRefusal false), and
	// keeps the place it promised a ticket at its arrival: newest-first
	// is then for the tickets queued while their lane stood (see lane),
	// and the CoDel-style switch only for a lane whose oldest ticket has
	// no deadline, and so no promise.
	promises bool
	// lanes are the non-empty lanes, by class, shortest budgets first;
	// one lives in first, so that a queue of one lane allocates none.
	lanes   []*lane
	first   lane
	laneBuf [1]*lane
}

// laneOf returns the queue's lane of class, making it when add.
func (tq *tenantQueue) laneOf(class uint8, add bool) *lane {
	i := 0
	for ; i < len(tq.lanes); i++ {
		if c := tq.lanes[i].class; c == class {
			return tq.lanes[i]
		} else if c > class {
			break
		}
	}
	if !add {
		return nil
	}
	ln := &tq.first
	if tq.usesFirst() {
		ln = &lane{}
	}
	*ln = lane{class: class}
	if tq.lanes == nil {
		tq.lanes = tq.laneBuf[:0]
	}
	tq.lanes = append(tq.lanes, nil)
	copy(tq.lanes[i+1:], tq.lanes[i:])
	tq.lanes[i] = ln
	return ln
}

// usesFirst says whether one of the lanes lives in tq.first.
func (tq *tenantQueue) usesFirst() bool {
	for _, ln := range tq.lanes {
		if ln == &tq.first {
			return true
		}
	}
	return false
}

// dropLane forgets an empty lane.
func (tq *tenantQueue) dropLane(ln *lane) {
	for i, l := range tq.lanes {
		if l == ln {
			tq.lanes = slices.Delete(tq.lanes, i, i+1)
			return
		}
	}
}

// peek is the ticket tq would serve next: of its lanes' next tickets, the
// one due soonest (ties: the shorter budgets' lane).
func (tq *tenantQueue) peek() *Ticket {
	if len(tq.lanes) == 1 {
		return tq.lanes[0].peek()
	}
	var best *Ticket
	for _, ln := range tq.lanes {
		if t := ln.peek(); best == nil || earlier(t, best) {
			best = t
		}
	}
	return best
}

// lastServed is the ticket tq would serve last: of its lanes' last
// tickets, the one that may start latest (ties: the longer budgets').
func (tq *tenantQueue) lastServed() *Ticket {
	if len(tq.lanes) == 1 {
		return tq.lanes[0].lastServed()
	}
	var last *Ticket
	for _, ln := range tq.lanes {
		if t := ln.lastServed(); last == nil || !earlier(t, last) {
			last = t
		}
	}
	return last
}

// newestFirst says whether tq serves some of its tickets newest-first.
func (tq *tenantQueue) newestFirst() bool {
	for _, ln := range tq.lanes {
		if ln.newestFirst() {
			return true
		}
	}
	return false
}

// before sums the cost and work of tq's tickets served before a ticket
// of lane class due at due: of its own lane, those ahead of it as own
// counts them; of the other lanes, those due by
// then.
func (tq *tenantQueue) before(class uint8, due time.Time, ownCost, ownUnits float64) (cost, units float64) {
	cost, units = ownCost, ownUnits
	for _, ln := range tq.lanes {
		if ln.class == class {
			continue
		}
		c, u := ln.before(due)
		cost += c
		units += u
	}
	return cost, units
}

// overload is the CoDel-style detector: a queue is overloaded once the age
// of its oldest item, seen at dequeue, has stayed at or above target for
// interval; it stops being overloaded as soon as that age is seen below
// target, or when the queue empties (its tenantQueue is then dropped).
//
// The target is half the oldest item's time budget (deadline − arrival)
// when it has a deadline — waiting that long means the queue is eating the
// callers' budgets, whatever the time scale of the dependency — and the
// configured LIFOTarget otherwise.
type overload struct {
	off              bool
	target, interval time.Duration
}

// observe updates ln's mode before it is served. The age of the oldest item,
// not the wait of the item served, is the signal: under LIFO the item served
// is the newest, whose short wait would switch LIFO off while the backlog
// behind it is still old.
func (o *overload) observe(now time.Time, ln *lane, promises bool) {
	if o.off || (promises && !ln.head.req.Deadline.IsZero()) {
		ln.lifo = false
		return // with promises, newest-first is for overload tickets (see lane)
	}
	head := ln.head
	target := o.target
	if !head.req.Deadline.IsZero() {
		target = head.req.Deadline.Sub(head.enqueued) / 2
	}
	if now.Sub(head.enqueued) < target {
		ln.lifo, ln.aboveAt = false, time.Time{}
		return
	}
	if ln.aboveAt.IsZero() {
		ln.aboveAt = now.Add(o.interval)
		return
	}
	if !now.Before(ln.aboveAt) {
		ln.lifo = true
	}
}

// level is the waiting room of one rank: a ring of tenants, each with its
// own queue, served by start-time fair queuing. Each tenant has a virtual
// finish time; the tenant whose next ticket starts earliest in virtual time
// — max(vtime, its finish) — is served, and its finish time then advances
// by the ticket's cost over its weight. So tenants of a rank are served cost
// in proportion to their weights: one sending prompts sixteen times the size
// gets a sixteenth of the requests, not an equal count, and a tenant's flood
// only lengthens its own queue. Ties go round the ring, so with equal costs
// and weights the order is plain round robin.
//
// Start-time rather than finish-time tags: the choice does not need the
// cost of the ticket to be served (which, with LIFO per tenant, is not
// known until the tenant is chosen), and a newly active tenant starts at
// the current virtual time — no credit for having been idle, no wait for
// the others' backlog.
type level struct {
	depth  int
	cost   float64      // of the queued tickets
	units  float64      // their expected work (Ticket.units)
	ring   *tenantQueue // where the search for the next tenant starts; nil when empty
	queues map[string]*tenantQueue
	vtime  float64 // the start tag of the ticket served last
	// debt keeps the finish time of tenants whose queue emptied while they
	// were ahead of the virtual time, so that emptying a queue between two
	// requests does not wipe out what the tenant was just served.
	debt      map[string]float64
	debtSwept int
}

// refusing is a tenant's queue of one rank seen over time: since is when
// it began refusing newcomers for their wait — the estimate said they
// would not start in time, or the room was full — without a pause longer
// than the standing interval, last is its latest such refusal, and
// interval the standing interval of that refused newcomer.
type refusing struct {
	since, last time.Time
	interval    time.Duration
}

// refused books a newcomer with the given standing interval refused for
// its wait at now.
func (r *refusing) refused(now time.Time, interval time.Duration) {
	if r.since.IsZero() || now.Sub(r.last) > max(interval, r.interval) {
		r.since = now
	}
	r.last, r.interval = now, interval
}

// standing says whether the queue has been refusing newcomers for their
// wait, without a pause longer than the standing interval, for at least
// that interval: it is full to its callers' deadlines, and has been for a
// while (see Core.allowance).
func (r *refusing) standing(now time.Time) bool {
	return !r.since.IsZero() && now.Sub(r.last) <= r.interval && now.Sub(r.since) >= r.interval
}

func (l *level) push(t *Ticket, ts *tenantState, promises bool, class uint8) {
	tq := l.queues[t.req.Tenant]
	if tq == nil {
		tq = &tenantQueue{tenant: t.req.Tenant, ts: ts, finish: l.vtime, promises: promises}
		if f, ok := l.debt[tq.tenant]; ok {
			tq.finish = max(f, l.vtime)
			delete(l.debt, tq.tenant)
		}
		if l.queues == nil {
			l.queues = make(map[string]*tenantQueue)
		}
		l.queues[t.req.Tenant] = tq
		// A newly active tenant joins at the back of the ring.
		if l.ring == nil {
			tq.prev, tq.next = tq, tq
			l.ring = tq
		} else {
			last := l.ring.prev
			tq.prev, tq.next = last, l.ring
			last.next = tq
			l.ring.prev = tq
		}
	}
	t.tq, t.class = tq, class
	t.ln = tq.laneOf(class, true)
	t.ln.push(t, tq.promises)
	tq.n++
	tq.cost += t.cost
	tq.units += t.units
	l.depth++
	l.cost += t.cost
	l.units += t.units
}

// remove unlinks t from its tenant's queue, dropping its lane when it
// empties, and the tenant from the ring when its queue does.
func (l *level) remove(t *Ticket) {
	tq, ln := t.tq, t.ln
	ln.remove(t, tq.promises)
	t.tq, t.ln = nil, nil
	if ln.n == 0 {
		tq.dropLane(ln)
	}
	tq.n--
	tq.cost -= t.cost
	tq.units -= t.units
	l.depth--
	l.cost -= t.cost
	l.units -= t.units
	if l.depth == 0 {
		l.cost, l.units = 0, 0 // no float drift carried over
	}
	if tq.n == 0 {
		tq.cost, tq.units = 0, 0
		if tq.next == tq {
			l.ring = nil
		} else {
			tq.prev.next = tq.next
			tq.next.prev = tq.prev
			if l.ring == tq {
				l.ring = tq.next
			}
		}
		delete(l.queues, tq.tenant)
		if tq.finish > l.vtime {
			l.keepDebt(tq.tenant, tq.finish)
		}
	}
}

// keepDebt remembers a tenant's finish time. Debts the virtual time has
// passed are worth nothing (the tenant would start at vtime anyway); they
// are swept whenever the map has doubled since the last sweep, which keeps
// it in proportion to the tenants that are truly ahead.
func (l *level) keepDebt(tenant string, finish float64) {
	if l.debt == nil {
		l.debt = make(map[string]float64)
	}
	l.debt[tenant] = finish
	if len(l.debt) > 2*l.debtSwept+16 {
		for k, f := range l.debt {
			if f <= l.vtime {
				delete(l.debt, k)
			}
		}
		l.debtSwept = len(l.debt)
	}
}

func (l *level) start(tq *tenantQueue) float64 { return max(l.vtime, tq.finish) }

// next returns the tenant queue to serve among those ok accepts — the
// earliest start tag, ties in ring order — or nil when ok accepts none.
func (l *level) next(ok func(*tenantQueue) bool) *tenantQueue {
	var best *tenantQueue
	var bestStart float64
	tq := l.ring
	for {
		if s := l.start(tq); (best == nil || s < bestStart) && (ok == nil || ok(tq)) {
			best, bestStart = tq, s
		}
		tq = tq.next
		if tq == l.ring {
			return best
		}
	}
}

// has reports whether ok accepts any tenant queued at this rank.
func (l *level) has(ok func(*tenantQueue) bool) bool {
	if l.depth == 0 {
		return false
	}
	for tq := l.ring; ; {
		if ok(tq) {
			return true
		}
		if tq = tq.next; tq == l.ring {
			return false
		}
	}
}

// take serves tq: the ticket its lanes would serve next (see peek). The
// virtual time moves to the ticket's start tag, the tenant's finish time
// past it by cost over weight, and the search for the next tenant starts
// after this one.
func (l *level) take(now time.Time, tq *tenantQueue, o *overload) *Ticket {
	for _, ln := range tq.lanes {
		o.observe(now, ln, tq.promises)
	}
	t := tq.peek()
	s := l.start(tq)
	l.vtime = s
	tq.finish = s + t.cost/tq.ts.weight
	l.ring = tq.next
	l.remove(t)
	return t
}

// lastServed returns the ticket this rank would serve last: from its heaviest
// tenant, the one its lanes would serve last. It is the victim of an
// eviction.
func (l *level) lastServed() *Ticket {
	return l.heaviest().lastServed()
}

func (l *level) heaviest() *tenantQueue {
	best := l.ring
	for tq := l.ring.next; tq != l.ring; tq = tq.next {
		if tq.n > best.n {
			best = tq
		}
	}
	return best
}

// aheadOfLast estimates the work, in units, this rank would serve before
// t, a ticket of tq — the same sum ahead gives a newcomer of tq's tenant
// with t's cost, lane and due time queued at the back of its lane: every
// other ticket of its lane is served first, FIFO or LIFO — so that a
// ticket just admitted is judged again exactly as it was at its arrival.
func (l *level) aheadOfLast(tq *tenantQueue, t *Ticket) float64 {
	ownCost, ownUnits := tq.before(t.ln.class, t.due, t.ln.cost-t.cost, t.ln.units-t.units)
	span := (ownCost + t.cost) / tq.ts.weight
	units := ownUnits
	for o := l.ring; ; {
		if o != tq {
			units += o.within(span)
		}
		if o = o.next; o == l.ring {
			break
		}
	}
	return min(units, l.units-t.units)
}

// within is the work of tq's tickets that fair queuing serves within span
// of virtual time: its cost up to span at its weight, in units at its own
// mean work per cost.
func (tq *tenantQueue) within(span float64) float64 {
	if tq.cost <= 0 {
		return 0
	}
	return min(tq.cost, span*tq.ts.weight) / tq.cost * tq.units
}

// ahead estimates the work, in units, this rank would serve before a
// newcomer of tenant with the given cost, lane class and due time, which
// goes to the front of its lane's newest-first tickets when front is
// true. Its tenant's tickets ahead of it are those of its lane queued
// before it (none when it goes to the front of a lane in LIFO order; the
// promised tickets' when the lane keeps promises) and those of its other
// lanes due by its due time; in virtual time it starts once
// these have been served at the tenant's weight, and every other tenant
// is served up to the same virtual time, that span times its own weight,
// in cost.
func (l *level) ahead(tenant string, cost, weight float64, front bool, class uint8, due time.Time) float64 {
	if l.depth == 0 {
		return 0
	}
	var ownCost, ownUnits float64
	if tq := l.queues[tenant]; tq != nil {
		ln := tq.laneOf(class, false)
		if ln != nil {
			switch {
			case front: // behind the promised tickets only
				ownCost, ownUnits = ln.cost-ln.ovCost, ln.units-ln.ovUnits
			case !ln.lifo:
				ownCost, ownUnits = ln.cost, ln.units
			}
		}
		if ln == nil || len(tq.lanes) > 1 {
			ownCost, ownUnits = tq.before(class, due, ownCost, ownUnits)
		}
	}
	span := (ownCost + cost) / weight
	units := ownUnits
	for tq := l.ring; ; {
		if tq.tenant != tenant {
			units += tq.within(span)
		}
		tq = tq.next
		if tq == l.ring {
			break
		}
	}
	return min(units, l.units)
}
