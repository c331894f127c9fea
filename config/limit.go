package config

import "time"

// UpstreamLimitConfig adapts the gate's configured concurrency to the
// provider's rate limits. The configured concurrency is a ceiling the
// provider is trusted to honour until it says otherwise: a 429 lowers
// the concurrency to 90% of the pool's calls at the provider when the
// refused call was sent (or when its refusal came back, if more were
// there then), and a remaining-requests or -tokens header at zero
// (OpenAI's x-ratelimit-remaining-* or Anthropic's
// anthropic-ratelimit-*-remaining; tokens below what the call was
// charged) caps it at the calls holding a slot of the gate then — the
// provider says it is full with them — but no lower than DecreaseFactor
// times the concurrency. It climbs back additively, one slot per interval
// since the last decrease, up to admission.concurrency — the AIMD rule
// TCP uses, so that the gate's wait estimates and refusals stay honest
// while capacity shrinks. The climb is counted in time, not in answers:
// after a storm of 429s and no traffic the gate is back at
// admission.concurrency (ceiling − lowered) × interval later, instead of
// staying low because nothing was sent to show the provider had
// recovered.
//
// A pool told 32 in front of a provider of 16 slots that refuses beyond
// them holds at 15–16 this way, at about 95% of the provider's capacity
// with under 1% of its calls refused; halving on every signal, as it did
// before, it sawed between 8 and 16 at about two thirds
// (gateway.TestConfiguredConcurrencyAboveARefusingProvider).
type UpstreamLimitConfig struct {
	// Disabled keeps concurrency fixed whatever the provider answers.
	Disabled bool `yaml:"disabled"`
	// DecreaseFactor, in (0, 1), is the fallback and the floor of the
	// decreases above. A rate-limit signal multiplies concurrency by it
	// when the pool's calls are not counted (replicas sharing one
	// concurrency through store.redis, whose own calls are no count of the
	// fleet's). A remaining count at zero lowers it no further: the count
	// is a forecast, and may be of a limit per minute, which the calls held
	// at once say nothing of (the pool's buckets pace those). And a
	// refusal of a call sent after a decrease, at the lowered level,
	// lowers it again at once, within the interval, but no further than
	// DecreaseFactor times the level before the interval's first
	// decrease: a provider still busy with calls whose callers hung up
	// refuses calls sent at a few. Zero means 0.5.
	DecreaseFactor float64 `yaml:"decrease_factor"`
	// Interval is both the shortest time between two decreases (the calls
	// in flight when the provider starts refusing all get refused; one
	// signal is enough, unless a call sent after it is refused too) and
	// the time between two +1 steps back up, counted from the last
	// decrease whether or not calls are answered meanwhile. Zero means
	// 1s; at most 1h.
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
