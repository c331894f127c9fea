package gateway

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/spend"
)

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

// aimd is the concurrency controller. Time is an input. It holds its own
// lock while it gives the gate a new level (the gate never calls back), so
// that two answers racing cannot leave the gate at the older of two levels.
//
// Its state is the level set by the last decrease and when: the level at
// any later time is that plus one per whole interval, up to the ceiling.
// Deriving the level from the clock rather than stepping it on each answer
// is what lets it recover while idle, with no goroutine of its own: the
// gateway applies it lazily, on each answer and before each admission.
type aimd struct {
	off      bool
	factor   float64
	interval time.Duration
	ceiling  int

	mu      sync.Mutex
	base    int       // the level right after the last decrease
	lowered time.Time // when; zero before any
	applied int       // the level last given to the gate
}

func newAIMD(cfg UpstreamLimitConfig, ceiling int) *aimd {
	a := &aimd{off: cfg.Disabled, factor: cfg.DecreaseFactor, interval: cfg.Interval.D(), ceiling: ceiling, base: ceiling, applied: ceiling}
	if a.factor == 0 {
		a.factor = 0.5
	}
	if a.interval == 0 {
		a.interval = time.Second
	}
	return a
}

// levelLocked is the concurrency at now: the base plus one per whole
// interval since the last decrease, at most the ceiling.
func (a *aimd) levelLocked(now time.Time) int {
	if a.lowered.IsZero() || a.base >= a.ceiling {
		return a.ceiling
	}
	steps := now.Sub(a.lowered) / a.interval // ≥ 0 unless the clock went back
	if steps <= 0 {
		return a.base
	}
	if steps >= time.Duration(a.ceiling-a.base) {
		return a.ceiling
	}
	return a.base + int(steps)
}

// next returns the concurrency at now after a response (limited says the
// provider signalled its rate limit; false for no response at all), whether
// it differs from what the gate was last given (set, if not nil, is then
// called with it), and whether this signal lowered it.
func (a *aimd) next(now time.Time, limited bool, set func(int)) (level int, changed, lowered bool) {
	if a.off {
		return a.ceiling, false, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	level = a.levelLocked(now)
	// One decrease an interval: the calls that were in flight when the
	// provider started refusing are all refused, and one signal is enough.
	if limited && level > 1 && (a.lowered.IsZero() || now.Sub(a.lowered) >= a.interval) {
		level = max(1, int(float64(level)*a.factor))
		a.base, a.lowered = level, now
		lowered = level < a.applied
	}
	if level == a.applied {
		return level, false, lowered
	}
	a.applied = level
	if set != nil {
		set(level)
	}
	return level, true, lowered
}

// refresh applies the level at now to the gate (through set): the climb
// back up that accrued while no answer came. The gateway calls it before
// each admission, so the first request after a quiet spell is admitted
// against the recovered concurrency.
func (a *aimd) refresh(now time.Time, set func(int)) {
	if a.off {
		return
	}
	a.next(now, false, set)
}

// observe feeds one upstream answer (nil after a transport error) of call
// c to the concurrency controller of its pool, and the provider's
// rate-limit counts to its pool's buckets.
func (g *Gateway) observe(now time.Time, resp *http.Response, c *call) {
	if resp == nil {
		return
	}
	if c != nil {
		c.permit.ObserveLimits(providerLimits(resp.Header))
	}
	p := g.poolOf(c)
	a, set := p.limit, p.set
	if a.off {
		return
	}
	limited := resp.StatusCode == http.StatusTooManyRequests || exhausted(resp.Header, c.charge)
	if n, _, lowered := a.next(now, limited, set); lowered {
		g.metrics.limitDecreases.Inc()
		g.log.Warn("the provider is rate limiting: concurrency lowered", "concurrency", n, "upstream", g.deploymentOf(c).name, "model", c.modelName())
	}
}

// remainingHeaders are the providers' counts of what is left of a rate
// limit: OpenAI's x-ratelimit-remaining-*, and Anthropic's
// anthropic-ratelimit-*-remaining (tokens, and input and output tokens
// apart). tokens says the count is of tokens.
var remainingHeaders = []struct {
	name   string
	tokens bool
}{
	{"x-ratelimit-remaining-requests", false}, {"x-ratelimit-remaining-tokens", true},
	{"anthropic-ratelimit-requests-remaining", false}, {"anthropic-ratelimit-tokens-remaining", true},
	{"anthropic-ratelimit-input-tokens-remaining", true}, {"anthropic-ratelimit-output-tokens-remaining", true},
}

// exhausted reports that the provider's next call like this one will be
// refused: a remaining-requests or -tokens header at zero, or remaining
// tokens fewer than this call was charged (charge, when not nil and
// positive: its estimated prompt plus its max_tokens, which is what the
// providers charge a call on arrival). The gate then slows down before the
// 429 rather than after it.
func exhausted(h http.Header, charge func() int64) bool {
	need := int64(-1) // not computed yet
	for _, r := range remainingHeaders {
		v := h.Get(r.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		if n <= 0 {
			return true
		}
		if r.tokens && charge != nil {
			if need < 0 {
				need = charge()
			}
			if n < need {
				return true
			}
		}
	}
	return false
}

// charge is what a provider charges the call against a tokens-per-minute
// limit when it arrives: its prompt, estimated, plus its max_tokens. It is
// 0 when the call names no max_tokens (the provider's own default is not
// known) or for a call outside the gateway (c nil).
func (c *call) charge() int64 {
	if c == nil || c.maxTokens <= 0 {
		return 0
	}
	return spend.EstimateInputTokens(c.body) + c.maxTokens
}
