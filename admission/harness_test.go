package admission

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// harness drives a Core in virtual time: arrivals are given up front,
// completions are scheduled when a ticket is granted. It is the smallest
// event loop that exercises the real Core, used to check claims about its
// behaviour statistically.
type harness struct {
	t       *testing.T
	c       *Core
	service func(key string) time.Duration
	// serviceOf, when set, is used instead of service: a service time
	// that depends on the whole request (its cost).
	serviceOf func(Request) time.Duration
	pending   completionHeap
	// onGrant is called for every ticket granted, with its arrival time.
	onGrant func(a *arrival, now time.Time)
}

type arrival struct {
	at     time.Time
	req    Request
	ticket Ticket
	// filled in by the run
	decision Decision
	granted  time.Time
	finished time.Time
}

type completion struct {
	at  time.Time
	key string
	a   *arrival
}

type completionHeap []completion

func (h completionHeap) Len() int           { return len(h) }
func (h completionHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h completionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completionHeap) Push(x any)        { *h = append(*h, x.(completion)) }
func (h *completionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *harness) grant(a *arrival, now time.Time) {
	a.granted = now
	var d time.Duration
	if h.serviceOf != nil {
		d = h.serviceOf(a.req)
	} else {
		d = h.service(a.req.Key)
	}
	a.finished = now.Add(d)
	heap.Push(&h.pending, completion{at: a.finished, key: a.req.Key, a: a})
	if h.onGrant != nil {
		h.onGrant(a, now)
	}
}

func (h *harness) drainEvents(now time.Time) {
	for _, tk := range h.c.Events() {
		if tk.Granted() {
			h.grant(tk.Owner.(*arrival), now)
		}
	}
}

func (h *harness) complete(next completion) {
	h.c.Release(next.at, next.a.req, Outcome{ServiceTime: next.at.Sub(next.a.granted)})
	h.drainEvents(next.at)
}

// run plays the arrivals (sorted by time) and every completion they cause.
func (h *harness) run(arrivals []*arrival) {
	for _, a := range arrivals {
		for h.pending.Len() > 0 && !h.pending[0].at.After(a.at) {
			h.complete(heap.Pop(&h.pending).(completion))
		}
		a.ticket.Owner = a
		d, err := h.c.Arrive(a.at, a.req, &a.ticket, true)
		if err != nil {
			h.t.Fatal(err)
		}
		a.decision = d
		h.drainEvents(a.at) // evictions
		if d.Verdict == Granted {
			h.grant(a, a.at)
		}
	}
	for h.pending.Len() > 0 {
		h.complete(heap.Pop(&h.pending).(completion))
	}
}

// poisson returns arrivals at rate per second for dur, from rng.
func poisson(rng *rand.Rand, start time.Time, rate float64, dur time.Duration, req Request) []*arrival {
	var out []*arrival
	for t := start; ; {
		t = t.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if t.Sub(start) >= dur {
			return out
		}
		r := req
		out = append(out, &arrival{at: t, req: r})
	}
}

func merge(lists ...[]*arrival) []*arrival {
	var all []*arrival
	for _, l := range lists {
		all = append(all, l...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	return all
}

func lognormal(rng *rand.Rand, median time.Duration, sigma float64) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
}

// success reports whether a finished within its deadline.
func (a *arrival) success() bool {
	return !a.granted.IsZero() && (a.req.Deadline.IsZero() || !a.finished.After(a.req.Deadline))
}
