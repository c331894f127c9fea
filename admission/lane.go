package admission

import (
	"math/bits"
	"time"
)

// Lanes: deadlines within a tenant's queue of one rank.
//
// Callers of one rank do not all wait alike: a code completion's caller
// gives up after 3 s, a chat's after 10 s. Served in the order they came,
// the short-deadline calls wait behind long-deadline ones that could have
// waited, and are refused for a wait the others did not need; served
// earliest deadline first, both are served in time whenever both can be.
//
// So a tenant's queue of a rank is a few lanes, one per class of budget
// — the time its caller had left on arrival, by powers of two (laneOf):
// calls of one lane came with budgets within a factor of two, so the
// order they came in is close to the order of their deadlines, and each
// lane keeps the order its queue always had (the promised calls first,
// oldest first, then newest-first the calls queued while the lane stood;
// see tenantQueue). Between lanes, the call that must start soonest goes
// first: the lane whose next call has the earliest start-by — its
// deadline less its expected (p95) service time, Ticket.startBy; a call
// without a deadline goes by its arrival, as if it had to start then, so
// that calls with deadlines overtake only the calls without one that came
// after them, and none waits for good. A queue
// whose callers all came with one budget, as every storm's, is one lane,
// and is served exactly as it was before lanes.
//
// A lane is also what stands (see "Refusing early" in core.go): a lane
// that has been refusing newcomers for their wait stands for callers with
// its budgets, not for the rest of the queue. A burst that the
// short-deadline callers cannot wait out does not cut the allowance of
// the long-deadline callers it can serve in time.

// laneOf is the lane class of a call that arrives with budget left: the
// bit length of the budget in milliseconds, so that budgets within a
// factor of two share a lane; noDeadline for a call without one, served
// after the calls with one.
func laneOf(budget time.Duration, hasDeadline bool) uint8 {
	if !hasDeadline {
		return noDeadline
	}
	return uint8(bits.Len64(uint64(max(budget, 0) / time.Millisecond)))
}

// noDeadline is the lane class of calls without a deadline; lane classes
// of budgets run from 0 to 64.
const noDeadline uint8 = 255

// lane is the tickets of one lane class of a tenant's queue of one rank,
// in the order they came.
type lane struct {
	class      uint8
	head, tail *Ticket
	n          int
	cost       float64 // of the queued tickets
	units      float64 // their expected work (Ticket.units)
	// The overload detector of this lane (see Core.observe), used while
	// its oldest ticket has no deadline, and so no promise.
	lifo    bool
	aboveAt time.Time
	// The tickets queued while the lane stood (overload): from
	// firstOverload, the oldest of them, to tail — they are always the
	// newest, since a ticket queued after one of them is one too. ovN,
	// ovCost and ovUnits count them. The tickets before them were
	// promised their place, and are served first, oldest first; the
	// overload tickets newest-first, each refused once it has waited its
	// allowance (see Core.refuseLate).
	firstOverload *Ticket
	ovN           int
	ovCost        float64
	ovUnits       float64
}

// peek is the ticket the lane would serve next.
func (ln *lane) peek() *Ticket {
	switch {
	case ln.ovN > 0:
		if ln.head.overload { // every promise kept: newest first
			return ln.tail
		}
		return ln.head
	case ln.lifo:
		return ln.tail
	}
	return ln.head
}

// lastServed is the ticket the lane would serve last.
func (ln *lane) lastServed() *Ticket {
	switch {
	case ln.ovN > 0:
		return ln.firstOverload
	case ln.lifo:
		return ln.head
	}
	return ln.tail
}

// newestFirst says whether the lane serves some of its tickets
// newest-first.
func (ln *lane) newestFirst() bool { return ln.lifo || ln.ovN > 0 }

// push appends t, queued while the lane stood when t.overload.
func (ln *lane) push(t *Ticket, promises bool) {
	if promises && (t.overload || ln.firstOverload != nil) {
		t.overload = true
		if ln.firstOverload == nil {
			ln.firstOverload = t
		}
		ln.ovN++
		ln.ovCost += t.cost
		ln.ovUnits += t.units
	}
	t.prev, t.next = ln.tail, nil
	if ln.tail != nil {
		ln.tail.next = t
	} else {
		ln.head = t
	}
	ln.tail = t
	ln.n++
	ln.cost += t.cost
	ln.units += t.units
}

// remove unlinks t.
func (ln *lane) remove(t *Ticket, promises bool) {
	if t.overload && promises {
		if ln.firstOverload == t {
			ln.firstOverload = t.next // newer, and overload too, or nil
		}
		ln.ovN--
		ln.ovCost -= t.cost
		ln.ovUnits -= t.units
		if ln.ovN == 0 {
			ln.ovCost, ln.ovUnits = 0, 0 // no float drift carried over
		}
	}
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		ln.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		ln.tail = t.prev
	}
	t.prev, t.next = nil, nil
	ln.n--
	ln.cost -= t.cost
	ln.units -= t.units
	if ln.n == 0 {
		ln.cost, ln.units = 0, 0
	}
}

// before sums the cost and the work of the lane's tickets that start by
// startBy or earlier — the ones earliest-deadline-first serves before a
// ticket of another lane that must start by startBy: all of the lane
// when its last-served ticket must start by then, none when its next
// must start later, else those its walk from the head finds.
func (ln *lane) before(startBy time.Time) (cost, units float64) {
	if !startsAfter(ln.lastServed(), startBy) {
		return ln.cost, ln.units
	}
	if startsAfter(ln.peek(), startBy) {
		return 0, 0
	}
	for t := ln.head; t != nil; t = t.next {
		if !startsAfter(t, startBy) {
			cost += t.cost
			units += t.units
		}
	}
	return cost, units
}

// startsAfter says whether t need not start before at.
func startsAfter(t *Ticket, at time.Time) bool { return t.startBy.After(at) }

// earlier says whether a must start before b (ties: neither).
func earlier(a, b *Ticket) bool { return a.startBy.Before(b.startBy) }
