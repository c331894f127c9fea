package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Shape is traffic of a production's shape, to make a trace of: services
// of their own sizes, and arrivals at a rate with bursts of several times
// it — a Poisson process whose rate steps up for each burst and back.
type Shape struct {
	// Services are the callers. At least one, with a positive Share.
	Services []Service
	// Rate is the calls a second between bursts. Required, positive.
	Rate float64
	// Span is how long the trace lasts. Required, positive, up to MaxSpan.
	Span time.Duration
	// BurstEvery is the mean time from one burst's start to the next's
	// (each drawn within a quarter of it); the first starts a fifth to
	// three fifths of it in. Zero means no bursts.
	BurstEvery time.Duration
	// BurstFor is the range of a burst's length, BurstFactor of its rate
	// as a multiple of Rate: each drawn uniformly.
	BurstFor    [2]time.Duration
	BurstFactor [2]float64
}

// Service is one kind of caller of a Shape.
type Service struct {
	// Name is the trace's service column. Required, unique.
	Name string
	// Share is its part of the calls (shares are normalised). Positive.
	Share float64
	// Prompt and Output are the sizes of its prompts and answers.
	Prompt, Output Sizes
	// MaxTokens is the max_tokens its calls are sent with: no answer is
	// longer. Zero means none is sent, and Output.Max bounds the answers.
	MaxTokens int
	// Deadline is how long its callers wait for an answer. Positive.
	Deadline time.Duration
}

// Sizes are a lognormal number of tokens: Median × e^(Sigma·Z), rounded,
// at least 1 and at most Max (zero: MaxTokens).
type Sizes struct {
	Median int
	Sigma  float64
	Max    int
}

func (s Sizes) draw(r *rand.Rand, cap int) int {
	hi := s.Max
	if hi == 0 {
		hi = MaxTokens
	}
	if cap > 0 {
		hi = min(hi, cap)
	}
	n := math.Round(float64(s.Median) * math.Exp(s.Sigma*r.NormFloat64()))
	return int(max(1, min(n, float64(hi))))
}

// Chat and Code are the two services of the production shape, sized as a
// public production trace of a chat service and a code-completion
// service calling one model (Azure's LLM inference traces of 2023): chat
// prompts of a median ~1,000 tokens and answers of a median 129, a mean
// about 200, up to 1,000, its callers waiting 10 s with max_tokens 1,024;
// code prompts of a median ~1,500 tokens and answers of a median 13, a
// mean about 28, its callers waiting 3 s with max_tokens 256.
func Chat() Service {
	return Service{Name: "chat", Share: 2, Prompt: Sizes{Median: 1000, Sigma: 0.7, Max: 8000},
		Output: Sizes{Median: 129, Sigma: 1, Max: 1000}, MaxTokens: 1024, Deadline: 10 * time.Second}
}

// Code: see Chat.
func Code() Service {
	return Service{Name: "code", Share: 1, Prompt: Sizes{Median: 1500, Sigma: 0.6, Max: 8000},
		Output: Sizes{Median: 13, Sigma: 1.25, Max: 256}, MaxTokens: 256, Deadline: 3 * time.Second}
}

// ProductionShape is two services calling one model, Chat (two calls in
// three) and Code, with bursts of two to three times the rate between
// them lasting 10 to 30 s, one every 75 s or so (the first 15 to 45 s
// in). Rate and Span are left to the caller (see Shape.RateFor).
func ProductionShape() Shape {
	return Shape{
		Services:    []Service{Chat(), Code()},
		BurstEvery:  75 * time.Second,
		BurstFor:    [2]time.Duration{10 * time.Second, 30 * time.Second},
		BurstFactor: [2]float64{2, 3},
	}
}

// Validate names the first field of the shape that is out of range.
func (s Shape) Validate() error {
	if len(s.Services) == 0 {
		return errors.New("services: at least one")
	}
	names := map[string]bool{}
	for i, sv := range s.Services {
		p := fmt.Sprintf("services[%d]", i)
		switch {
		case sv.Name == "":
			return fmt.Errorf("%s.name: required", p)
		case names[sv.Name]:
			return fmt.Errorf("%s.name: %q twice", p, sv.Name)
		case !(sv.Share > 0) || math.IsInf(sv.Share, 0):
			return fmt.Errorf("%s.share: %v, want positive", p, sv.Share)
		case !(sv.Deadline > 0) || sv.Deadline > MaxSpan:
			return fmt.Errorf("%s.deadline: %v, want positive up to %v", p, sv.Deadline, MaxSpan)
		case sv.MaxTokens < 0 || sv.MaxTokens > MaxTokens:
			return fmt.Errorf("%s.max_tokens: %d, want 0 to %d", p, sv.MaxTokens, MaxTokens)
		}
		names[sv.Name] = true
		for _, z := range []struct {
			name string
			s    Sizes
		}{{"prompt", sv.Prompt}, {"output", sv.Output}} {
			if z.s.Median < 1 || z.s.Median > MaxTokens || !(z.s.Sigma >= 0 && z.s.Sigma <= 3) || z.s.Max < 0 || z.s.Max > MaxTokens {
				return fmt.Errorf("%s.%s: median %d, sigma %v, max %d: want a median of 1 to %d, sigma 0 to 3, max 0 to %d", p, z.name, z.s.Median, z.s.Sigma, z.s.Max, MaxTokens, MaxTokens)
			}
		}
	}
	switch {
	case !(s.Rate > 0) || s.Rate > 1e6:
		return fmt.Errorf("rate: %v, want positive calls a second up to 1e6", s.Rate)
	case !(s.Span > 0) || s.Span > MaxSpan:
		return fmt.Errorf("span: %v, want positive up to %v", s.Span, MaxSpan)
	case s.Rate*s.Span.Seconds() > MaxCalls:
		return fmt.Errorf("rate × span: %.0f calls, more than %d", s.Rate*s.Span.Seconds(), MaxCalls)
	case s.BurstEvery < 0:
		return fmt.Errorf("burst_every: %v, want 0 (none) or positive", s.BurstEvery)
	}
	if s.BurstEvery > 0 {
		switch {
		case !(s.BurstFor[0] > 0) || s.BurstFor[1] < s.BurstFor[0]:
			return fmt.Errorf("burst_for: %v, want two positive lengths, the first no longer", s.BurstFor)
		case s.BurstFor[1] >= s.BurstEvery*3/4:
			return fmt.Errorf("burst_for: %v, want bursts shorter than three quarters of burst_every (%v)", s.BurstFor[1], s.BurstEvery)
		case !(s.BurstFactor[0] >= 1) || !(s.BurstFactor[1] >= s.BurstFactor[0]) || s.BurstFactor[1] > 100:
			return fmt.Errorf("burst_factor: %v, want two factors of 1 to 100, the first no larger", s.BurstFactor)
		}
	}
	return nil
}

