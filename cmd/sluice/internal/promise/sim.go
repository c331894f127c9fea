package promise

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// SimOptions configure RunSim.
type SimOptions struct {
	// Seed seeds the arrivals and service times.
	Seed uint64
	// Seconds is about how long the arrival window lasts in virtual time.
	// Zero means 60.
	Seconds float64
	// Learn runs the gate as `sluice serve --upstream U` runs it when
	// told no concurrency: learnt from the provider's latencies (the
	// simulator's policy learned, adaptive's defaults), the provider
	// queueing beyond its slots. Replicas are told the slots regardless,
	// as over HTTP: store.redis requires a configured concurrency.
	Learn bool
}

// RunSim runs sc with callers v in the simulator, under the policy the
// gateway runs (full sluice) and its defaults.
func RunSim(ctx context.Context, sc Scenario, v Variant, opt SimOptions) (*Result, error) {
	if sc.Production != nil {
		return runProductionSim(ctx, sc, v, opt, ProductionSeconds)
	}
	s, err := simScenario(sc, v, opt)
	if err != nil {
		return nil, err
	}
	policy := scenario.PolicySluice
	if opt.Learn && sc.Replicas <= 1 {
		policy = scenario.PolicyLearned
		s.Sluice.Learn = &adaptive.Config{}
	}
	start := time.Now()
	r, err := sim.Run(ctx, s, policy, sc.Load, sim.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", sc.Name, v, err)
	}
	out := &Result{
		Scenario:      sc.Name,
		Variant:       v.String(),
		Way:           "sim",
		GoodputPct:    r.GoodputPct,
		WastePct:      r.WastePct,
		UnansweredPct: r.UnansweredPct,
		RefusalP99Ms:  r.RefusalP99Ms,
		Refusals:      r.Refused,
		Success:       map[string]float64{},
		PeakInFlight:  -1,
		Declared:      !v.Undeclared,
		Learnt:        policy == scenario.PolicyLearned,
		Recognised:    r.RetriesRecognised + r.FirstsRecognised,
		Seconds:       time.Since(start).Seconds(),
	}
	for _, src := range r.Sources {
		out.Success[src.Name] = src.SuccessPct
	}
	if r.Learned != nil {
		out.Limits = [][]int{r.Learned.Limit}
	}
	return out, nil
}

// gatewayDefaults is what `sluice serve --upstream U --concurrency N`
// runs with: the simulator's gate is given the same waiting room.
func gatewayDefaults(concurrency int) (config.Config, error) {
	return config.Parse(fmt.Appendf(nil, "upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: %d}\n", concurrency))
}

// simScenario is sc as a simulator scenario: the provider, the classes,
// naive callers retrying twice at once with their deadline as their
// timeout, and the gateway's default waiting room.
func simScenario(sc Scenario, v Variant, opt SimOptions) (*scenario.Scenario, error) {
	def, err := gatewayDefaults(Slots)
	if err != nil {
		return nil, err
	}
	maxQueue, _ := def.EffectiveMaxQueue()
	seconds := opt.Seconds
	if seconds == 0 {
		seconds = 60
	}
	s := &scenario.Scenario{
		Name:     sc.Name,
		Seed:     opt.Seed,
		Requests: int(math.Ceil(sc.Load * NominalCapacity() * seconds)),
		Upstream: scenario.Upstream{
			Concurrency: Slots,
			Service:     scenario.Service{Lognormal: &scenario.Lognormal{Median: Median, Sigma: Sigma}},
		},
		// The gateway starts without a service time; the simulator's
		// gate, without one, starts from the upstream's mean.
		Sluice: scenario.SluiceConfig{MaxQueue: maxQueue},
	}
	if sc.Slowdown > 1 {
		s.Upstream.Steps = []scenario.Step{{At: scenario.TimePoint{F: 0.5, Fraction: true}, Factor: sc.Slowdown}}
	}
	if sc.Replicas > 1 {
		s.Replicas = &scenario.Replicas{Count: sc.Replicas}
	}
	classes := map[string]time.Duration{}
	for _, src := range sc.Sources {
		if d, ok := classes[src.Class]; ok && d != src.Deadline {
			return nil, fmt.Errorf("%s: class %s has two deadlines", sc.Name, src.Class)
		}
		if _, ok := classes[src.Class]; !ok {
			s.Classes = append(s.Classes, scenario.Class{Name: src.Class, Deadline: src.Deadline})
		}
		classes[src.Class] = src.Deadline
		headers := "attempt"
		if v.Undeclared {
			headers = "none"
		}
		s.Traffic = append(s.Traffic, scenario.Source{
			Name:           src.Name(),
			Class:          src.Class,
			Tenant:         src.Tenant,
			Share:          src.Share,
			Client:         "naive",
			MaxAttempts:    3,
			AttemptTimeout: src.Deadline,
			Headers:        headers,
			SamePrompt:     v.SamePrompt,
		})
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	return s, nil
}
