package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Sample is one answer of the provider, as the shell saw it.
type Sample struct {
	// Sent is when the attempt was sent, Answered when its answer's
	// headers came back: the latency is the difference.
	Sent, Answered time.Time
	// InFlight is the pool's attempts at the provider once this one was
	// sent, itself included: the concurrency the answer was measured at.
	InFlight int
	// Refused: the provider refused the call for its limits (a 429).
	Refused bool
	// Exhausted: the provider said its next call would be refused (a
	// remaining-requests or -tokens header at zero, see
	// wire.Exhausted).
	Exhausted bool
	// Failed: no answer worth timing (a 5xx, a transport error). It says
	// nothing about the provider's queue and is not counted.
	Failed bool
	// Window is what Sent returned when the call was sent: the window
	// that counts it among the calls it measures, zero when none did.
	// Only the calls a window counted are measured by it.
	Window uint64
	// Units is the call's expected time as a share of the mean call's:
	// the gate's estimate by the call's shape (admission's units of
	// work, Decision.Units). A window's latency is its latencies' sum
	// over their units' sum, the latency of a call of the mean time — so
	// that a window of more long answers than the last does not read as
	// a queue, while a provider slowed for every call reads slowed: the
	// units are a share of a mean that slows with it. Zero means 1.
	Units float64
}

// Phase is what the controller is doing.
type Phase uint8

const (
	// Starting: multiplying the limit by 1.5 a window until the
	// provider's queue shows (a slow start, as TCP's).
	Starting Phase = iota
	// Tracking: holding the estimated queue at the provider between two
	// small bounds, one slot a window up, straight to the estimate down.
	Tracking
	// Probing: the limit is lowered for one window to measure the
	// provider's latency without a queue (the baseline).
	Probing
)

func (p Phase) String() string {
	switch p {
	case Starting:
		return "starting"
	case Tracking:
		return "tracking"
	case Probing:
		return "probing"
	}
	return fmt.Sprintf("Phase(%d)", p)
}

// State is what the controller knows, for the dashboard and the state dump.
type State struct {
	Limit int
	Phase Phase
	// Baseline is the provider's latency without a queue, as last
	// measured; zero before the first window.
	Baseline time.Duration
	// Latency is the mean latency of the last window, Queue the calls
	// it estimated waiting at the provider (Little's law against the
	// baseline) and Capacity the provider's concurrency it estimated:
	// the concurrency used less Queue.
	Latency  time.Duration
	Queue    float64
	Capacity float64
	// Windows counts the windows closed; Cuts the decreases for a queue,
	// Refusals those for the provider's refusals, Slowdowns the times a
	// decrease did not shorten the latency and the baseline was moved
	// instead (the provider got slower, not queued).
	Windows, Cuts, Refusals, Slowdowns uint64
}

