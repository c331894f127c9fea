package gateway

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// UpstreamLimitConfig adapts the gate's concurrency to the provider's rate
// limits: a 429 (or an x-ratelimit-remaining-* header at zero) lowers it
// multiplicatively, and it is restored additively while the provider
// answers without complaint — the same AIMD rule TCP uses, so that the gate's
// wait estimates and refusals stay honest while capacity shrinks.
type UpstreamLimitConfig struct {
	// Disabled keeps concurrency fixed whatever the provider answers.
	Disabled bool `yaml:"disabled"`
	// DecreaseFactor multiplies concurrency on a rate-limit signal, in
	// (0, 1). Zero means 0.5.
	DecreaseFactor float64 `yaml:"decrease_factor"`
	// Interval is both the shortest time between two decreases (the calls
	// in flight when the provider starts refusing all get refused; one
	// signal is enough) and the time between two +1 steps back up. Zero
	// means 1s.
	Interval Duration `yaml:"interval"`
}

func (c UpstreamLimitConfig) validate() error {
	if c.DecreaseFactor < 0 || c.DecreaseFactor >= 1 {
		return errorf("upstream_limit.decrease_factor: %v, want 0 < f < 1", c.DecreaseFactor)
	}
	if c.Interval < 0 {
		return errorf("upstream_limit.interval: %v, want ≥ 0", c.Interval.D())
	}
	return nil
}

// aimd is the concurrency controller. Time is an input; it holds its own
// lock and calls the gate's SetConcurrency outside it.
type aimd struct {
	off      bool
	factor   float64
	interval time.Duration
	ceiling  int

	mu      sync.Mutex
	current int
	changed time.Time // last decrease or increase
}

func newAIMD(cfg UpstreamLimitConfig, ceiling int) *aimd {
	a := &aimd{off: cfg.Disabled, factor: cfg.DecreaseFactor, interval: cfg.Interval.D(), ceiling: ceiling, current: ceiling}
	if a.factor == 0 {
		a.factor = 0.5
	}
	if a.interval == 0 {
		a.interval = time.Second
	}
	return a
}

// next returns the concurrency after a response observed at now (limited
// says the provider signalled its rate limit), and whether it changed.
func (a *aimd) next(now time.Time, limited bool) (int, bool) {
	if a.off {
		return a.current, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.changed) < a.interval {
		return a.current, false
	}
	switch {
	case limited && a.current > 1:
		a.current = max(1, int(float64(a.current)*a.factor))
	case !limited && a.current < a.ceiling:
		a.current++
	default:
		return a.current, false
	}
	a.changed = now
	return a.current, true
}

// observe feeds one upstream answer (nil after a transport error) to the
// controller and applies its decision to the gate.
func (a *aimd) observe(now time.Time, resp *http.Response, g *Gateway) {
	if resp == nil || a.off {
		return
	}
	limited := resp.StatusCode == http.StatusTooManyRequests || exhausted(resp.Header)
	if resp.StatusCode >= 500 && !limited {
		return // neither a limit nor a sign of health
	}
	if n, changed := a.next(now, limited); changed {
		_ = g.gate.SetConcurrency(n) // n ≥ 1 by construction
		if limited {
			g.metrics.limitDecreases.Inc()
			g.log.Warn("the provider is rate limiting: concurrency lowered", "concurrency", n)
		}
	}
}

// exhausted reports an x-ratelimit-remaining-requests or -tokens header at
// zero: the provider's next request will be refused.
func exhausted(h http.Header) bool {
	for _, name := range []string{"x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens"} {
		if v := h.Get(name); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n <= 0 {
				return true
			}
		}
	}
	return false
}
