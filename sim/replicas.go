package sim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// replicaServer is a sluice policy run as several gateway replicas in front
// of one upstream: one chain each (a gateServer), their concurrency set by
// the lease table the gateway uses with Redis, in virtual time. Each
// replica renews its lease every lease interval, at its own phase (the
// renewals spread evenly over the interval), publishing its demand — its
// calls in flight and queued by rank — exactly as the gateway's loop does;
// the table divides the upstream's concurrency and the replica's gate gets
// its lease. What the simulator adds is the upstream's view: the calls in
// flight at all replicas together, against its concurrency.
type replicaServer struct {
	e        *engine
	reps     []*gateServer
	table    lease.Table
	interval time.Duration
	next     []time.Duration // each replica's next renewal
	rr       int             // round-robin position

	// The upstream's calls in flight over all replicas: the peak, the
	// time over the concurrency, and the integral for the mean.
	inFlight, peak int
	last           time.Duration
	over, area     time.Duration // area in call·ns
}

func newReplicaServer(e *engine) (*replicaServer, error) {
	r := e.s.sc.Replicas
	rs := &replicaServer{e: e, interval: r.LeaseInterval}
	if rs.interval == 0 {
		rs.interval = 200 * time.Millisecond
	}
	for i := range r.Count {
		g, err := newGateServer(e)
		if err != nil {
			return nil, err
		}
		// Joining: one slot until the first lease, as in the gateway.
		if err := g.core.Gate().SetConcurrency(e.s.at(0), 1); err != nil {
			return nil, err
		}
		rs.reps = append(rs.reps, g)
		at := time.Duration(i) * rs.interval / time.Duration(r.Count)
		rs.next = append(rs.next, at)
		e.wake(at)
	}
	return rs, nil
}

func (rs *replicaServer) arrive(now time.Duration, a *attempt) {
	if p := a.c.src.replica; p >= 0 {
		a.replica = int32(p)
	} else {
		a.replica = int32(rs.rr)
		rs.rr = (rs.rr + 1) % len(rs.reps)
	}
	rs.reps[a.replica].arrive(now, a)
	rs.count(now)
}

func (rs *replicaServer) leave(now time.Duration, a *attempt) {
	rs.reps[a.replica].leave(now, a)
	rs.count(now)
}

func (rs *replicaServer) done(now time.Duration, a *attempt) {
	rs.reps[a.replica].done(now, a)
	rs.count(now)
}

func (rs *replicaServer) abandoned(now time.Duration, a *attempt) {
	rs.reps[a.replica].abandoned(now, a)
}

func (rs *replicaServer) depth() int {
	n := 0
	for _, g := range rs.reps {
		n += g.depth()
	}
	return n
}

// estimatedWait is replica 0's: the first source's callers would be told
// that by the replica they reach first.
func (rs *replicaServer) estimatedWait(now time.Duration) (time.Duration, bool) {
	return rs.reps[0].estimatedWait(now)
}

// sweep renews the leases that are due.
func (rs *replicaServer) sweep(now time.Duration) {
	for i, g := range rs.reps {
		if rs.next[i] > now {
			continue
		}
		rs.renew(now, g, i)
		rs.next[i] = now + rs.interval
		rs.e.wake(rs.next[i])
	}
	rs.count(now)
}

// renew is the gateway's lease loop, one renewal.
func (rs *replicaServer) renew(now time.Duration, g *gateServer, i int) {
	t := rs.e.s.at(now)
	core := g.core.Gate()
	st := core.Stats(t)
	demand := make([]int, len(st.Depth))
	for r := range demand {
		demand[r] = min(st.Depth[r]+st.InFlightByRank[r], lease.MaxDemand)
	}
	grant, err := rs.table.Renew(lease.Request{ID: fmt.Sprintf("replica-%02d", i), Now: t, TTL: 15 * rs.interval,
		Demand: demand, InFlight: st.InFlight, Current: st.Concurrency, Limit: rs.e.s.sc.Upstream.Concurrency})
	if err != nil {
		rs.e.fail(fmt.Errorf("policy %s: lease: %w", rs.e.s.policy.Name, err))
		return
	}
	if err := core.SetConcurrency(t, grant.Lease); err != nil {
		rs.e.fail(fmt.Errorf("policy %s: %w", rs.e.s.policy.Name, err))
		return
	}
	g.drain() // a larger lease grants queued calls
}

// count brings the upstream's calls in flight up to date at now.
func (rs *replicaServer) count(now time.Duration) {
	d := now - rs.last
	rs.area += d * time.Duration(rs.inFlight)
	if rs.inFlight > rs.e.s.sc.Upstream.Concurrency {
		rs.over += d
	}
	rs.last = now
	n := 0
	for _, g := range rs.reps {
		n += g.core.Gate().InFlight()
	}
	rs.inFlight = n
	rs.peak = max(rs.peak, n)
}

func (rs *replicaServer) end(now time.Duration) error {
	for _, g := range rs.reps {
		if err := g.end(now); err != nil {
			return err
		}
	}
	return nil
}

// ProviderResult is the upstream's view of a run with several replicas.
type ProviderResult struct {
	// Replicas is how many gateways shared the upstream, Concurrency its
	// slots.
	Replicas    int `json:"replicas"`
	Concurrency int `json:"concurrency"`
	// PeakInFlight is the most calls it had at once, MeanInFlight the
	// average over the run.
	PeakInFlight int     `json:"peak_in_flight"`
	MeanInFlight float64 `json:"mean_in_flight"`
	// OverPct is the share of the run it had more calls than slots.
	OverPct float64 `json:"over_pct"`
}

func (rs *replicaServer) result(now time.Duration) *ProviderResult {
	rs.count(now)
	r := &ProviderResult{Replicas: len(rs.reps), Concurrency: rs.e.s.sc.Upstream.Concurrency, PeakInFlight: rs.peak}
	if now > 0 {
		r.MeanInFlight = float64(rs.area) / float64(now)
		r.OverPct = 100 * float64(rs.over) / float64(now)
	}
	return r
}

// pace is never asked for: replicas run no pools (the policy pools is not
// run with replicas).
func (rs *replicaServer) pace(time.Duration) {}