// Concurrency learns the provider's concurrency from its answers: how
// many calls a pool may have at the provider at once, within Config's
// bounds. Time is an input: the shell feeds it each answer and the time,
// and applies the limit it returns; it starts nothing and reads no clock.
// Not safe for concurrent use: the shell serialises its calls.
//
// The signal is Little's law. At a concurrency L the provider answers X
// calls a second after a latency R = L/X; below its capacity c, R is its
// latency without a queue, the baseline B, and X grows with L; above it X
// stays at c/B and R grows with L: the calls beyond c wait at the
// provider. So L·(1 − B/R) estimates the calls waiting there and L·B/R the
// capacity (TCP Vegas's estimate, and Netflix's VegasLimit). The
// controller keeps that queue between alpha and beta (one to four calls
// at small limits, a few percent of the limit at large ones): enough that
// the provider never idles between two calls, few enough that a call
// waits there no more than a fraction of a call.
//
// Everything is measured over windows of answers (at least 24, and twice
// the limit), because an LLM's latencies vary several-fold from call to
// call: a window's mean is within about 10% of the truth. A window is the
// calls sent after the limit last changed — the first of them, as many
// as it needs (Sent says which) — and it closes once every one of them
// has answered: closed at its first answers instead, it would hold the
// short calls of its sends and miss the long ones still running, and a
// provider whose answers run from a tenth of a second to two seconds
// would read fast after every change and slow in between. Each answer's
// latency counts in units of its expected time (Sample.Units), so that
// a window of more long answers than the last is no queue.
//
// The baseline is the lowest window mean (plus its standard error, which
// keeps the minimum of noisy means from drifting low) since the last
// probe: every probeEvery windows the limit is lowered to three quarters
// of the estimated capacity for one window, which measures the provider
// without a queue (Envoy's gradient controller measures its minRTT the
// same way). Between probes, a decrease that does not shorten the
// latency as a queue's would tells that the provider got slower rather
// than fuller: the baseline moves to the new latency and the limit goes
// back (the capacity in calls did not change; the time per call did).
//
// A refusal (429) lowers the limit to 90% of the concurrency it was sent
// at, at most once a baseline; a remaining count at zero stops it rising
// for a second (or a baseline, if longer). Neither is the queue's signal, and both
// are faster: a provider that refuses rather than queues is found by them.
type Concurrency struct {
	cfg       Config
	limit     float64
	phase     Phase
	changed   time.Time // samples sent before are of an earlier limit
	base      time.Duration
	last      State
	lastCut   time.Time // the last decrease for a refusal
	w         window
	nw        window // the next window, taking calls while w waits for answers
	windows   int    // since the last probe
	resume    float64
	cut       *cut
	grown     int       // windows in a row that raised the limit
	heldUntil time.Time // no increase before (an exhausted answer)
	recent    recent    // the slow start's last answers
	ids       uint64    // the windows numbered so far
	// mixed: the answers have come in different sizes (Sample.Units):
	// windows are then of the calls they sent (Sent, Sample.Window).
	mixed bool
	// rebase: the next probe's baseline replaces the one before (the
	// answers turned out mixed, see Observe).
	rebase bool
}

// recent is a ring of the last minEarlyWindow answers of the slow start:
// what the limit reached in the last round trip, which a whole window,
// most of it answers to calls sent at lower limits, tells late.
type recent struct {
	n        int
	lat      [minEarlyWindow]float64 // seconds
	units    [minEarlyWindow]float64
	inflight [minEarlyWindow]float64
}

func (r *recent) add(lat, units float64, inflight int) {
	i := r.n % minEarlyWindow
	r.lat[i], r.units[i], r.inflight[i] = lat, units, float64(inflight)
	r.n++
}

// cut is a decrease for a queue, remembered until the next window tells
// whether it shortened the latency.
type cut struct {
	limit, inflight float64
	latency         time.Duration
	// queue: a window at a quarter or more below inflight showed the
	// latency falling with it; the run is a queue's, and cuts may go
	// to the capacity estimated.
	queue bool
}

// window accumulates the samples of one window.
type window struct {
	// id is the window's number (Sent), sends the calls it counted and
	// answered how many of them answered; lastSend is when it counted
	// its last.
	id              uint64
	sends, answered int
	lastSend        time.Time
	n               int
	sum             float64 // latency, seconds
	units           float64 // the samples' units (Sample.Units)
	// norm and normSq sum each latency over its units, and the squares:
	// the spread of a window whose mean is sum over units.
	norm, normSq       float64
	inflight           float64 // sum of InFlight
	maxInflight        int
	exhausted, refused bool
	from               float64 // the limit at its first answer
}

// Tuning. Windows of at least minWindow answers and twice the limit; a
// probe every probeEvery windows at probeShare of the estimated capacity;
// a slow start of growth a window; decrease on a refusal to refuseShare.
const (
	minWindow = 24
	// minEarlyWindow is the fewest answers a slow start's window closes
	// on early, for a queue beyond doubt (queueShows): at a coefficient
	// of variation of 0.5, sixteen answers tell a latency 30% above the
	// baseline from it. Eight, tried, closed windows on a few slow calls
	// of a provider that had no queue.
	minEarlyWindow = 16
	probeEvery     = 20
	probeShare     = 0.75
	growth         = 1.5
	refuseShare    = 0.9
)

// New returns a controller at cfg.Initial (cfg with its defaults, see
// Config.WithDefaults), starting at now.
func New(cfg Config, now time.Time) (*Concurrency, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("adaptive: %w", err)
	}
	cfg = cfg.WithDefaults(0)
	return &Concurrency{cfg: cfg, limit: float64(cfg.Initial), changed: now, last: State{Limit: cfg.Initial}}, nil
}

