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
	enqueued time.Time
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
	head, tail *Ticket
	n          int
	// ring links of the rank's active tenants, in serving order.
	prev, next *tenantQueue
	// The overload detector of this queue (see Core.observe): LIFO is
	// decided per tenant queue, so that one tenant's flood does not turn
	// the order of a tenant within its share upside down.
	lifo    bool
	aboveAt time.Time
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
	if o.off {
		return
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

// level is the waiting room of one rank: a round-robin ring of tenants, each
// with its own FIFO. Serving rotates the ring, so the tenant served least
// recently goes first and a tenant's flood only lengthens its own queue.
type level struct {
	depth  int
	ring   *tenantQueue // the tenant to serve next; nil when empty
	queues map[string]*tenantQueue
}

func (l *level) push(t *Ticket) {
	tq := l.queues[t.req.Tenant]
	if tq == nil {
		tq = &tenantQueue{tenant: t.req.Tenant}
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
	t.prev, t.next = tq.tail, nil
	if tq.tail != nil {
		tq.tail.next = t
	} else {
		tq.head = t
	}
	tq.tail = t
	tq.n++
	l.depth++
}

// remove unlinks t from its tenant's queue, dropping the tenant from the ring
// when its queue empties.
func (l *level) remove(t *Ticket) {
	tq := t.tq
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
	l.depth--
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
	}
}

// pop takes the next ticket of the rank: from the tenant at the front of the
// ring, its oldest (FIFO) or newest (LIFO, when that queue is overloaded);
// the tenant then moves to the back.
func (l *level) pop(now time.Time, o *overload) *Ticket {
	tq := l.ring
	o.observe(now, tq)
	t := tq.head
	if tq.lifo {
		t = tq.tail
	}
	if tq.n > 1 {
		l.ring = tq.next // rotate: this tenant was just served
	}
	l.remove(t)
	return t
}

// lastServed returns the ticket this rank would serve last: from its heaviest
// tenant, the newest under FIFO or the oldest under LIFO. It is the victim of
// an eviction.
func (l *level) lastServed() *Ticket {
	return l.heaviest().lastServed()
}

func (tq *tenantQueue) lastServed() *Ticket {
	if tq.lifo {
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

// ahead counts the tickets of this rank that round-robin service would serve
// before a newcomer of tenant: every tenant contributes up to the newcomer's
// position in its own queue (one when that queue is in LIFO order and the
// newcomer goes to its front).
func (l *level) ahead(tenant string) int {
	if l.depth == 0 {
		return 0
	}
	pos := 1
	if own := l.queues[tenant]; own != nil && !own.lifo {
		pos = own.n + 1
	}
	if l.depth < pos {
		// Every queued ticket of the rank is ahead or level with it.
		return l.depth
	}
	n := pos - 1
	tq := l.ring
	for {
		if tq.tenant != tenant {
			n += min(tq.n, pos)
		}
		tq = tq.next
		if tq == l.ring {
			break
		}
	}
	return n
}
