package admission

import "time"

// Ticket is one request's place in a [Core]'s queue. The owner of the Core
// allocates it (or reuses one: a Ticket the Core has decided can be passed to
// Arrive again) and reads its outcome once the Core reports it in Events.
type Ticket struct {
	// Owner is free for the Core's owner, for example to find the waiter to
	// wake. The Core never reads it.
	Owner any

	req      Request
	rank     int
	cost     float64 // req.Cost, 1 when unset
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
	prev    *Ticket // within its tenant's queue of its rank
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

// QueueTime is how long the ticket waited before it was decided.
func (t *Ticket) QueueTime() time.Duration { return t.decided.Sub(t.enqueued) }

// Rejection returns the refusal of a rejected ticket, nil otherwise.
func (t *Ticket) Rejection() *Rejection {
	if t.state != ticketRejected {
		return nil
	}
	return &Rejection{Reason: t.reason, EstimatedWait: t.wait, RetryAfter: t.retry, Rank: t.rank}
}

// tenantQueue is one tenant's queued tickets of one rank, oldest first.
type tenantQueue struct {
	tenant     string
	ts         *tenantState
	head, tail *Ticket
	n          int
	cost       float64 // of the queued tickets
	// finish is the tenant's virtual finish time in this rank: the start
	// tag of its next ticket is max(level.vtime, finish).
	finish float64
	// ring links of the rank's active tenants, in serving order.
	prev, next *tenantQueue
	// The overload detector of this queue (see Core.observe): LIFO is
	// decided per tenant queue, so that one tenant's flood does not turn
	// the order of a tenant within its share upside down.
	lifo    bool
	aboveAt time.Time
	// promises: the gate refuses early (Config.NoEarlyRefusal false), and
	// keeps the place it promised a ticket at its arrival. Newest-first is
	// then for the tickets queued while the queue stood (overload): from
	// firstOverload, the oldest of them, to tail — they are always the
	// newest, since a ticket queued after one of them is one too — ovN and
	// ovCost count them. The tickets before them were promised their
	// place, and are served first, oldest first; the overload tickets
	// newest-first, each refused once it has waited its allowance (see
	// Core.refuseLate). lifo and aboveAt are then used only while the
	// oldest ticket has no deadline, and so no promise.
	promises      bool
	firstOverload *Ticket
	ovN           int
	ovCost        float64
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

// observe updates tq's mode before it is served. The age of the oldest item,
// not the wait of the item served, is the signal: under LIFO the item served
// is the newest, whose short wait would switch LIFO off while the backlog
// behind it is still old.
func (o *overload) observe(now time.Time, tq *tenantQueue) {
	if o.off || (tq.promises && !tq.head.req.Deadline.IsZero()) {
		tq.lifo = false
		return // with promises, newest-first is for overload tickets (see tenantQueue)
	}
	head := tq.head
	target := o.target
	if !head.req.Deadline.IsZero() {
		target = head.req.Deadline.Sub(head.enqueued) / 2
	}
	if now.Sub(head.enqueued) < target {
		tq.lifo, tq.aboveAt = false, time.Time{}
		return
	}
	if tq.aboveAt.IsZero() {
		tq.aboveAt = now.Add(o.interval)
		return
	}
	if !now.Before(tq.aboveAt) {
		tq.lifo = true
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

func (l *level) push(t *Ticket, ts *tenantState, promises bool) {
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
	t.tq = tq
	if tq.promises && (t.overload || tq.firstOverload != nil) {
		t.overload = true
		if tq.firstOverload == nil {
			tq.firstOverload = t
		}
		tq.ovN++
		tq.ovCost += t.cost
	}
	t.prev, t.next = tq.tail, nil
	if tq.tail != nil {
		tq.tail.next = t
	} else {
		tq.head = t
	}
	tq.tail = t
	tq.n++
	tq.cost += t.cost
	l.depth++
	l.cost += t.cost
}

// remove unlinks t from its tenant's queue, dropping the tenant from the
// ring when its queue empties.
func (l *level) remove(t *Ticket) {
	tq := t.tq
	if t.overload && tq.promises {
		if tq.firstOverload == t {
			tq.firstOverload = t.next // newer, and overload too, or nil
		}
		tq.ovN--
		tq.ovCost -= t.cost
		if tq.ovN == 0 {
			tq.ovCost = 0 // no float drift carried over
		}
	}
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		tq.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		tq.tail = t.prev
	}
	t.prev, t.next, t.tq = nil, nil, nil
	tq.n--
	tq.cost -= t.cost
	l.depth--
	l.cost -= t.cost
	if l.depth == 0 {
		l.cost = 0 // no float drift carried over
	}
	if tq.n == 0 {
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

// take serves tq: its oldest ticket (FIFO) or newest (LIFO, when that
// queue is overloaded). The virtual time moves to the ticket's start tag,
// the tenant's finish time past it by cost over weight, and the search for
// the next tenant starts after this one.
func (l *level) take(now time.Time, tq *tenantQueue, o *overload) *Ticket {
	o.observe(now, tq)
	t := tq.peek()
	s := l.start(tq)
	l.vtime = s
	tq.finish = s + t.cost/tq.ts.weight
	l.ring = tq.next
	l.remove(t)
	return t
}

// peek is the ticket tq would serve next.
func (tq *tenantQueue) peek() *Ticket {
	switch {
	case tq.ovN > 0:
		if tq.head.overload { // every promise kept: newest first
			return tq.tail
		}
		return tq.head
	case tq.lifo:
		return tq.tail
	}
	return tq.head
}

// newestFirst says whether tq serves some of its tickets newest-first.
func (tq *tenantQueue) newestFirst() bool { return tq.lifo || tq.ovN > 0 }

// lastServed returns the ticket this rank would serve last: from its heaviest
// tenant, the newest under FIFO or the oldest under LIFO. It is the victim of
// an eviction.
func (l *level) lastServed() *Ticket {
	return l.heaviest().lastServed()
}

func (tq *tenantQueue) lastServed() *Ticket {
	switch {
	case tq.ovN > 0:
		return tq.firstOverload
	case tq.lifo:
		return tq.head
	}
	return tq.tail
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

// aheadOfLast estimates how many tickets of this rank fair queuing would
// serve before tq's last-served ticket: the same count as ahead gives a
// newcomer of tq's tenant with that ticket's cost queued at the back of a
// FIFO queue — every other ticket of its tenant is served first, FIFO or
// LIFO — so that a ticket just admitted is judged again exactly as it was
// at its arrival.
func (l *level) aheadOfLast(tq *tenantQueue) int {
	own := tq.cost - tq.lastServed().cost
	span := tq.cost / tq.ts.weight
	aheadCost := own
	for o := l.ring; ; {
		if o != tq {
			aheadCost += min(o.cost, span*o.ts.weight)
		}
		if o = o.next; o == l.ring {
			break
		}
	}
	mean := l.cost / float64(l.depth)
	if mean <= 0 {
		return 0
	}
	return min(int(aheadCost/mean+0.5), l.depth-1)
}

// ahead estimates how many tickets of this rank fair queuing would serve
// before a newcomer of tenant with the given cost, which goes to the front
// of its tenant's newest-first tickets when front is true. In virtual time
// the newcomer starts once its tenant's queued cost ahead of it (none when
// it goes to the front of a queue in LIFO order; the promised tickets'
// when that queue keeps promises) has been served at the tenant's weight; every other tenant is served up to the same virtual
// time, that span times its own weight, in cost. The cost ahead is turned
// into tickets at the rank's mean queued cost, since the wait estimate
// counts completions.
func (l *level) ahead(tenant string, cost, weight float64, front bool) int {
	if l.depth == 0 {
		return 0
	}
	var own float64
	if tq := l.queues[tenant]; tq != nil {
		switch {
		case front: // behind the promised tickets only
			own = tq.cost - tq.ovCost
		case !tq.lifo:
			own = tq.cost
		}
	}
	span := (own + cost) / weight
	aheadCost := own
	for tq := l.ring; ; {
		if tq.tenant != tenant {
			aheadCost += min(tq.cost, span*tq.ts.weight)
		}
		tq = tq.next
		if tq == l.ring {
			break
		}
	}
	mean := l.cost / float64(l.depth)
	if mean <= 0 {
		return 0
	}
	return min(int(aheadCost/mean+0.5), l.depth)
}
