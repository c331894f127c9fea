package mockllm

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// source is the server's random source. Service times and faults share it;
// a mutex rather than per-request sources keeps a seeded sequential run
// reproducible.
type source struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newSource(seed uint64) *source {
	if seed == 0 {
		seed = rand.Uint64()
	}
	// The second PCG word is fixed: one seed is all a user should have to
	// write down to reproduce a run.
	return &source{r: rand.New(rand.NewPCG(seed, 0x736c75696365))}
}

func (s *source) float64() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Float64()
}

func (s *source) normal() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.NormFloat64()
}

// stepFactor is the multiplier in force at now: StepFactor once StepAt has
// passed since New, 1 before.
func (s *Server) stepFactor(now time.Time) float64 {
	if now.Sub(s.start) >= s.cfg.StepAt {
		return orOne(s.cfg.StepFactor)
	}
	return 1
}

// serviceTime draws how long a call for model m takes when it starts at
// now: Median, times a lognormal draw of median 1, times the model's factor,
// times the step factor. A zero Median gives exactly zero, with no draw, so
// that zero-latency runs stay cheap and deterministic.
func (s *Server) serviceTime(m ModelSpec, now time.Time) time.Duration {
	if s.cfg.Median == 0 {
		return 0
	}
	f := orOne(m.LatencyFactor) * s.stepFactor(now)
	if s.cfg.Sigma > 0 {
		f *= math.Exp(s.cfg.Sigma * s.rand.normal())
	}
	return capServiceTime(float64(s.cfg.Median) * f)
}

// capServiceTime converts nanoseconds to a Duration no longer than
// MaxServiceTime, so that an extreme draw can never overflow.
func capServiceTime(ns float64) time.Duration {
	if ns >= float64(MaxServiceTime) {
		return MaxServiceTime
	}
	return time.Duration(ns)
}

// retryAfter is the delay advertised on 429 answers: Config.RetryAfter, or
// the median service time now in force, at least a millisecond.
func (s *Server) retryAfter(now time.Time) time.Duration {
	if s.cfg.RetryAfter > 0 {
		return s.cfg.RetryAfter
	}
	d := capServiceTime(float64(s.cfg.Median) * s.stepFactor(now))
	return max(d, time.Millisecond)
}
