package scenario

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// Ranks returns the admission ranks of the scenario's classes: the
// classes' ranks (or admission.DefaultRanks' for the built-in classes)
// with priority shedding, every request at rank 0 without it. The default
// class is interactive when there is one, else the first class.
func (s *Scenario) Ranks(priority bool) *admission.Ranks {
	classes := s.Classes
	def := admission.DefaultRanks()
	r := &admission.Ranks{Classes: map[string]int{}, Default: classes[0].Name}
	for _, c := range classes {
		if c.Name == admission.ClassInteractive {
			r.Default = c.Name
		}
		switch {
		case !priority:
			r.Classes[c.Name] = 0
		case c.Rank != nil:
			r.Classes[c.Name] = *c.Rank
		default:
			r.Classes[c.Name] = def.Classes[c.Name]
		}
	}
	if priority {
		r.Retry, r.LowTier, r.HighTierBoost, r.HighTierMin = def.Retry, def.LowTier, def.HighTierBoost, def.HighTierMin
	}
	return r
}

// SpendConfig is the scenario's spend section completed and checked as the
// gateway completes and checks its own: the gate's highest rank and
// low-tier rank fill stages.top_rank and stages.over_quota_rank (and must
// equal them when set), every budget must be a tenant of the traffic, and
// every source's model must be priced. It also checks what the simulator
// adds: calls are priced from spend.prices alone, and every rung of the
// ladder has a service time.
func (s *Scenario) SpendConfig() (*spend.Config, error) {
	cfg := *s.Spend
	ranks := s.Ranks(true)
	switch top := ranks.Count() - 1; {
	case cfg.Stages.TopRank == 0:
		cfg.Stages.TopRank = top
	case cfg.Stages.TopRank != top:
		return nil, ferr("spend.stages.top_rank", "%d, but the gate's highest rank is %d", cfg.Stages.TopRank, top)
	}
	switch low := ranks.LowTier; {
	case cfg.Stages.OverQuotaRank == nil:
		cfg.Stages.OverQuotaRank = &low
	case *cfg.Stages.OverQuotaRank != low:
		return nil, ferr("spend.stages.over_quota_rank", "%d, but the gate's low-tier rank is %d", *cfg.Stages.OverQuotaRank, low)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tenants := map[string]bool{}
	for _, src := range s.Traffic {
		name := src.Tenant
		if name == "" {
			name = contract.AnonymousTenant
		}
		tenants[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Tenants)) {
		if !tenants[name] {
			return nil, ferr("spend.tenants."+name, "not a tenant of the traffic (traffic[].tenant, or %q for a source without one)", contract.AnonymousTenant)
		}
	}
	if len(s.Upstream.Models) > 0 {
		for _, from := range slices.Sorted(maps.Keys(cfg.Ladder)) {
			if _, ok := s.Upstream.Models[cfg.Ladder[from]]; !ok {
				return nil, ferr("spend.ladder."+from, "rung %q is not in upstream.models, so its service time is unknown", cfg.Ladder[from])
			}
		}
	}
	if s.Upstream.CostPerCall != 0 {
		return nil, ferr("upstream.cost_per_call", "must be 0 with a spend section: calls are priced from spend.prices by their tokens")
	}
	pricer, err := spend.New(cfg, spend.Options{})
	if err != nil {
		return nil, err
	}
	for i, src := range s.Traffic {
		f := fmt.Sprintf("traffic[%d]", i)
		if src.CostPerCall != 0 {
			return nil, ferr(f+".cost_per_call", "must be 0 with a spend section: calls are priced from spend.prices by their tokens")
		}
		if _, err := pricer.Cost(src.Model, contract.Usage{Input: src.InputTokens, Output: src.OutputTokens}); err != nil {
			return nil, ferr(f+".model", "%v", err)
		}
	}
	return &cfg, nil
}
