package admission

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// tenantState is one tenant's hold on the gate: its configuration and its
// demand, in requests and in cost, in flight and queued over all ranks.
type tenantState struct {
	name        string
	weight      float64
	maxInFlight int
	maxQueue    int

	inFlight     int
	inFlightCost float64
	queued       int
	queuedCost   float64
	active       int // index in Core.active, -1 when the tenant has no demand

	// grants are the rates at which its work was granted slots lately, by
	// the rank it was served at (see Core.drain).
	grants grantRates
	// refusing tells, by rank and lane class, whether its lane stands
	// (see Core.allowance); an entry is made on the lane's first refusal
	// for the wait.
	refusing []laneRefusing
}

// laneRefusing is the refusals of one lane of the tenant's queue.
type laneRefusing struct {
	rank  int
	class uint8
	r     refusing
}

// refusingAt is the refusals of the tenant's lane of class at rank. The
// pointer is good until the next call.
func (ts *tenantState) refusingAt(rank int, class uint8) *refusing {
	for i := range ts.refusing {
		if e := &ts.refusing[i]; e.rank == rank && e.class == class {
			return &e.r
		}
	}
	ts.refusing = append(ts.refusing, laneRefusing{rank: rank, class: class})
	return &ts.refusing[len(ts.refusing)-1].r
}

// standing says whether the tenant's lane of class at rank stands (see
// refusing).
func (ts *tenantState) standing(now time.Time, rank int, class uint8) bool {
	if ts == nil {
		return false
	}
	for i := range ts.refusing {
		if e := &ts.refusing[i]; e.rank == rank && e.class == class {
			return e.r.standing(now)
		}
	}
	return false
}

func (ts *tenantState) demand() float64 { return ts.inFlightCost + ts.queuedCost }

// capped reports whether the tenant holds all the slots it may.
func (ts *tenantState) capped() bool { return ts.maxInFlight > 0 && ts.inFlight >= ts.maxInFlight }

// maxIdleTenants is how many tenants without demand keep their state: a
// steady tenant's every request would otherwise allocate it anew, and
// without a bound a stream of one-off tenant names would grow the map.
const maxIdleTenants = 1024

// tenant returns the state of a tenant, making it on first use.
func (c *Core) tenant(name string) *tenantState {
	// One remembered tenant saves the map lookup on the fast path when
	// consecutive requests are one tenant's, as with none configured.
	if ts := c.lastTenant; ts != nil && ts.name == name {
		return ts
	}
	ts := c.tenants[name]
	if ts == nil {
		ts = c.newTenant(name)
		c.tenants[name] = ts
	}
	c.lastTenant = ts
	return ts
}

// newTenant makes the state of a tenant from its configuration.
func (c *Core) newTenant(name string) *tenantState {
	ts := &tenantState{name: name, weight: 1, maxQueue: c.cfg.MaxQueuePerTenant, active: -1}
	if tc, ok := c.cfg.Tenants[name]; ok {
		ts.weight, ts.maxInFlight = tc.Weight, tc.MaxInFlight
		if tc.MaxQueue > 0 {
			ts.maxQueue = tc.MaxQueue
		}
	}
	return ts
}

// changed records that ts's demand moved: it joins or leaves the tenants
// with demand, and the fair shares must be worked out again before use.
func (c *Core) changed(ts *tenantState) {
	c.sharesStale = true
	busy := ts.inFlight > 0 || ts.queued > 0
	switch {
	case busy && ts.active < 0:
		ts.active = len(c.active)
		c.active = append(c.active, ts)
	case !busy && ts.active >= 0:
		last := c.active[len(c.active)-1]
		c.active[ts.active] = last
		last.active = ts.active
		c.active[len(c.active)-1] = nil
		c.active = c.active[:len(c.active)-1]
		ts.active = -1
		ts.inFlightCost, ts.queuedCost = 0, 0 // no float drift carried over
		if len(c.tenants) > maxIdleTenants {
			delete(c.tenants, ts.name)
			if c.lastTenant == ts {
				c.lastTenant = nil
			}
		}
	}
}

// contended reports whether more than one tenant has demand while work
// waits: only then is anyone over its fair share.
func (c *Core) contended() bool { return len(c.active) > 1 && c.queued > 0 }

// overShare reports whether starting work of cost for ts would take it past
// its max-min fair share of the slots while other tenants wait. A tenant
// with nothing in flight is never over: every tenant with demand may hold
// one slot, whatever its share, so that no tenant starves when there are
// more tenants than slots.
func (c *Core) overShare(ts *tenantState, cost float64) bool {
	if ts.inFlight == 0 || !c.contended() {
		return false
	}
	if c.sharesStale {
		c.waterLevel = c.level()
		c.sharesStale = false
	}
	return ts.inFlightCost+cost > c.waterLevel*ts.weight*(1+1e-9)
}

// level works out the max-min fair share by water filling: capacity is
// handed out in proportion to weight, a tenant whose demand is below its
// portion keeps only its demand and the rest is shared among the others.
// It returns the water level L: a tenant's fair share is min(demand,
// L × weight).
//
// Demand and capacity are in cost. The slots are a count, so the capacity
// in cost is the slots times the mean cost of the work with demand: with
// every cost 1 (the default) it is exactly the number of slots.
func (c *Core) level() float64 {
	var cost float64
	var n int
	for _, ts := range c.active {
		cost += ts.demand()
		n += ts.inFlight + ts.queued
	}
	if n == 0 {
		return 0
	}
	capacity := float64(c.concurrency) * cost / float64(n)
	c.scratch = append(c.scratch[:0], c.active...)
	slices.SortFunc(c.scratch, func(a, b *tenantState) int {
		return cmp.Compare(a.demand()/a.weight, b.demand()/b.weight)
	})
	var weight float64
	for _, ts := range c.scratch {
		weight += ts.weight
	}
	for i, ts := range c.scratch {
		l := capacity / weight
		if d := ts.demand(); d/ts.weight > l {
			clear(c.scratch[i:])
			return l
		} else {
			capacity -= d
			weight -= ts.weight
		}
	}
	clear(c.scratch)
	// Every demand fits: nobody is over.
	return math.Inf(1)
}
