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

// serviceTime draws how long a call for model m of tokensIn prompt tokens
// and tokensOut answer tokens takes when it starts at now: the fixed part
// and the per-token parts (see baseTime), times a lognormal draw of median
// 1, times the model's factor, times the step factor. It is
// workload.ServiceModel's time with Median as its base. When Median and
// both per-token parts are zero it is exactly zero, with no draw, so that
// zero-latency runs stay cheap and deterministic.
func (s *Server) serviceTime(m ModelSpec, tokensIn, tokensOut int, now time.Time) time.Duration {
	if s.cfg.Median == 0 && s.cfg.PerPromptToken == 0 && s.cfg.PerOutputToken == 0 {
		return 0
	}
	f := orOne(m.LatencyFactor) * s.stepFactor(now)
	if s.cfg.Sigma > 0 {
		f *= math.Exp(s.cfg.Sigma * s.rand.normal())
	}
	return capServiceTime(s.baseTime(tokensIn, tokensOut) * f)
}

// baseTime is a call's median service time before the factors, in
// nanoseconds: Median plus its prompt tokens × PerPromptToken plus its
// answer tokens × PerOutputToken. With no per-token parts it is Median
// exactly, so that the times are those of a mock without them. In floats
// it cannot overflow; capServiceTime caps the product.
func (s *Server) baseTime(tokensIn, tokensOut int) float64 {
	return float64(s.cfg.Median) + float64(tokensIn)*float64(s.cfg.PerPromptToken) +
		float64(tokensOut)*float64(s.cfg.PerOutputToken)
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
// the median service time now in force of an answer of the default length
// (the prompt is not known), at least a millisecond.
func (s *Server) retryAfter(now time.Time) time.Duration {
	if s.cfg.RetryAfter > 0 {
		return s.cfg.RetryAfter
	}
	d := capServiceTime(s.baseTime(0, s.defaultOutputTokens()) * s.stepFactor(now))
	return max(d, time.Millisecond)
}
