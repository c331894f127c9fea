package config

import (
	"maps"
	"slices"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// The spend limiter is optional: with no `spend:` section the gateway
// keeps no books and applies no budget.

// spendConfig completes the spend section with what only the gateway knows
// (the gate's ranks) and checks that its tenants are the gateway's.
func (c Config) SpendConfig() (*spend.Config, error) {
	if c.Spend == nil {
		return nil, nil
	}
	sc := *c.Spend
	acfg, err := c.admissionConfig()
	if err != nil {
		return nil, err
	}
	top := acfg.Ranks.Count() - 1
	switch {
	case sc.Stages.TopRank == 0:
		sc.Stages.TopRank = top
	case sc.Stages.TopRank != top:
		return nil, errorf("spend.stages.top_rank: %d, but the gate's highest rank is %d", sc.Stages.TopRank, top)
	}
	switch {
	case sc.Stages.OverQuotaRank == nil:
		low := acfg.Ranks.LowTier
		sc.Stages.OverQuotaRank = &low
	case *sc.Stages.OverQuotaRank != acfg.Ranks.LowTier:
		return nil, errorf("spend.stages.over_quota_rank: %d, but the gate's ranks.low_tier is %d", *sc.Stages.OverQuotaRank, acfg.Ranks.LowTier)
	}
	names := map[string]bool{}
	for _, t := range c.Tenants {
		names[t.Name] = true
	}
	if len(c.Tenants) == 0 {
		names[contract.AnonymousTenant] = true
	}
	for _, name := range slices.Sorted(maps.Keys(sc.Tenants)) {
		if !names[name] {
			return nil, errorf("spend.tenants.%s: not a tenant of the gateway (tenants[].name, or %q without tenants)", name, contract.AnonymousTenant)
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}