// Limit is the concurrency to run at.
func (c *Concurrency) Limit() int { return int(c.limit) }

// Settled is the part of Limit the controller has measured: while
// Starting, the limit its current window started at (the slow start's
// growth since is being tried, and a round trip may take it past the
// provider's capacity); otherwise the limit. A gate sends calls up to
// Limit and promises waits at Settled (admission.Core.SetTrialConcurrency).
func (c *Concurrency) Settled() int {
	if c.phase == Starting && c.w.n > 0 {
		return max(1, min(int(c.w.from), c.Limit()))
	}
	return c.Limit()
}

// Config is the controller's bounds, with their defaults.
func (c *Concurrency) Config() Config { return c.cfg }

// State is what the controller knows now.
func (c *Concurrency) State() State {
	s := c.last
	s.Limit, s.Phase, s.Baseline = c.Limit(), c.phase, c.base
	return s
}

// SetMax changes the ceiling (a reloaded admission.concurrency): the
// limit is cut to it at once, and climbs no higher.
func (c *Concurrency) SetMax(now time.Time, n int) {
	c.cfg.Max = max(1, n)
	c.cfg.Min = min(c.cfg.Min, c.cfg.Max)
	if c.limit > float64(c.cfg.Max) {
		c.set(now, float64(c.cfg.Max))
	}
	c.resume = min(c.resume, float64(c.cfg.Max))
}

// Sent counts a call sent to the provider at now, and returns the
// window that measures it, zero when none does: the shell gives it back
// with the call's answer (Sample.Window). The current window counts the
// first calls sent after it opened, as many as it needs.
func (c *Concurrency) Sent(now time.Time) uint64 {
	if !c.mixed || now.Before(c.changed) {
		return 0 // calls of one size, or sent at an earlier limit
	}
	w := &c.w
	if w.id != 0 && w.sends >= c.need() {
		// The current window has all its calls: the next one takes
		// the calls sent while it waits for their answers.
		w = &c.nw
		if w.sends >= c.need() {
			return 0
		}
	}
	if w.id == 0 {
		c.ids++
		w.id, w.from = c.ids, c.limit
	}
	w.sends++
	w.lastSend = now
	return w.id
}

// need is how many answers a window measures. Starting, twice the
// limit: the queue shows soon enough. Tracking and probing, four times:
// a queue of two calls at a limit of sixteen is a latency 12% above the
// baseline, which needs about a hundred answers to tell from the noise.
func (c *Concurrency) need() int {
	if c.phase == Starting {
		return max(minWindow, int(2*c.limit))
	}
	return max(minWindow, int(4*c.limit))
}

