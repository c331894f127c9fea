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
// see tenantQueue). Between lanes, the earliest deadline goes first: the
// lane whose next call is due soonest (Ticket.due); a call without a
// deadline is due at its arrival, so that calls with deadlines overtake
// only the calls without one that came after them, and none waits for
// good. A queue whose callers all came with one budget, as every storm's,
// is one lane, and is served exactly as it was before lanes.
//
// By the deadline, not by the latest time a call can start (its deadline
// less its p95): the two agree while every call can be served; in a
// burst beyond the slots they part. Ordered by latest start, a 10 s chat
// whose long p95 leaves it two seconds to start goes before a 3 s
// completion with three, and under a sustained overload the two kinds
// queue as one, each refused as often. Ordered by deadline, the
// completion goes first; the chat it overtakes past its latest start is
// refused at once (Core.refuseLate), its slot time serving several short
// calls — the order the offline bound (workload.Bound) takes. On the
// production shape in the simulator, told the slots, the on-time answers
// rose from 69% to 86% of the bound's at three times the recorded rate
// (docs/traffic.md).
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

// before sums the cost and the work of the lane's tickets due by due —
// the ones earliest-deadline-first serves before a ticket of another
// lane due then: all of the lane when its last-served ticket is due by
// then, none when its next is due later, else those its walk from the
// head finds.
func (ln *lane) before(due time.Time) (cost, units float64) {
	if !dueAfter(ln.lastServed(), due) {
		return ln.cost, ln.units
	}
	if dueAfter(ln.peek(), due) {
		return 0, 0
	}
	for t := ln.head; t != nil; t = t.next {
		if !dueAfter(t, due) {
			cost += t.cost
			units += t.units
		}
	}
	return cost, units
}

// dueAfter says whether t is due after at.
func dueAfter(t *Ticket, at time.Time) bool { return t.due.After(at) }

// earlier says whether a is due before b (ties: neither).
func earlier(a, b *Ticket) bool { return a.due.Before(b.due) }
