package workload

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// Job is a call as an offline schedule sees it: when it arrived, when its
// caller stops waiting, how long it takes, and the margin it must be
// started with — its service's p95, say: a schedule may know what a
// gateway can learn (each service's statistics), not each call's luck.
type Job struct {
	At, Deadline time.Duration
	Service      time.Duration
	Margin       time.Duration
	// Group counts the job's answers with its group's (a service, say):
	// BoundResult.OnTimeBy[Group].
	Group int
}

// BoundResult is what an offline schedule of jobs served.
type BoundResult struct {
	// OnTime counts the answers that ended by their deadline, OnTimeBy
	// the same by group; Started the jobs started (each of which a
	// provider bills).
	OnTime   int
	OnTimeBy []int
	Started  int
}

// Bound schedules jobs on slots offline, as a gateway that knew every
// call in advance could, and counts the answers on time: whenever a slot
// is free it takes the waiting job of the earliest deadline, and starts
// it if its margin still fits before its deadline, else drops it (never
// started, never billed). It is the bar the production-shaped scenarios
// measure a gateway against: no admission decision a gateway makes can
// know more than each service's statistics, and no order serves more
// deadlines than earliest-first when they can all be met. Jobs need not
// be sorted. Slots must be at least 1.
func Bound(jobs []Job, slots int) BoundResult {
	order := slices.Clone(jobs)
	slices.SortStableFunc(order, func(a, b Job) int { return cmp.Compare(a.At, b.At) })
	groups := 0
	for _, j := range order {
		groups = max(groups, j.Group+1)
	}
	res := BoundResult{OnTimeBy: make([]int, groups)}
	var (
		waiting byDeadline
		busy    ends
		now     time.Duration
	)
	start := func() {
		for busy.Len() < slots && waiting.Len() > 0 {
			j := heap.Pop(&waiting).(Job)
			if now+j.Margin > j.Deadline {
				continue // it cannot start in time: dropped, never billed
			}
			res.Started++
			end := now + j.Service
			heap.Push(&busy, end)
			if end <= j.Deadline {
				res.OnTime++
				res.OnTimeBy[j.Group]++
			}
		}
	}
	for i := 0; i < len(order) || waiting.Len() > 0; {
		// The next event: an arrival, or a slot freeing while work waits.
		next, arrival := time.Duration(-1), false
		if i < len(order) {
			next, arrival = order[i].At, true
		}
		if busy.Len() > 0 && waiting.Len() > 0 && (next < 0 || busy[0] < next) {
			next, arrival = busy[0], false
		}
		if next < 0 {
			break // nothing arrives and nothing frees: the rest waits in vain
		}
		now = next
		for busy.Len() > 0 && busy[0] <= now {
			heap.Pop(&busy)
		}
		if arrival {
			for i < len(order) && order[i].At == now {
				heap.Push(&waiting, order[i])
				i++
			}
		}
		start()
	}
	return res
}

type byDeadline []Job

func (h byDeadline) Len() int { return len(h) }
func (h byDeadline) Less(i, j int) bool {
	return h[i].Deadline < h[j].Deadline || h[i].Deadline == h[j].Deadline && h[i].At < h[j].At
}
func (h byDeadline) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *byDeadline) Push(x any)   { *h = append(*h, x.(Job)) }
func (h *byDeadline) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type ends []time.Duration

func (h ends) Len() int           { return len(h) }
func (h ends) Less(i, j int) bool { return h[i] < h[j] }
func (h ends) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ends) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *ends) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