// Observe feeds one answer at now and returns the limit after it.
func (c *Concurrency) Observe(now time.Time, s Sample) int {
	units := s.Units
	if !(units > 0) || math.IsInf(units, 0) {
		units = 1
	}
	if !c.mixed && math.Abs(units-1) > 0.01 {
		// The first answer of a size of its own: from now on, windows
		// of the calls they sent (see Concurrency).
		c.mixed = true
		c.w, c.nw = window{}, window{}
		c.changed = now
		// The baseline was read off windows of their first answers,
		// low by the long answers they missed: measured again by the
		// next probe, due now (or as soon as the slow start ends), and
		// replaced, not averaged with.
		c.windows = probeEvery
		c.rebase = true
	}
	var w *window
	if c.mixed {
		if w = c.windowOf(s.Window); w != nil {
			w.answered++
		}
	}
	if s.Failed {
		c.closeIfDone(now)
		return c.Limit()
	}
	if s.Refused {
		c.refused(now, s)
		if c.w.id == s.Window {
			c.closeIfDone(now)
		}
		return c.Limit()
	}
	if s.Sent.Before(c.changed) {
		return c.Limit() // measured at an earlier limit
	}
	if c.phase == Probing && float64(s.InFlight) > c.limit {
		return c.Limit()
	}
	if s.Exhausted {
		// The provider is at its limit at this concurrency: no higher,
		// for a while. Holding rather than cutting keeps a provider that
		// reports its headroom (remaining at zero on the call that took
		// its last slot) at its capacity; the count the shell keeps runs
		// a little behind the provider's own (a call is counted out when
		// its answer's headers arrive, before the provider frees its
		// slot), so the concurrency it was sent at is no bound to cut to.
		c.heldUntil = now.Add(max(c.base, time.Second))
		c.w.exhausted = true
	}
	lat := max(s.Answered.Sub(s.Sent), 0).Seconds()
	if !c.mixed {
		// Calls of one size: a window is every answer to a call sent
		// since the limit changed, closed at the first it needs.
		w = &c.w
		if w.n == 0 {
			w.from = c.limit
		}
	}
	if w != nil {
		w.n++
		w.sum += lat
		w.units += units
		w.norm += lat / units
		w.normSq += (lat / units) * (lat / units)
		w.inflight += float64(s.InFlight)
		w.maxInflight = max(w.maxInflight, s.InFlight)
	}
	need := c.need() // before the slow start grows the limit
	if c.phase == Starting {
		c.recent.add(lat, units, s.InFlight)
		last := c.recent.stats()
		c.start(now, s, last)
		if inflight, rtt, ok := c.recentQueue(last); ok {
			c.endStart(now, inflight, rtt)
			return c.Limit()
		}
	}
	if c.phase == Starting && c.w.n > 0 && c.queueShows(&c.w) {
		c.close(now)
		return c.Limit()
	}
	if !c.mixed {
		if c.w.n >= need {
			c.close(now)
		}
		return c.Limit()
	}
	if c.phase == Starting && c.nw.n > 0 && c.queueShows(&c.nw) {
		// The next window's answers so far, sent while the current one
		// waits for its slowest: the latest concurrency's, which the
		// current window, all of whose calls are out, cannot see.
		c.w, c.nw = c.nw, window{}
		c.close(now)
		return c.Limit()
	}
	c.closeIfDone(now)
	return c.Limit()
}

// windowOf is the window of that number, the current one or the next; nil
// for a window discarded (the limit changed since its calls were sent)
// or none.
func (c *Concurrency) windowOf(id uint64) *window {
	switch {
	case id == 0:
		return nil
	case id == c.w.id:
		return &c.w
	case id == c.nw.id:
		return &c.nw
	}
	return nil
}

// closeIfDone closes the window once every call it counted has answered,
// or, should an answer never come (a shell that lost one), once its last
// call has been out staleWindow.
func (c *Concurrency) closeIfDone(now time.Time) {
	if !c.mixed {
		return
	}
	w := &c.w
	if w.sends < c.need() || w.n == 0 {
		return
	}
	if w.answered >= w.sends || now.Sub(w.lastSend) > staleWindow {
		c.close(now)
	}
}

// staleWindow is how long a window waits for its last answers before it
// closes without them: longer than any answer a provider's headers take.
const staleWindow = 5 * time.Minute

// start is the slow start's growth, clocked by the answers as TCP's is
// by its acknowledgements: each answer to a call sent while the limit
// was in use (at least half of it at the provider: TCP's test that the
// window, not the sender, limits the flow) raises the limit by half a
// slot, so that a limit's worth of answers — one round trip — multiplies
// it by 1.5. Growing once a window instead would wait for a window of
// answers at each step, two round trips and at least minWindow answers
// (six round trips at the initial 4), and then one more for the calls
// sent before the step to come back: about four seconds to reach 16
// slots at 200 ms calls, against one. The window goes on across these
// steps (Sample.InFlight says what each answer was measured at), and it
// may at most double the limit it started at, so that the first window
// — the baseline — is measured at no more than twice the initial limit.
func (c *Concurrency) start(now time.Time, s Sample, last ringStats) {
	if s.Exhausted || now.Before(c.heldUntil) || 2*s.InFlight < int(c.limit) {
		return
	}
	step := growth - 1
	if base := c.slowStartBase(); last.full && base > 0 && last.mean-last.se > base.Seconds() {
		// The last answers' latency is up, within their noise: a queue
		// may be starting. A quarter of the growth, until it shows or
		// the window closes (HyStart++'s conservative slow start).
		step /= 4
	}
	from := c.w.from
	if c.mixed && c.last.Windows == 0 {
		// The first window, the baseline, closes once its slowest
		// answer is in: until then, from the next window's start,
		// which opened when the first had its calls.
		from = max(from, c.nw.from)
	}
	if from == 0 {
		from = c.limit // no window opened since the limit changed
	}
	c.limit = min(c.limit+step, 2*from, float64(c.cfg.Max))
}

