package sim

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/workload"
)

// Draws that are a pure function of (seed, what, which) rather than of the
// order events happen in: the service time of attempt n of request seq is
// the same whichever policy runs it and whenever it starts. Comparing
// policies on common random numbers removes the noise of different draws
// from the difference between them, and keeps a run deterministic without
// threading one generator through every decision.

// Salts separate the uses of the hash.
const (
	saltService uint64 = 0x5e41ce
	saltJitter  uint64 = 0x7177e4
	saltSource  uint64 = 0x50a2ce
)

// mix is SplitMix64's finaliser: a bijection that scatters nearby inputs.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// uniform returns a number in (0, 1) determined by its arguments.
func uniform(seed, salt, a, b uint64) float64 {
	h := mix(seed ^ mix(salt^mix(a^mix(b))))
	return (float64(h>>11) + 0.5) / (1 << 53)
}

// sampler draws service times.
type sampler struct {
	median    float64 // ns
	sigma     float64
	empirical []time.Duration
	// tokens, when set, is the upstream's time by a call's tokens.
	tokens *workload.ServiceModel
	steps  []resolvedStep // sorted by at
}

type resolvedStep struct {
	at     time.Duration
	factor float64
}

func newSampler(s scenario.Service, steps []resolvedStep) *sampler {
	sm := &sampler{empirical: s.Empirical, steps: steps}
	if s.Tokens != nil {
		m := s.Tokens.Model()
		sm.tokens = &m
	}
	if s.Lognormal != nil {
		sm.median = float64(s.Lognormal.Median)
		sm.sigma = s.Lognormal.Sigma
	}
	return sm
}

// factor is the step factor in force at t.
func (s *sampler) factor(t time.Duration) float64 { return stepFactor(s.steps, t) }

// factorFor is the factor on the service time of a call to model m that
// starts at t: the model's own, and its steps'.
func (m *modelInfo) factorFor(t time.Duration) float64 {
	if len(m.steps) == 0 {
		return m.factor
	}
	return m.factor * stepFactor(m.steps, t)
}

// stepFactor is the factor of the steps (sorted by at) in force at t.
func stepFactor(steps []resolvedStep, t time.Duration) float64 {
	f := 1.0
	for _, st := range steps {
		if st.at > t {
			break
		}
		f = st.factor
	}
	return f
}

// draw returns the service time of a call of in prompt and out answer
// tokens to a model whose service factor is factor, that starts at start,
// for the uniform u.
func (s *sampler) draw(u float64, start time.Duration, factor float64, in, out int) time.Duration {
	var d float64
	switch {
	case s.tokens != nil:
		d = float64(s.tokens.Time(in, out, math.Sqrt2*math.Erfinv(2*u-1)))
	case len(s.empirical) > 0:
		d = float64(s.empirical[min(int(u*float64(len(s.empirical))), len(s.empirical)-1)])
	default:
		d = s.median
		if s.sigma > 0 {
			// The inverse of the normal CDF maps u to z.
			d *= math.Exp(s.sigma * math.Sqrt2 * math.Erfinv(2*u-1))
		}
	}
	if len(s.steps) > 0 {
		d *= s.factor(start)
	}
	if factor != 1 {
		d *= factor
	}
	// Validation bounds the median to an hour, sigma to 3 and factors to
	// 1000; a draw past a day is a far tail, clamped so it cannot overflow.
	return time.Duration(min(max(d, 1), float64(scenario.MaxDuration)))
}
