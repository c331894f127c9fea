package admission

import (
	"slices"
	"time"
)

// running is the grant times of the calls in flight, oldest first: the
// evidence of a slowdown before any slowed call completes. The service-time
// window learns only from completions, and a dependency that slowed
// fourfold completes nothing for a while — the calls it holds were granted
// after the slowdown and are still running — so for most of a second the
// window still reads the old level and the gate goes on starting calls,
// promised starts and deadlines it would refuse if it knew: the calls it
// holds say so meanwhile, by running longer than the p95. On a steady
// dependency a call in flight has run past the p95 with a chance of a few
// percent (2.6% for a lognormal of σ 0.5, 5% for an exponential), so
// several of them at once are a slowdown: the age of the j-th oldest,
// j = 3 + n/10 of n in flight, is a floor under the p95 (see
// Core.service) — on a steady dependency it passes the p95 at under 1% of
// moments, and then by little; after a fourfold slowdown it grows with
// the time since, until the window's change point is found.
//
// Times are kept as offsets from the first grant, sorted; a grant is
// appended (grants come in time order), a release removes the entry
// nearest its start — when two calls started close together, which of
// them is removed does not matter. Removal copies the entries after it,
// a few hundred bytes at the concurrencies a gate runs at.
type running struct {
	epoch time.Time
	at    []time.Duration
}

func (r *running) add(now time.Time) {
	if len(r.at) == 0 {
		r.epoch, r.at = now, r.at[:0]
	}
	d := now.Sub(r.epoch)
	i := len(r.at)
	for i > 0 && r.at[i-1] > d {
		i-- // a clock read out of order is put in its place
	}
	r.at = slices.Insert(r.at, i, d)
}

// remove forgets the call in flight that started nearest to start.
func (r *running) remove(start time.Time) {
	if len(r.at) == 0 {
		return
	}
	d := start.Sub(r.epoch)
	i, _ := slices.BinarySearch(r.at, d)
	if i == len(r.at) || i > 0 && d-r.at[i-1] < r.at[i]-d {
		i--
	}
	r.at = slices.Delete(r.at, i, i+1)
}

// overdue returns how long the j-th oldest call in flight has run (j =
// 3 + n/10 of n), or 0 with fewer in flight.
func (r *running) overdue(now time.Time) time.Duration {
	j := 3 + len(r.at)/10
	if len(r.at) < j {
		return 0
	}
	return now.Sub(r.epoch) - r.at[j-1]
}
