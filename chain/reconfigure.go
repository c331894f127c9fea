package chain

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/retrybudget"
)

// Reconfigure changes the policy of the running chain to cfg's without
// dropping a queued or in-flight call: the tenants (names, keys, tiers,
// class rules), the retry budgets' ratios, floors and caps, and the gate's
// slots, waiting room and tenants' weights, caps and shares (see
// admission.Gate.Reconfigure; a zero Admission.Concurrency keeps the
// slots, for a shell that sets them with a controller of its own).
//
// What the chain has counted carries on: every retry budget keeps its
// balance (cut to a lower cap), the gate its service-time windows and
// counters, and calls admitted before the change settle against what they
// took then. A call being admitted while the change is made sees either
// the old tenants or the new ones. A tenant that is removed keeps its
// retry budget and its books; its calls already admitted finish, and its
// keys are refused from now on.
//
// The spend limiter is the shell's, and so is its policy: cfg.Spend must
// be the chain's own limiter (or nil when the chain has none); the shell
// changes its prices and budgets with spend.Limiter.Reconfigure. Nor can
// Retries.Disabled change, which would add or remove a stage.
//
// cfg is validated whole before anything changes: an invalid cfg, or one
// that changes what cannot change while the chain runs, is refused with
// an error naming the field, and the running policy stays. Calls to
// Reconfigure are serialized.
//
// cfg must name the same pools in the same order (the pools are the
// deployments and models: a restart changes them; without routing, the one
// pool of Admission), and each pool's gate takes its
// PoolConfig.Admission.
func (c *Chain) Reconfigure(cfg Config) error {
	c.reconf.Lock()
	defer c.reconf.Unlock()
	return c.stages.reconfigure(c.now(), cfg, func() error {
		return reconfigurePools(c.stages.route, cfg.routing(), func(i int, a admission.Config) error { return c.gates[i].Reconfigure(a) })
	})
}

// reconfigurePools checks that rc names the running pools, checks every
// pool's admission config, and only then gives each gate its own.
func reconfigurePools(rt *router, rc *RoutingConfig, apply func(int, admission.Config) error) error {
	if rc == nil || len(rc.Pools) != len(rt.pools) {
		return errors.New("chain: Config.Routing: a running chain keeps its pools (restart to change the deployments or models)")
	}
	for i, pc := range rc.Pools {
		if pc.Name != rt.pools[i].cfg.Name {
			return fmt.Errorf("chain: Config.Routing.Pools[%d]: %q, want the running pool %q", i, pc.Name, rt.pools[i].cfg.Name)
		}
		a := pc.Admission
		if a.Concurrency == 0 {
			a.Concurrency = 1 // kept by Reconfigure; any count checks the rest
		}
		if _, err := admission.NewCore(a); err != nil {
			return fmt.Errorf("routing: pools[%d] (%s): %w", i, pc.Name, err)
		}
	}
	for i, pc := range rc.Pools {
		if err := apply(i, pc.Admission); err != nil {
			return fmt.Errorf("routing: pools[%d] (%s): %w", i, pc.Name, err)
		}
	}
	return nil
}

// Reconfigure is [Chain.Reconfigure] at now, for a chain in virtual time.
// Queued tickets it grants are collected with Events.
func (c *Core) Reconfigure(now time.Time, cfg Config) error {
	c.now = now
	return c.stages.reconfigure(now, cfg, func() error {
		return reconfigurePools(c.stages.route, cfg.routing(), func(i int, a admission.Config) error { return c.gates[i].Reconfigure(now, a) })
	})
}

// reconfigure checks cfg against the stages, then lets the gate check and
// apply its part, then applies the stages'. Only the gate's part can be
// refused once the stages' checks have passed, and then nothing is
// applied.
func (s *stages) reconfigure(now time.Time, cfg Config, gate func() error) error {
	if (cfg.Spend == nil) != (s.spend == nil) || (s.spend != nil && cfg.Spend != s.spend.l) {
		return errors.New("chain: Config.Spend: a running chain keeps its spend limiter (change its policy with spend.Limiter.Reconfigure)")
	}
	if cfg.Retries.Disabled != (s.retries == nil) {
		return errors.New("chain: Config.Retries.Disabled cannot change while the chain runs")
	}
	table, err := s.identify.newTable(cfg.Tenants, cfg.Mode)
	if err != nil {
		return err
	}
	if s.retries != nil {
		if _, err := retrybudget.New(cfg.Retries.Budget); err != nil {
			return fmt.Errorf("retries: global: %w", err)
		}
		if _, err := retrybudget.New(cfg.Retries.PerTenant); err != nil {
			return fmt.Errorf("retries: per tenant: %w", err)
		}
	}
	if err := gate(); err != nil {
		return err
	}
	s.identify.table.Store(table)
	if s.retries != nil {
		s.retries.reconfigure(now, cfg.Retries)
	}
	return nil
}

// reconfigure gives every budget its new configuration, keeping its
// balance; cfg is valid.
func (b *retries) reconfigure(now time.Time, cfg RetryConfig) {
	_ = b.global.Reconfigure(now, cfg.Budget)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.perTenant = cfg.PerTenant
	for _, tb := range b.tenant {
		_ = tb.Reconfigure(now, cfg.PerTenant)
	}
}
