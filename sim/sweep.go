package sim

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/sim/scenario"
)

// SweepOptions choose what a sweep runs.
type SweepOptions struct {
	Options
	// Loads are the load factors. Empty means the scenario's Loads, else
	// DefaultLoads.
	Loads []float64
	// Policies are the policies, by name. Empty means the scenario's
	// Policies, else every policy.
	Policies []string
	// Workers bounds the runs done at once. Zero means GOMAXPROCS. Runs
	// are independent and deterministic, so the results do not depend on
	// it.
	Workers int
}

// Sweep is the results of a scenario over loads and policies.
type Sweep struct {
	Scenario *scenario.Scenario
	Loads    []float64
	Policies []Policy
	// Results[i][j] is load i, policy j.
	Results [][]*Result
}

// Result returns the result of a load and a policy, or nil.
func (sw *Sweep) Result(load float64, policy string) *Result {
	i := slices.Index(sw.Loads, load)
	j := slices.IndexFunc(sw.Policies, func(p Policy) bool { return p.Name == policy })
	if i < 0 || j < 0 {
		return nil
	}
	return sw.Results[i][j]
}

// RunSweep runs every policy at every load of the scenario.
func RunSweep(ctx context.Context, sc *scenario.Scenario, opt SweepOptions) (*Sweep, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	sw := &Sweep{Scenario: sc, Loads: opt.Loads}
	if len(sw.Loads) == 0 {
		sw.Loads = sc.Loads
	}
	if len(sw.Loads) == 0 {
		sw.Loads = scenario.DefaultLoads
	}
	names := opt.Policies
	if len(names) == 0 {
		names = sc.Policies
	}
	if len(names) == 0 {
		names = sc.PolicyNames()
	}
	for _, n := range names {
		p, ok := policyByName(n)
		if !ok {
			return nil, fmt.Errorf("policy: unknown policy %q (known: %v)", n, scenario.PolicyNames())
		}
		if p.gate.spend && sc.Spend == nil {
			return nil, fmt.Errorf("policy: %q runs the spend limiter, and scenario %s has no spend section", n, sc.Name)
		}
		sw.Policies = append(sw.Policies, p)
	}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	sw.Results = make([][]*Result, len(sw.Loads))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, load := range sw.Loads {
		sw.Results[i] = make([]*Result, len(sw.Policies))
		for j, p := range sw.Policies {
			g.Go(func() error {
				r, err := Run(ctx, sc, p.Name, load, opt.Options)
				if err != nil {
					return fmt.Errorf("%s at %g×: %w", p.Name, load, err)
				}
				sw.Results[i][j] = r
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return sw, nil
}
