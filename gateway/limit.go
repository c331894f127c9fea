package gateway

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adaptive"
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
//
// The configured concurrency is a ceiling the provider is trusted to
// honour until it says otherwise, and what it says is measured against
// the pool's own calls (see decide): a 429 lowers the level to 90% of the
// calls the pool had at the provider (the learner's rule,
// adaptive.Concurrency), and a remaining count at zero caps it at the
// calls the pool held. Halving on every signal instead (decrease_factor,
// now the fallback when the calls are not counted) took a pool told 32 in
// front of 16 slots that refuse beyond them to 8 on each signal, to saw
// between 8 and 16 at two thirds of the provider's capacity; now it holds
// at 15–16, at about 95% (TestConfiguredConcurrencyAboveARefusingProvider).
//
// A pool whose concurrency is learnt (config.Config.Learning) has a
// learner instead (package adaptive): the level is then the learner's,
// moved by every answer it is fed (observeLearned), and the AIMD above is
// not used.
type aimd struct {
	off      bool
	factor   float64
	interval time.Duration
	ceiling  int

	mu      sync.Mutex
	base    int       // the level right after the last decrease
	lowered time.Time // when; zero before any
	top     int       // the level before the last decrease an interval after the one before (decide)
	applied int       // the level last given to the gate
	settled int       // the part of it the gate's estimates count on, when learning

	learn *adaptive.Concurrency // nil: the configured concurrency
	// atProvider counts the pool's attempts sent and not yet answered,
	// when the concurrency adapts (learnt, or the AIMD on): the
	// concurrency each answer was measured at.
	atProvider int
}

// refusedShare is the share of the calls at the provider a 429 lowers
// the level to, in tenths: 90%, as the learner's (adaptive.Concurrency).
const refusedShare = 9

// signal is what one answer says of the provider's rate limits, to the
// AIMD: a 429 (refused) or a remaining count at zero on an answer it
// served (exhausted); the pool's calls at the provider, itself included,
// when the call was sent or when its answer came, whichever is more (zero
// when not counted: decrease_factor applies); when the call was sent;
// and, if not nil, the calls holding a slot of the pool's gate now.
type signal struct {
	refused, exhausted bool
	inFlight           int
	sent               time.Time
	holding            func() int
}