// queueShows says whether the window so far, started while Starting,
// already shows a queue at the provider beyond doubt: at least
// minEarlyWindow answers, a mean latency above the baseline by more than
// two standard errors, and a Vegas estimate past twice beta (which a
// whole window would act on at once too). Growing by the
// answer, the limit passes the provider's capacity by half again within a
// round trip, and waiting for a whole window there would let it grow on
// (TCP's HyStart leaves its slow start on a rise in delay for the same
// reason).
func (c *Concurrency) queueShows(w *window) bool {
	if c.base == 0 || w.n < minEarlyWindow {
		return false
	}
	n := float64(w.n)
	mean, se := w.stats()
	if mean-2*se <= c.base.Seconds() {
		return false
	}
	inflight := w.inflight / n
	return inflight*(1-c.base.Seconds()/mean) > 2*(3+c.limit/32)
}

// recentQueue says whether the slow start's last minEarlyWindow answers
// alone show a queue at the provider beyond their noise (a mean latency
// two standard errors above the baseline and a Vegas estimate past beta),
// and returns the concurrency they were sent at and their mean latency.
// They are the last round trip's: a window, most of whose answers are to
// calls sent at lower limits, shows the queue a round trip later, while
// the limit grows by half again (HyStart's per-round test of the delay,
// for the same reason).
func (c *Concurrency) recentQueue(last ringStats) (inflight float64, rtt time.Duration, ok bool) {
	base := c.slowStartBase().Seconds()
	if base == 0 || !last.full {
		return 0, 0, false
	}
	ok = last.mean-2*last.se > base && last.inflight*(1-base/last.mean) > 3+c.limit/32
	return last.inflight, seconds(last.mean), ok
}

// slowStartBase is the baseline the slow start's tests go by: the
// baseline, or, before the first window has closed — it waits for its
// slowest answers, while the growth goes on — its answers so far, once it
// has minWindow of them, sent at the few calls the slow start began with.
func (c *Concurrency) slowStartBase() time.Duration {
	if c.base > 0 {
		return c.base
	}
	if c.mixed && c.last.Windows == 0 && c.w.n >= minWindow {
		mean, se := c.w.stats()
		return seconds(mean + se)
	}
	return 0
}

// ringStats are the ring's mean latency (seconds), its standard error and
// the mean concurrency its answers were sent at; full says it holds
// minEarlyWindow answers (the others are zero until it does).
type ringStats struct {
	mean, se, inflight float64
	full               bool
}

func (r *recent) stats() ringStats {
	if r.n < minEarlyWindow {
		return ringStats{}
	}
	var w window
	for i := range minEarlyWindow {
		w.n++
		w.sum += r.lat[i]
		w.units += r.units[i]
		w.norm += r.lat[i] / r.units[i]
		w.normSq += (r.lat[i] / r.units[i]) * (r.lat[i] / r.units[i])
		w.inflight += r.inflight[i]
	}
	mean, se := w.stats()
	return ringStats{mean: mean, se: se, inflight: w.inflight / minEarlyWindow, full: true}
}

// endStart ends the slow start on its last answers' queue (recentQueue):
// the limit goes to the capacity they estimate plus the queue tracked,
// but not below the limit the window started at, which the window
// before measured: sixteen answers are too few to cut by (the tracking
// windows that follow, of four limits' answers, will if they must).
func (c *Concurrency) endStart(now time.Time, inflight float64, rtt time.Duration) {
	c.last.Windows++
	c.last.Latency = rtt
	c.last.Cuts++
	q := c.estimate(inflight, rtt)
	c.phase, c.grown, c.cut = Tracking, 0, nil
	c.windows++
	c.set(now, max(float64(c.cfg.Min), min(c.limit, max(c.w.from, inflight-q+2+c.limit/48))))
}

