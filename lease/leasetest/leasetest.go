// Package leasetest holds the renewals that pin the lease table: a
// cluster's life as a story with the lease each renewal must get, and
// random renewals. Package lease's tests check lease.Table against the
// story; store's run the Redis script and lease.Table on both and require
// the same grants.
package leasetest

import (
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// T0 is when the renewals start.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// At is ms milliseconds after T0.
func At(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }

// Renewal is id's renewal ms after T0 with a TTL of 3s and a Limit of 16.
// Ranks in the demand: 0 speculative, 1 batch, 2 interactive (a higher
// rank is served first, as in package admission).
func Renewal(id string, ms int, demand []int, inFlight, current int) lease.Request {
	return lease.Request{ID: id, Now: At(ms), TTL: 3 * time.Second, Demand: demand, InFlight: inFlight, Current: current, Limit: 16}
}

// Step is one renewal and the lease the table must answer (0: not checked).
type Step struct {
	Request lease.Request
	Want    int
}

// Story is a cluster's life in renewals: A alone, B joins with
// interactive work, A gives slots up only as its calls drain, C joins with
// a lower limit (a 429 it saw), B dies and its slots come back to the
// others after the TTL, and a replica back from its local share asks no
// more than Max.
func Story() []Step {
	limited := Renewal("C", 600, []int{0, 0, 0}, 0, 1)
	limited.Limit = 8
	capped := Renewal("B", 9000, []int{0, 0, 40}, 0, 5)
	capped.Max = 5
	return []Step{
		{Renewal("A", 0, []int{100, 0, 0}, 0, 1), 16},
		// B joins: its floor slot, though A holds all 16 (the bound's +1).
		{Renewal("B", 10, []int{0, 0, 10}, 0, 1), 1},
		// A's target is 6, its lease 6; its calls in flight still hold 16.
		{Renewal("A", 200, []int{100, 0, 0}, 16, 16), 6},
		// B's target is 10, but A's 16 in flight leave none: 1.
		{Renewal("B", 210, []int{0, 0, 10}, 1, 1), 1},
		// A's calls drained to its lease: B gets its 10.
		{Renewal("A", 400, []int{60, 0, 0}, 6, 6), 6},
		{Renewal("B", 410, []int{0, 0, 10}, 1, 1), 10},
		// C joins having seen a 429: the cluster divides 8.
		{limited, 1},
		{Renewal("B", 610, []int{0, 0, 10}, 10, 10), 1},
		{Renewal("A", 620, []int{60, 0, 0}, 6, 6), 1},
		// B stops renewing (dead); after its 3s TTL A and C share.
		{Renewal("A", 3000, []int{60, 0, 0}, 1, 1), 1},
		{Renewal("A", 3700, []int{60, 0, 0}, 1, 1), 0},
		{Renewal("C", 3800, []int{60, 0, 0}, 0, 1), 0},
		{Renewal("A", 4000, []int{60, 0, 0}, 1, 1), 0},
		// C gone too (its row expires at 6800); A alone gets all 16 again.
		{Renewal("A", 7000, []int{60, 0, 0}, 4, 4), 16},
		// B back from a local share of 5: at most 5 however much it wants.
		{capped, 1},
		{Renewal("A", 9100, []int{60, 0, 0}, 16, 16), 1},
	}
}

// Random is n renewals by a handful of replicas at random times,
// demands, limits and caps, the same for the same seed.
func Random(seed uint64, n int) []lease.Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids := []string{"a", "B", "c-1", "c.2", "z", "aa"}
	ms := 0
	var out []lease.Request
	for range n {
		ms += rng.IntN(900)
		q := Renewal(ids[rng.IntN(len(ids))], ms, nil, rng.IntN(20), 1+rng.IntN(16))
		for range rng.IntN(5) {
			q.Demand = append(q.Demand, []int{0, 0, 1, 3, 50}[rng.IntN(5)])
		}
		q.Limit = []int{16, 16, 16, 8, 3, 1}[rng.IntN(6)]
		if rng.IntN(5) == 0 {
			q.Max = 1 + rng.IntN(6)
		}
		q.TTL = time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		if rng.IntN(3) == 0 && len(out) > 0 {
			q.Since = 1 + rng.Int64N(int64(len(out))) // an earlier renewal's Seq
		}
		out = append(out, q)
	}
	return out
}