// newLimit is a pool's controller: the AIMD on the configured ceiling,
// or, when learn is not nil, a learner within its bounds from now.
func newLimit(cfg config.UpstreamLimitConfig, ceiling int, learn *adaptive.Config, now time.Time) (*aimd, error) {
	a := newAIMD(cfg, ceiling)
	if learn == nil {
		return a, nil
	}
	l, err := adaptive.New(*learn, now)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	a.learn, a.ceiling, a.base, a.applied, a.settled = l, learn.Max, l.Limit(), l.Limit(), l.Settled()
	return a, nil
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
	if a.learn != nil {
		return a.learn.Limit()
	}
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
// provider signalled its rate limit; false for no response at all), not
// knowing the concurrency the call was sent at: a signal lowers the level
// by decrease_factor. See decide.
func (a *aimd) next(now time.Time, limited bool, set func(int)) (level int, changed, lowered bool) {
	return a.decide(now, signal{refused: limited}, set)
}

// decide returns the concurrency at now after an answer saying sig,
// whether it differs from what the gate was last given (set, if not nil,
// is then called with it), and whether this signal lowered it.
//
// A 429 of a call with n calls at the provider (sig.inFlight) lowers the
// level to 90% of n. A remaining count at zero caps it at the calls
// holding a slot of the gate (sig.holding, at least n): the provider is
// full with what the pool holds, and climbing past it would be refused.
// Not at n: a call is counted off the provider when its answer's headers
// arrive, a moment before the provider frees its slot, so at its capacity
// the provider often says it is full with a call fewer counted at it —
// capped there, a pool told 32 held at 15 of 16 slots for seconds
// together — while it never counts more calls than hold a gate slot (a
// call leaves the gate after its answer's body). Nor below the factor
// times the level: a count at zero is a forecast, and the limit it
// forecasts may be a rate (requests or tokens a minute, which the pool's
// buckets pace) that the calls held at once say nothing of. Either is
// floored at 1, and only lowers: a signal of a call sent at a concurrency
// the level is already below changes nothing. Without n, either lowers
// the level by the factor.
//
// One decrease an interval: the calls in flight when the provider starts
// refusing are all refused, and one signal is enough. A refusal of a call
// sent after the last decrease is not one of them, though: sent at the
// lowered level, it says that level is still too high, and lowers it
// again at once (TCP's one cut a round trip, which an interval of 1s
// outlasts many times over at calls refused in milliseconds) — but no
// lower than the factor times the level before the interval's first
// decrease, which is where the factor alone would have put it: a provider
// whose slots are held by calls the pool no longer counts (their callers
// hung up, and it serves them out) refuses calls sent at a few, and would
// take the level to 1 within a millisecond.
func (a *aimd) decide(now time.Time, sig signal, set func(int)) (level int, changed, lowered bool) {
	if a.off || a.learn != nil {
		return a.ceiling, false, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	level = a.levelLocked(now)
	if (sig.refused || sig.exhausted) && level > 1 {
		due := a.lowered.IsZero() || now.Sub(a.lowered) >= a.interval
		again := !due && sig.refused && sig.inFlight > 0 && sig.sent.After(a.lowered)
		if due || again {
			to := a.target(level, sig)
			if again {
				to = max(to, int(float64(a.top)*a.factor))
			}
			if to = max(1, to); to < level {
				if due {
					a.top = level
				}
				level = to
				a.base, a.lowered = level, now
				lowered = level < a.applied
			}
		}
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

// target is where sig would take the level from level, before decide's
// floors: see decide.
func (a *aimd) target(level int, sig signal) int {
	n := sig.inFlight
	switch {
	case n <= 0:
		return int(float64(level) * a.factor)
	case sig.refused:
		return n * refusedShare / 10
	}
	if sig.holding != nil {
		n = max(n, sig.holding())
	}
	return max(n, int(float64(level)*a.factor))
}

// refresh applies the level at now to the gate (through set): the climb
// back up that accrued while no answer came. The gateway calls it before
// each admission, so the first request after a quiet spell is admitted
// against the recovered concurrency.
func (a *aimd) refresh(now time.Time, set func(int)) {
	if a.off || a.learn != nil {
		return
	}
	a.next(now, false, set)
}

// sending counts an attempt of call c sent to its pool's provider at
// now, for a concurrency that adapts (learnt, or configured with its AIMD
// on), and returns what observe needs of it.
func (g *Gateway) sending(now time.Time, c *call) sent {
	a := g.poolOf(c).limit
	if a.off && a.learn == nil {
		return sent{}
	}
	a.mu.Lock()
	a.atProvider++
	n := a.atProvider
	var w uint64
	if a.learn != nil {
		w = a.learn.Sent(now)
	}
	a.mu.Unlock()
	return sent{at: now, inFlight: n, window: w, units: c.permit.Units()}
}

// sent is an attempt as sending counted it: when, and the pool's
// attempts at the provider then, itself included (zero when the pool's
// concurrency does not adapt), the learner's window that counted it, and
// the call's expected work at its gate (adaptive.Sample).
type sent struct {
	at       time.Time
	inFlight int
	window   uint64
	units    float64
}

// observe feeds one upstream answer (nil after a transport error) of call
// c, sent as s, to the concurrency controller of its pool, and the
// provider's rate-limit counts to its pool's buckets.
func (g *Gateway) observe(s sent, now time.Time, resp *http.Response, c *call) {
	p := g.poolOf(c)
	a, set := p.limit, p.set
	n := s.inFlight
	if n > 0 {
		if a.learn != nil {
			g.observeLearned(s, now, resp, c)
		} else {
			// The calls at the provider: when this one was sent or when
			// its answer came, whichever is more. A 429 comes back at
			// once, and every call the provider was serving when it
			// refused is still there: a burst sent together counts them
			// all, where the count at each send is its rank in the burst,
			// not the order the provider took them in.
			a.mu.Lock()
			n = max(n, a.atProvider)
			a.atProvider--
			a.mu.Unlock()
		}
	}
	if resp == nil {
		return
	}
	if c != nil {
		c.permit.ObserveLimits(wire.ProviderLimits(resp.Header))
	}
	if a.off {
		return
	}
	if a.learn != nil {
		return // observeLearned has
	}
	sig := signal{refused: resp.StatusCode == http.StatusTooManyRequests, inFlight: n, sent: s.at}
	sig.exhausted = !sig.refused && wire.Exhausted(resp.Header, c.charge)
	if g.books.Lease() != nil {
		// Replicas sharing the provider (store.redis): the level is the
		// fleet's, and this replica's calls are no count of the fleet's.
		sig.inFlight = 0
	} else if sig.exhausted && n > 0 {
		sig.holding = func() int { return p.info.Gate.Stats().InFlight }
	}
	if level, _, lowered := a.decide(now, sig, set); lowered {
		g.metrics.limitDecreases.Inc()
		g.log.Warn("the provider is rate limiting: concurrency lowered", "concurrency", level, "upstream", g.deploymentOf(c).name, "model", c.modelName())
	}
}

// observeLearned feeds the answer to the learner of c's pool, under its
// lock, and gives the gate the limit it returns, with the part of it the
// learner has measured, which the gate's estimates count on
// (adaptive.Concurrency.Settled): its latency when a 2xx
// (to the headers: for a stream, the provider's queue and the first
// token), a 429 as a refusal, a remaining count at zero as the provider
// at its limit; nothing else times the provider's queue.
func (g *Gateway) observeLearned(s sent, now time.Time, resp *http.Response, c *call) {
	p := g.poolOf(c)
	a := p.limit
	smp := adaptive.Sample{Sent: s.at, Answered: now, InFlight: s.inFlight, Window: s.window, Units: s.units}
	switch {
	case resp == nil:
		smp.Failed = true
	case resp.StatusCode == http.StatusTooManyRequests:
		smp.Refused = true
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		smp.Failed = true
	default:
		smp.Exhausted = wire.Exhausted(resp.Header, c.charge)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.atProvider--
	before := a.learn.State()
	n := a.learn.Observe(now, smp)
	settled := a.learn.Settled()
	if n == a.applied && settled == a.settled {
		return
	}
	a.applied, a.settled = n, settled
	p.trial(n, settled)
	if n < before.Limit {
		g.metrics.limitDecreases.Inc()
	}
	after := a.learn.State()
	if after.Slowdowns > before.Slowdowns || after.Refusals > before.Refusals {
		g.log.Info("learnt concurrency", "concurrency", n, "was", before.Limit, "phase", after.Phase.String(),
			"baseline", after.Baseline, "refusals", after.Refusals, "slowdowns", after.Slowdowns,
			"upstream", g.deploymentOf(c).name, "model", c.modelName())
	}
}

// learnedCollector exports the learnt concurrency of each pool that
// learns it, with what the learner estimates.
type learnedCollector struct {
	g                                     *Gateway
	limit, baseline, queue, capacity, min *prometheus.Desc
	max                                   *prometheus.Desc
}

func newLearnedCollector(g *Gateway) *learnedCollector {
	l := []string{"pool", "deployment", "model"}
	return &learnedCollector{g: g,
		limit:    prometheus.NewDesc("sluice_concurrency_learned", "A pool's concurrency learnt from the provider's answers (only pools without a configured concurrency, or with admission.learn).", l, nil),
		min:      prometheus.NewDesc("sluice_concurrency_learned_min", "The learnt concurrency's floor (admission.learn.min).", l, nil),
		max:      prometheus.NewDesc("sluice_concurrency_learned_max", "The learnt concurrency's ceiling (admission.learn.max, capped by a configured concurrency).", l, nil),
		baseline: prometheus.NewDesc("sluice_provider_baseline_seconds", "The provider's latency without a queue, as the learner last measured it.", l, nil),
		queue:    prometheus.NewDesc("sluice_provider_queue_estimated", "The calls the learner estimates waiting at the provider (Little's law against the baseline), over its last window.", l, nil),
		capacity: prometheus.NewDesc("sluice_provider_capacity_estimated", "The provider's concurrency the learner estimates: the concurrency used less the estimated queue.", l, nil),
	}
}

func (lc *learnedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lc.limit, lc.min, lc.max, lc.baseline, lc.queue, lc.capacity} {
		ch <- d
	}
}

func (lc *learnedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ls := range lc.g.learnedStates() {
		l := []string{ls.Pool, ls.Deployment, ls.Model}
		ch <- prometheus.MustNewConstMetric(lc.limit, prometheus.GaugeValue, float64(ls.Concurrency), l...)
		ch <- prometheus.MustNewConstMetric(lc.min, prometheus.GaugeValue, float64(ls.Min), l...)
		ch <- prometheus.MustNewConstMetric(lc.max, prometheus.GaugeValue, float64(ls.Max), l...)
		ch <- prometheus.MustNewConstMetric(lc.baseline, prometheus.GaugeValue, float64(ls.BaselineMs)/1000, l...)
		ch <- prometheus.MustNewConstMetric(lc.queue, prometheus.GaugeValue, ls.Queue, l...)
		ch <- prometheus.MustNewConstMetric(lc.capacity, prometheus.GaugeValue, ls.Capacity, l...)
	}
}

// LearnedState is a pool's learnt concurrency in the state dump
// (State.Learned).
type LearnedState struct {
	Pool        string `json:"pool"`
	Deployment  string `json:"deployment"`
	Model       string `json:"model"`
	Concurrency int    `json:"concurrency"`
	Min         int    `json:"min"`
	Max         int    `json:"max"`
	// Phase is starting (a slow start), tracking or probing (lowered for
	// a window to measure the provider without a queue).
	Phase string `json:"phase"`
	// BaselineMs is the provider's latency without a queue, LatencyMs the
	// last window's mean, Queue and Capacity what it estimated of the
	// provider (see adaptive.State).
	BaselineMs int64   `json:"baseline_ms"`
	LatencyMs  int64   `json:"latency_ms"`
	Queue      float64 `json:"queue"`
	Capacity   float64 `json:"capacity"`
	Windows    uint64  `json:"windows"`
	Cuts       uint64  `json:"cuts"`
	Refusals   uint64  `json:"refusals"`
	Slowdowns  uint64  `json:"slowdowns"`
}

// learnedStates is the state of every pool that learns its concurrency.
func (g *Gateway) learnedStates() []LearnedState {
	var out []LearnedState
	for _, p := range g.pools {
		a := p.limit
		if a.learn == nil {
			continue
		}
		a.mu.Lock()
		st, cfg := a.learn.State(), a.learn.Config()
		a.mu.Unlock()
		out = append(out, LearnedState{Pool: p.info.Name, Deployment: p.info.Deployment, Model: p.info.Model,
			Concurrency: st.Limit, Min: cfg.Min, Max: cfg.Max, Phase: st.Phase.String(),
			BaselineMs: st.Baseline.Milliseconds(), LatencyMs: st.Latency.Milliseconds(),
			Queue: round2(st.Queue), Capacity: round2(st.Capacity),
			Windows: st.Windows, Cuts: st.Cuts, Refusals: st.Refusals, Slowdowns: st.Slowdowns})
	}
	return out
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

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
