package config

import "time"

// UpstreamLimitConfig adapts the gate's concurrency to the provider's rate
// limits: a 429 (or a remaining-requests or -tokens header at zero,
// OpenAI's x-ratelimit-remaining-* or Anthropic's
// anthropic-ratelimit-*-remaining) lowers it
// multiplicatively, and it climbs back additively, one slot per interval
// since the last decrease — the AIMD rule TCP uses, so that the gate's wait
// estimates and refusals stay honest while capacity shrinks. The climb is
// counted in time, not in answers: after a storm of 429s and no traffic the
// gate is back at admission.concurrency (ceiling − lowered) × interval
// later, instead of staying low because nothing was sent to show the
// provider had recovered.
type UpstreamLimitConfig struct {
	// Disabled keeps concurrency fixed whatever the provider answers.
	Disabled bool `yaml:"disabled"`
	// DecreaseFactor multiplies concurrency on a rate-limit signal, in
	// (0, 1). Zero means 0.5.
	DecreaseFactor float64 `yaml:"decrease_factor"`
	// Interval is both the shortest time between two decreases (the calls
	// in flight when the provider starts refusing all get refused; one
	// signal is enough) and the time between two +1 steps back up, counted
	// from the last decrease whether or not calls are answered meanwhile.
	// Zero means 1s; at most 1h.
	Interval Duration `yaml:"interval"`
}

// maxLimitInterval bounds upstream_limit.interval: at 1h, recovering 100
// slots already takes four days.
const maxLimitInterval = time.Hour

func (c UpstreamLimitConfig) validate() error {
	if !(c.DecreaseFactor >= 0 && c.DecreaseFactor < 1) { // NaN too
		return errorf("upstream_limit.decrease_factor: %v, want 0 ≤ f < 1 (0 means 0.5)", c.DecreaseFactor)
	}
	return durationIn("upstream_limit.interval", c.Interval, 0, maxLimitInterval)
}