// burst is one burst of a shape: from at, for length, at factor.
type burst struct {
	at, length time.Duration
	factor     float64
}

// bursts places the shape's bursts over its span.
func (s Shape) bursts(r *rand.Rand) []burst {
	if s.BurstEvery <= 0 {
		return nil
	}
	uniform := func(lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }
	var out []burst
	at := time.Duration(uniform(0.2, 0.6) * float64(s.BurstEvery))
	for at < s.Span {
		b := burst{at: at,
			length: time.Duration(uniform(float64(s.BurstFor[0]), float64(s.BurstFor[1]))),
			factor: uniform(s.BurstFactor[0], s.BurstFactor[1])}
		b.length = min(b.length, s.Span-at)
		out = append(out, b)
		at += time.Duration(uniform(0.75, 1.25) * float64(s.BurstEvery))
	}
	return out
}

// Trace makes a trace of the shape, the same for the same seed: arrivals
// by a Poisson process at Rate, times each burst's factor while it
// lasts; each call's service drawn by share, its sizes by its service's.
func (s Shape) Trace(seed uint64) (*Trace, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("workload: shape: %w", err)
	}
	r := rand.New(rand.NewPCG(seed, 0x7472616365))
	bursts := s.bursts(r)
	base := s.Rate
	var total float64
	for _, sv := range s.Services {
		total += sv.Share
	}
	t := &Trace{Calls: make([]Call, 0, int(s.Rate*s.Span.Seconds()*1.05)+16)}
	// Arrivals in operational time (the integral of the rate): each
	// stretch of constant rate a Poisson process of its own.
	rateAt := func(at time.Duration) (rate float64, until time.Duration) {
		until = s.Span
		for _, b := range bursts {
			switch {
			case at < b.at:
				return base, min(until, b.at)
			case at < b.at+b.length:
				return base * b.factor, b.at + b.length
			}
		}
		return base, until
	}
	now := time.Duration(0)
	e := r.ExpFloat64()
	for now < s.Span {
		rate, until := rateAt(now)
		room := (until - now).Seconds() * rate
		if e >= room {
			e -= room
			now = until
			continue
		}
		now += time.Duration(e / rate * float64(time.Second))
		e = r.ExpFloat64()
		if now >= s.Span {
			break
		}
		pick, sv := r.Float64()*total, s.Services[len(s.Services)-1]
		for _, cand := range s.Services {
			if pick < cand.Share {
				sv = cand
				break
			}
			pick -= cand.Share
		}
		t.Calls = append(t.Calls, Call{At: now, Service: sv.Name,
			PromptTokens: sv.Prompt.draw(r, 0), OutputTokens: sv.Output.draw(r, sv.MaxTokens)})
	}
	if len(t.Calls) == 0 {
		return nil, fmt.Errorf("workload: shape: no call arrived in %v at %v a second", s.Span, s.Rate)
	}
	return t, nil
}

// MeanService is the mean time a call of the shape takes under m: its
// services' mean sizes by their shares, drawn (the same draws every
// time), so that a rate can be chosen for a load before the trace is made
// (see RateFor).
func (s Shape) MeanService(m ServiceModel) time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	var total, sum float64
	for _, sv := range s.Services {
		const draws = 20_000
		var one float64
		for range draws {
			one += float64(m.Mean(sv.Prompt.draw(r, 0), sv.Output.draw(r, sv.MaxTokens)))
		}
		sum += sv.Share * one / draws
		total += sv.Share
	}
	if total == 0 {
		return 0
	}
	return time.Duration(sum / total)
}

// RateFor is the rate of calls that offers a provider of slots under m
// the given load, for calls of the shape's sizes: load × slots over their
// mean time.
func (s Shape) RateFor(m ServiceModel, slots int, load float64) float64 {
	mean := s.MeanService(m)
	if mean <= 0 {
		return 0
	}
	return load * float64(slots) / mean.Seconds()
}

// Service returns the shape's service of that name, and false when it
// has none.
func (s Shape) Service(name string) (Service, bool) {
	for _, sv := range s.Services {
		if sv.Name == name {
			return sv, true
		}
	}
	return Service{}, false
}