// refused lowers the limit after a 429, at most once a baseline (the
// calls sent together are refused together; one is the signal).
func (c *Concurrency) refused(now time.Time, s Sample) {
	gap := max(c.base, time.Second)
	if !c.lastCut.IsZero() && now.Sub(c.lastCut) < gap {
		return
	}
	c.lastCut = now
	c.last.Refusals++
	at := min(c.limit, float64(max(s.InFlight, 1)))
	next := max(float64(c.cfg.Min), at*refuseShare)
	if c.phase == Probing {
		c.resume = min(c.resume, next)
		return
	}
	c.phase = Tracking
	c.cut = nil
	if next < c.limit {
		c.set(now, next)
	}
}

// close ends a window: the estimate, then the decision.
func (c *Concurrency) close(now time.Time) {
	// The next window, which has been taking calls meanwhile, goes on
	// unless the decision below changes the limit (set discards it).
	w := c.w
	c.w, c.nw = c.nw, window{}
	if c.mixed && c.w.id != 0 {
		// Its growth and its floor (start, endStart) count from the
		// limit now, as a window opened now would.
		c.w.from = c.limit
	}
	n := float64(w.n)
	mean, se := w.stats()
	inflight := w.inflight / n
	rtt := seconds(mean)
	c.last.Windows++
	c.last.Latency = rtt

	switch {
	case c.phase == Probing:
		// The provider without a queue: the baseline, averaged with the
		// last probe's to halve a window's noise.
		if c.base == 0 || c.rebase {
			c.base = rtt
		} else {
			c.base = (c.base + rtt) / 2
		}
		c.rebase = false
		c.windows = 0
		c.phase = Tracking
		c.set(now, max(c.resume, c.limit))
		c.estimate(inflight, rtt)
		return
	case c.phase == Starting || c.base == 0:
		// Rising from a few calls: the lowest window is the provider
		// without a queue until the queue shows.
		if b := seconds(mean + se); c.base == 0 || b < c.base {
			c.base = b
		}
	case seconds(mean+2*se) < c.base:
		// Faster than the baseline, beyond a window's noise: the
		// provider got faster.
		c.base = seconds(mean + se)
	}
	c.windows++
	q := c.estimate(inflight, rtt)
	capacity := inflight - q
	alpha, beta, target := 1+c.limit/64, 3+c.limit/32, 2+c.limit/48
	if c.mixed {
		// Windows of every answer of their calls, unbiased by which
		// answers come first, hold the queue a slot nearer the bound:
		// a band as much lower (see Concurrency).
		beta, target = 2.5+c.limit/32, 1.75+c.limit/48
	}

	if c.rebase && c.phase == Tracking && capacity*probeShare >= float64(c.cfg.Min) {
		// The baseline is of the first answers of windows of mixed
		// sizes, low by the long answers they missed (see Observe): no
		// queue is read off it. The probe that replaces it first.
		c.probe(now, capacity)
		return
	}
	if cut := c.cut; cut != nil && inflight <= 0.8*cut.inflight {
		// A queue's latency falls with the concurrency; a slower
		// provider's does not. Nearer (in ratio) to the latency before
		// the cuts than to the one a queue would leave: the latency rose
		// for another reason, and the baseline moves to it.
		expect := max(float64(c.base), float64(cut.latency)*inflight/cut.inflight)
		if float64(rtt) > math.Sqrt(expect*float64(cut.latency)) {
			c.cut = nil
			c.last.Slowdowns++
			c.base = rtt
			c.windows = probeEvery - 3 // measure it soon without a queue
			c.grown = 0
			c.set(now, cut.limit)
			c.estimate(inflight, rtt)
			return
		}
		cut.queue = true
	}

	switch {
	case q > beta && (!c.mixed || mean-2*se > c.base.Seconds()):
		// A queue beyond the bound and beyond the window's noise (a
		// window of answers from a tenth of a second to two seconds can
		// read a third above its mean by chance). Far above the bound
		// the estimate is sure: straight to it.
		// Near it, half the way, so that a window's noise moves the
		// limit by a slot or two.
		next := c.limit - (q-target)/2
		if c.phase == Starting {
			// The slow start grew the limit by the answer while the
			// window was measured, up to a round trip's growth past the
			// concurrency the window saw: half way from that.
			next = inflight - (q-target)/2
		}
		if q > 2*beta {
			next = capacity + target
		}
		if c.phase == Tracking {
			// Until a cut has shown the latency falling with the
			// concurrency, a run of cuts goes a quarter down at most:
			// it is the test that tells a queue from a slowdown (above),
			// and the capacity a slowdown's latency estimates — a
			// quarter of the slots for calls four times as long — is no
			// limit to test it at. A queue is cut to its capacity by the
			// window after the test.
			switch {
			case c.cut == nil:
				next = max(next, 0.75*c.limit)
			case !c.cut.queue:
				next = max(next, 0.75*c.cut.limit)
			}
		}
		next = max(float64(c.cfg.Min), next)
		starting := c.phase == Starting
		c.phase, c.grown = Tracking, 0
		if next < c.limit {
			c.last.Cuts++
			// The end of the slow start is no run of cuts to judge: the
			// limit before it was a trial, up to twice the provider's
			// capacity, and a slowdown read later would restore it.
			if c.cut == nil && !starting {
				// The first of a run of cuts: what they are judged by.
				c.cut = &cut{limit: c.limit, inflight: inflight, latency: rtt}
			}
			c.set(now, next)
			return
		}
	case (q < alpha || c.mixed && c.queueAt(inflight, mean-se) < alpha) && inflight >= 0.8*c.limit && !w.exhausted && !now.Before(c.heldUntil):
		// Windows of answers of many sizes (mixed) read a queue of a
		// few calls by chance as often as not: one whose latency less
		// its standard error shows none has shown no queue, and a limit
		// held while the noise says nothing holds a pool below the
		// provider's slots for good (a queue's cut needs the latency
		// beyond two standard errors, above).
		// Only a window that used its limit says more would be used:
		// one slot, then twice as many each window in a row, at most a
		// quarter of the limit; half again a window while starting.
		c.grown++
		c.cut = nil
		if c.phase == Starting {
			break // start has grown it, answer by answer
		}
		next := c.limit + min(math.Exp2(float64(c.grown-1)), max(1, c.limit/4))
		if next = min(next, float64(c.cfg.Max)); next > c.limit {
			c.set(now, next)
			return
		}
	default:
		c.cut, c.grown = nil, 0
	}
	if c.phase == Tracking && c.windows >= probeEvery && capacity*probeShare >= float64(c.cfg.Min) {
		c.probe(now, capacity)
	}
}

