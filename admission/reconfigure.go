package admission

import (
	"fmt"
	"maps"
	"time"
)

// Reconfigure changes the policy of a running Core to cfg's: the number of
// slots, the bound on the waiting room and each tenant's share of it, and
// the tenants' weights and concurrency caps. Nothing queued or in flight is
// dropped, and the service-time windows, counters and the fair-share state
// carry on as they were:
//
//   - more slots serve waiters at once; fewer let work in flight finish
//     (as SetConcurrency);
//   - a bound lowered below the queue's depth keeps every queued ticket:
//     newcomers see the new bound (refused queue_full, or admitted only by
//     evicting lower-ranked work, as at any full queue) until grants bring
//     the depth under it;
//   - a tenant's new cap or queue share applies to its next request; a
//     tenant already above a lowered one keeps what it holds;
//   - a weight changes the fair shares from the next decision on.
//
// The rest of the configuration shapes state the Core has built (the ranks
// its levels are indexed by, the estimator's windows) and cannot change
// while it runs: cfg must match the running config in Ranks,
// WaitEstimator, ServiceWindow, MaxKeys, InitialServiceTime, FIFOOnly,
// NoDequeueExpiry, NoEarlyRefusal, LIFOTarget and LIFOInterval, or the
// error names the
// first that differs. An invalid cfg is refused the same way; either way
// nothing changes. Decisions about queued tickets (a raised limit grants
// some) are collected with Events, as after SetConcurrency.
//
// A zero cfg.Concurrency keeps the slots as they are, for an owner whose
// concurrency is set by a controller of its own through SetConcurrency.
func (c *Core) Reconfigure(now time.Time, cfg Config) error {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = c.concurrency
	}
	cfg, err := cfg.normalize()
	if err != nil {
		return err
	}
	if field := c.cfg.fixedDiff(cfg); field != "" {
		return fmt.Errorf("admission: Config.%s cannot change while the gate runs", field)
	}
	c.cfg.MaxQueue = cfg.MaxQueue
	c.cfg.MaxQueuePerTenant = cfg.MaxQueuePerTenant
	c.cfg.Tenants = cfg.Tenants
	for _, ts := range c.tenants {
		c.configure(ts)
	}
	c.sharesStale = true
	return c.SetConcurrency(now, cfg.Concurrency) // serves the queue

}

// configure applies the tenant's configuration (or the defaults of an
// unlisted tenant) to its state, keeping its demand.
func (c *Core) configure(ts *tenantState) {
	fresh := c.newTenant(ts.name)
	ts.weight, ts.maxInFlight, ts.maxQueue = fresh.weight, fresh.maxInFlight, fresh.maxQueue
}

// fixedDiff names the first field of the configuration that Reconfigure
// cannot change in which next differs from c, or returns "". Both are
// normalized.
func (c Config) fixedDiff(next Config) string {
	switch {
	case !c.Ranks.equal(next.Ranks):
		return "Ranks"
	case c.WaitEstimator != next.WaitEstimator:
		return "WaitEstimator"
	case c.ServiceWindow != next.ServiceWindow:
		return "ServiceWindow"
	case c.MaxKeys != next.MaxKeys:
		return "MaxKeys"
	case c.InitialServiceTime != next.InitialServiceTime:
		return "InitialServiceTime"
	case c.FIFOOnly != next.FIFOOnly:
		return "FIFOOnly"
	case c.NoDequeueExpiry != next.NoDequeueExpiry:
		return "NoDequeueExpiry"
	case c.NoEarlyRefusal != next.NoEarlyRefusal:
		return "NoEarlyRefusal"
	case c.LIFOTarget != next.LIFOTarget:
		return "LIFOTarget"
	case c.LIFOInterval != next.LIFOInterval:
		return "LIFOInterval"
	}
	return ""
}

func (r *Ranks) equal(o *Ranks) bool {
	return r.Default == o.Default && r.Retry == o.Retry && r.LowTier == o.LowTier &&
		r.HighTierBoost == o.HighTierBoost && r.HighTierMin == o.HighTierMin && maps.Equal(r.Classes, o.Classes)
}

// MaxQueue returns the bound on queued tickets.
func (c *Core) MaxQueue() int { return c.cfg.MaxQueue }

// Reconfigure changes the policy of the running gate without losing queued
// or in-flight work (see [Core.Reconfigure]).
func (g *Gate) Reconfigure(cfg Config) error {
	var buf [16]*waiter
	g.mu.Lock()
	err := g.mu.core.Reconfigure(g.now(), cfg)
	woken := g.eventsLocked(buf[:0])
	g.mu.Unlock()
	wake(woken)
	return err
}

// MaxQueue returns the bound on waiting requests in force.
func (g *Gate) MaxQueue() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.MaxQueue()
}
