package chain

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// poolGate is what the route stage asks of a pool's gate: admission.Core
// in the simulator, admission.Gate in the gateway.
type poolGate interface {
	GateView
	calendarGate
	estimate(now time.Time, r admission.Request) (admission.Decision, error)
	// shed refuses every call queued at the gate (see admission.Core.Shed).
	shed(now time.Time, retry time.Duration)
}

type coreGate struct{ *admission.Core }

func (g coreGate) estimate(now time.Time, r admission.Request) (admission.Decision, error) {
	return g.Estimate(now, r)
}

func (g coreGate) shed(now time.Time, retry time.Duration) {
	g.Shed(now, admission.ReasonQueueWait, retry)
}

type realGate struct{ *admission.Gate }

// estimate asks the gate at its own clock: the gate's times are its own.
func (g realGate) estimate(_ time.Time, r admission.Request) (admission.Decision, error) {
	return g.Estimate(r)
}

func (g realGate) shed(_ time.Time, retry time.Duration) { g.Shed(admission.ReasonQueueWait, retry) }

// pool is one (deployment, model) pool: its gate, its buckets, its health,
// the output it has seen.
type pool struct {
	cfg  PoolConfig
	idx  int
	gate poolGate
	// rpm and tpm are nil without a limit, configured or learned.
	rpm, tpm atomic.Pointer[bucket]
	share    atomic.Uint64 // float64 bits: this replica's share of the limits (0: all)
	health   health
	// output is the mean output tokens of its calls (an EWMA), what a
	// call that names no max_tokens is charged against tpm.
	output struct {
		sync.Mutex
		mean float64
	}
}

// charge is what a call is charged against the pool's tokens per minute:
// its prompt plus its max_tokens — what the providers charge on arrival —
// or, without max_tokens, the output the pool's calls have produced.
func (p *pool) charge(r *Request) float64 {
	out := float64(r.MaxOutputTokens)
	if out <= 0 {
		p.output.Lock()
		out = p.output.mean
		p.output.Unlock()
		if out <= 0 {
			out = spend.DefaultOutputTokens
		}
	}
	return float64(max(r.InputTokens, 0)) + out
}

// refill is how long the pool's buckets take to refill one call's worth
// (tokens, and one request): the pace at which calls refused for them can
// be admitted again, which the retry calendar spreads their retries by.
func (p *pool) refill(tokens float64) time.Duration {
	var d time.Duration
	if b := p.tpm.Load(); b != nil {
		d = b.refill(tokens)
	}
	if b := p.rpm.Load(); b != nil {
		d = max(d, b.refill(1))
	}
	return d
}

// tokenWait is how long a call charged tokens must wait for the pool's
// buckets at now, taking nothing.
func (p *pool) tokenWait(now time.Time, tokens float64) time.Duration {
	var w time.Duration
	if b := p.tpm.Load(); b != nil {
		w = b.wait(now, tokens)
	}
	if b := p.rpm.Load(); b != nil {
		w = max(w, b.wait(now, 1))
	}
	return w
}

// health is a pool's passive health check: a deployment that cannot be
// reached, or that failed downCount calls in a row, is down. A down pool
// gets no calls but one probe per interval, the interval doubling on each
// failed probe up to a bound, until a call succeeds.
type health struct {
	mu       sync.Mutex
	fails    int
	down     bool
	probing  bool
	next     time.Time // the next probe, while down
	interval time.Duration
	// unreachable: the last failure was a connection failure — the
	// deployment is known dead, not failing calls it received.
	unreachable bool
}

// downCount is how many failed calls in a row take a pool down (a
// connection failure does at once).
const downCount = 3

// usable says whether the pool may take a call at now, and whether that
// call would be its probe.
func (h *health) usable(now time.Time) (ok, probe bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return true, false
	}
	if !h.probing && !now.Before(h.next) {
		return true, true
	}
	return false, false
}

// takeProbe makes the next call the probe; false when another took it.
func (h *health) takeProbe(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down || h.probing || now.Before(h.next) {
		return false
	}
	h.probing = true
	return true
}

// result books a call's outcome: ok, or a failure (unreachable: no
// connection could be made). A call whose outcome says nothing of the
// deployment (the caller left, a rate limit) is neither. It reports
// whether the outcome took the pool down: the calls queued for it are then
// sent elsewhere or refused (routeHold.book).
func (h *health) result(now time.Time, ok, unreachable, probe bool, base, most time.Duration) (wentDown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if probe {
		h.probing = false
	}
	if ok {
		h.fails, h.down, h.interval, h.unreachable = 0, false, 0, false
		return false
	}
	h.fails++
	h.unreachable = unreachable
	switch {
	case h.down && probe:
		h.interval = min(2*h.interval, most)
		h.next = now.Add(h.interval)
	case !h.down && (unreachable || h.fails >= downCount):
		h.down, h.interval = true, base
		h.next = now.Add(base)
		return true
	}
	return false
}

// dead says the pool is down and its deployment could not be reached at
// its last failure: a call sent there would not reach a provider.
func (h *health) dead() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down && h.unreachable
}

// untilProbe is how long, from now, until a down pool's next probe may be
// sent: when a call refused for it has a chance there again. Zero while up
// or when the probe is due.
func (h *health) untilProbe(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return 0
	}
	return max(h.next.Sub(now), 0)
}

// endProbe gives the probe back when its call said nothing of the
// deployment.
func (h *health) endProbe() {
	h.mu.Lock()
	h.probing = false
	h.mu.Unlock()
}

func (h *health) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}