// probe lowers the limit for one window to probeShare of the capacity
// estimated, to measure the provider without a queue; the limit then
// resumes at the one it was lowered from.
func (c *Concurrency) probe(now time.Time, capacity float64) {
	c.resume = c.limit
	c.phase = Probing
	c.set(now, max(float64(c.cfg.Min), math.Floor(capacity*probeShare)))
}

// estimate records and returns the queue estimated at the provider for
// a window at concurrency inflight and mean latency rtt.
func (c *Concurrency) estimate(inflight float64, rtt time.Duration) float64 {
	q := 0.0
	if c.base > 0 && rtt > c.base {
		q = inflight * (1 - float64(c.base)/float64(rtt))
	}
	c.last.Queue, c.last.Capacity = q, inflight-q
	return q
}

// queueAt is the queue estimate of a window at concurrency inflight and
// mean latency mean (seconds), without recording it.
func (c *Concurrency) queueAt(inflight, mean float64) float64 {
	if c.base <= 0 || mean <= c.base.Seconds() {
		return 0
	}
	return inflight * (1 - c.base.Seconds()/mean)
}

// set moves the limit, clamped to the bounds, and starts a new window.
func (c *Concurrency) set(now time.Time, l float64) {
	c.limit = max(float64(c.cfg.Min), min(l, float64(c.cfg.Max)))
	c.changed = now
	c.w, c.nw = window{}, window{}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// stats are the window's latency — its latencies' sum over their units'
// sum, seconds for a call of the mean time — and that mean's standard
// error, from the spread of the latencies each over its units.
func (w *window) stats() (mean, se float64) {
	n := float64(w.n)
	mean = w.sum / w.units
	nm := w.norm / n
	return mean, math.Sqrt(max(w.normSq/n-nm*nm, 0)) / math.Sqrt(n)
}
