package gateway

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/spend"
)

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

func newAIMD(cfg config.UpstreamLimitConfig, ceiling int) *aimd {
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
		c.permit.ObserveLimits(wire.ProviderLimits(resp.Header))
	}
	p := g.poolOf(c)
	a, set := p.limit, p.set
	if a.off {
		return
	}
	limited := resp.StatusCode == http.StatusTooManyRequests || wire.Exhausted(resp.Header, c.charge)
	if n, _, lowered := a.next(now, limited, set); lowered {
		g.metrics.limitDecreases.Inc()
		g.log.Warn("the provider is rate limiting: concurrency lowered", "concurrency", n, "upstream", g.deploymentOf(c).name, "model", c.modelName())
	}
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
