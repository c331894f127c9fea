// One file, over 600 lines, on purpose: the Core is one state machine whose
// invariants (slots in flight, the ranked queue's levels and counts, the
// estimator's window, the overload mode) are kept together by every method
// below, and a reader checking one invariant needs every place that moves
// it in view. The pieces it uses live beside it (window.go, queue.go,
// fair.go, stats.go).

package admission

import (
	"fmt"
	"time"
)

// Core is the admission state machine: slots, the bounded ranked queue, the
// service-time estimator and the decisions. Every method takes the current
// time; the Core never reads the clock, sleeps or starts goroutines, so a
// simulator can drive it in virtual time. It is not safe for concurrent use:
// [Gate] serialises it behind a mutex.
//
// Decisions about queued tickets (grants, evictions, expiries) are made inside
// Arrive, Release, SetConcurrency and Cancel; the owner collects them with
// Events after each call and wakes the waiters.
type Core struct {
	cfg         Config
	ranks       *Ranks
	concurrency int
	// settled, when positive and below concurrency, is the part of the
	// slots the estimates count on: the rest is a limit being tried (see
	// SetTrialConcurrency).
	settled    int
	inFlight   int
	inFlightAt []int // in flight by rank, for Stats.InFlightByRank
	queued     int
	levels     []level
	overload   overload

	// Tenants and their fair shares (see fair.go). active lists the
	// tenants with demand; waterLevel is worked out again from it, when
	// sharesStale, only once a share is asked for.
	tenants     map[string]*tenantState
	active      []*tenantState
	scratch     []*tenantState
	sharesStale bool
	waterLevel  float64
	lastTenant  *tenantState

	all  *window
	keys map[string]*window
	// shapes and families are the statistics of call shapes
	// (Request.Shape, Request.Family), each bounded by Config.MaxShapes
	// (see shapes.go).
	shapes, families map[uint64]*shapeStats
	// running is the grant times of the calls in flight (inflight.go).
	running running

	events []*Ticket
	c      counters
	// lateScratch is expire's, laneScratch drain's, kept between calls.
	lateScratch []*Ticket
	laneScratch []laneRate
}

type counters struct {
	admitted  uint64 // granted a slot at once
	enqueued  uint64
	granted   uint64 // granted after waiting
	rejected  [numReasons]uint64
	canceled  uint64 // left the queue because the caller gave up
	completed [Unused + 1]uint64
}

// Verdict is the immediate outcome of [Core.Arrive].
type Verdict uint8

const (
	// Granted: a slot was free; the work may start now.
	Granted Verdict = iota + 1
	// Queued: the ticket waits; its outcome will appear in Events.
	Queued
	// Rejected: refused now; see the Decision's reason.
	Rejected
)

// Decision is what [Core.Arrive] and [Core.Estimate] decide.
type Decision struct {
	Verdict Verdict
	Rank    int
	// Reason, RetryAfter: set when Verdict is Rejected.
	Reason     Reason
	RetryAfter time.Duration
	// EstimatedWait is the estimated time until a slot.
	EstimatedWait time.Duration
	// ServiceP50 and ServiceP95 are the service-time statistics of the
	// request's key the decision used; the p95 is its expected service time.
	ServiceP50, ServiceP95 time.Duration
	// Overloaded says, in an Estimate, that the queue the request would
	// join is serving newest-first: under sustained overload the request
	// may be left behind by later arrivals whatever its estimated wait.
	Overloaded bool
	// Units is the request's expected work in calls of the gate's mean
	// service time: its shape's (or key's) mean over the mean of all
	// calls, 1 without statistics of its own (see shapes.go).
	Units float64
}

// Rejection returns the decision as an error value, or nil unless rejected.
func (d Decision) Rejection() *Rejection {
	if d.Verdict != Rejected {
		return nil
	}
	return &Rejection{Reason: d.Reason, EstimatedWait: d.EstimatedWait, RetryAfter: d.RetryAfter, Rank: d.Rank}
}

// NewCore returns a Core for cfg, or an error naming the invalid field.
func NewCore(cfg Config) (*Core, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Core{
		cfg:         cfg,
		ranks:       cfg.Ranks,
		concurrency: cfg.Concurrency,
		levels:      make([]level, cfg.Ranks.Count()),
		tenants:     make(map[string]*tenantState),
		all:         newWindow(cfg.ServiceWindow, !cfg.NoEarlyRefusal),
		keys:        make(map[string]*window),
		shapes:      make(map[uint64]*shapeStats),
		families:    make(map[uint64]*shapeStats),
		overload:    overload{off: cfg.FIFOOnly, target: cfg.LIFOTarget, interval: cfg.LIFOInterval},
	}, nil
}

// Rank returns the rank req would get, or an error for an unknown class or a
// negative attempt.
func (c *Core) Rank(req Request) (int, error) { return c.ranks.Rank(&req) }

// Ranks returns the number of ranks.
func (c *Core) Ranks() int { return len(c.levels) }

// Arrive decides a newcomer. If it may wait and neither a slot nor a refusal
// is due, t is queued (t must not be queued already) and the verdict is
// Queued; otherwise t is untouched. With wait false the request is refused
// rather than queued (reason queue_wait, with the wait it would have had).
func (c *Core) Arrive(now time.Time, req Request, t *Ticket, wait bool) (Decision, error) {
	d, _, err := c.arrive(now, &req, t, wait)
	return d, err
}

// arrive is Arrive without copying the request on the way in. It also
// returns the tenant's state, which a granted caller hands back to
// release: the state lives at least as long as the tenant holds a slot.
func (c *Core) arrive(now time.Time, req *Request, t *Ticket, wait bool) (Decision, *tenantState, error) {
	rank, cost, err := c.rankAndCost(req)
	if err != nil {
		return Decision{}, nil, err
	}
	if t != nil && t.state == ticketQueued {
		return Decision{}, nil, fmt.Errorf("admission: ticket is already queued")
	}
	ts := c.tenant(req.Tenant)
	pl := c.placeOf(now, req)
	d := c.decide(now, req, rank, ts, cost, &pl)
	if d.Verdict == Rejected {
		c.c.rejected[d.Reason]++
		if d.Reason == ReasonQueueWait && budget(now, req) > 0 {
			ts.refusingAt(rank, pl.class).refused(now, standingInterval(budget(now, req)))
		}
		return d, ts, nil
	}
	if d.Verdict == Granted {
		c.take(now, ts, rank, cost, pl.class, pl.units)
		c.c.admitted++
		return d, ts, nil
	}
	if !wait || t == nil {
		d.Verdict, d.Reason = Rejected, ReasonQueueWait
		d.RetryAfter = max(d.EstimatedWait, c.perSlot())
		c.c.rejected[d.Reason]++
		return d, ts, nil
	}
	// Queued, unless the waiting room is at its bounds.
	if ts.maxQueue > 0 && ts.queued >= ts.maxQueue {
		ts.refusingAt(rank, pl.class).refused(now, standingInterval(budget(now, req)))
		return c.refuseFull(now, d, req), ts, nil
	}
	if c.queued >= c.cfg.MaxQueue {
		victim := c.victimFor(rank, ts, cost)
		if victim == nil {
			ts.refusingAt(rank, pl.class).refused(now, standingInterval(budget(now, req)))
			return c.refuseFull(now, d, req), ts, nil
		}
		c.reject(now, victim, ReasonEvicted, c.retryAfterFor(now, victim.rank, victim.req.Tenant, &victim.req))
	}
	*t = Ticket{Owner: t.Owner, req: *req, rank: rank, cost: cost, units: pl.units, due: pl.due, ts: ts, enqueued: now,
		state: ticketQueued, wait: d.EstimatedWait,
		overload: !c.cfg.NoEarlyRefusal && !c.cfg.FIFOOnly && ts.standing(now, rank, pl.class)}
	c.push(t, ts, pl.class)
	c.c.enqueued++
	// The newcomer may overtake queued work (a higher rank, or newest
	// first): what it pushes past its deadline is told now.
	c.refuseLate(now)
	return d, ts, nil
}

// decide is the admission rule, without side effects: Granted when a slot is
// free and the work fits its deadline, Rejected when it cannot finish in time,
// else Queued (bounds not yet considered).
func (c *Core) decide(now time.Time, req *Request, rank int, ts *tenantState, cost float64, pl *place) Decision {
	p50, p95 := pl.p50, pl.p95
	d := Decision{Rank: rank, ServiceP50: p50, ServiceP95: p95, Units: pl.units}
	var budget time.Duration // what is left of the caller's time
	if hasDeadline := !req.Deadline.IsZero(); hasDeadline {
		if budget = req.Deadline.Sub(now); budget <= 0 {
			d.Verdict, d.Reason = Rejected, ReasonExpired
			d.RetryAfter = c.perSlot()
			return d
		}
	}
	d.EstimatedWait = c.waitOf(now, rank, req.Tenant, ts, cost, pl)
	if ts.capped() {
		// At its cap the tenant waits for its own work, whatever the
		// others leave free.
		d.EstimatedWait = max(d.EstimatedWait, c.cappedWait(ts))
	}
	if budget > 0 && d.EstimatedWait+p95 > budget && !c.probe(req, d.EstimatedWait, p50, budget) {
		d.Verdict, d.Reason = Rejected, ReasonQueueWait
		d.RetryAfter = c.retryAfter(d.EstimatedWait, p95, budget)
		return d
	}
	if budget > 0 && d.EstimatedWait > 0 && !c.cfg.NoEarlyRefusal && ts.standing(now, rank, pl.class) {
		if allow := c.allowance(budget); d.EstimatedWait > allow {
			d.Verdict, d.Reason = Rejected, ReasonQueueWait
			d.RetryAfter = max(d.EstimatedWait-allow, c.perSlot())
			return d
		}
	}
	if c.inFlight < c.concurrency && d.EstimatedWait == 0 && !ts.capped() {
		d.Verdict = Granted
		return d
	}
	d.Verdict = Queued
	return d
}

// probe says whether a call refused for its expected service time alone
// — a slot free and nothing ahead of it, but a p95 above its budget — may
// take the slot anyway: it has at least even odds (its budget is above the
// median), the slot would otherwise idle, and it does not wait. The
// estimates only move as calls complete: a gate whose p95 has crept past
// every caller's budget — the sampling noise of a window on a slowed
// provider that still serves most calls in time — would otherwise refuse
// every call, complete no other, and never learn that it should not: idle
// for good. Such calls never queue, so they take nothing from a call the
// gate promised a start. A retry is not a probe: first attempts probe as
// well, and a retry's budget is what an earlier attempt left of it — a
// retry of a call its provider failed late, sent with less than the p95,
// is the gamble most likely lost, and retries are the work shed first.
func (c *Core) probe(req *Request, wait, p50, budget time.Duration) bool {
	return !c.cfg.NoEarlyRefusal && req.Attempt == 0 && wait == 0 && c.queued == 0 && c.inFlight < c.concurrency && p50 < budget
}

func (c *Core) refuseFull(now time.Time, d Decision, req *Request) Decision {
	d.Verdict, d.Reason = Rejected, ReasonQueueFull
	d.RetryAfter = c.retryAfterFor(now, d.Rank, req.Tenant, req)
	c.c.rejected[d.Reason]++
	return d
}

// victimFor is victim with the newcomer's demand counted in the fair
// shares, as if it were queued already: a tenant arriving beside a flood
// is one of the tenants the flood's share must leave room for.
func (c *Core) victimFor(rank int, ts *tenantState, cost float64) *Ticket {
	ts.queued++
	ts.queuedCost += cost
	c.queued++
	c.changed(ts)
	v := c.victim(rank, ts, cost)
	ts.queued--
	ts.queuedCost -= cost
	c.queued--
	c.changed(ts)
	return v
}

// victim picks the queued ticket a newcomer of rank, tenant ts and cost may
// evict at the bound: the last-served ticket of the lowest non-empty rank
// below the newcomer's, or, within its own rank, of a tenant holding at
// least two more tickets of that rank than the newcomer's tenant (so the
// bound is shared fairly). Nil when nothing may be evicted.
//
// Work of tenants over their fair share is served as over-quota work (see
// pop), so it is evicted in that place too: after the ranks up to
// Ranks.LowTier, before any rank above it — so a tenant within its share
// may displace another's flood of a higher class, and a flood cannot evict
// the others' lower-class work.
func (c *Core) victim(rank int, ts *tenantState, cost float64) *Ticket {
	low := c.ranks.LowTier
	over := rank > low && c.overShare(ts, cost)
	eff := rank
	if over {
		// Served just above rank LowTier, among the over-share work: it
		// may displace LowTier work and below, not its equals.
		eff = low + 1
	}
	for r := 0; r < eff && r <= low; r++ {
		if c.levels[r].depth > 0 {
			return c.levels[r].lastServed()
		}
	}
	if !over && eff > low && c.contended() {
		// The over-share work, lowest rank first.
		for r := low + 1; r < len(c.levels); r++ {
			l := &c.levels[r]
			if l.depth == 0 {
				continue
			}
			var worst *tenantQueue
			for tq := l.ring; ; {
				if tq.ts != ts && c.overShare(tq.ts, tq.peek().cost) && (worst == nil || tq.n > worst.n) {
					worst = tq
				}
				if tq = tq.next; tq == l.ring {
					break
				}
			}
			if worst != nil {
				return worst.lastServed()
			}
		}
	}
	for r := low + 1; r < eff; r++ {
		if c.levels[r].depth > 0 {
			return c.levels[r].lastServed()
		}
	}
	l := &c.levels[rank]
	if l.depth == 0 {
		return nil
	}
	own := 0
	if tq := l.queues[ts.name]; tq != nil {
		own = tq.n
	}
	if h := l.heaviest(); h.tenant != ts.name && h.n >= own+2 {
		return h.lastServed()
	}
	return nil
}

// Release frees one slot held by the work of req — the request that was
// granted: its tenant's and cost's hold is given back and its service time
// recorded under its key — then serves the queue.
func (c *Core) Release(now time.Time, req Request, o Outcome) {
	cost, err := req.cost()
	if err != nil {
		cost = 0 // it was refused at arrival; nothing of it is held
	}
	rank, err := c.ranks.Rank(&req)
	if err != nil {
		rank = -1 // it was refused at arrival
	}
	c.release(now, c.tenants[req.Tenant], req.Key, req.Shape, req.Family, rank, cost, o)
}

// release is Release with the tenant's state at hand (nil: unknown) and
// the request's rank (-1: unknown) and cost worked out.
func (c *Core) release(now time.Time, ts *tenantState, key string, shape, family uint64, rank int, cost float64, o Outcome) {
	if c.inFlight > 0 {
		c.inFlight--
		c.holdRank(rank, -1)
		c.running.remove(now.Add(-o.ServiceTime))
	}
	if ts != nil && ts.inFlight > 0 {
		ts.inFlight--
		ts.inFlightCost = max(ts.inFlightCost-cost, 0)
		c.changed(ts)
	}
	if o.Result <= Unused {
		c.c.completed[o.Result]++
	}
	c.record(now, key, shape, family, o)
	c.dispatch(now)
}

// record adds a service-time sample per the Result's rules: to the
// statistics of all calls, of the key and of the shape.
func (c *Core) record(now time.Time, key string, shape, family uint64, o Outcome) {
	switch o.Result {
	case Success, Failure:
	case Canceled:
		if c.all.count() == 0 || o.ServiceTime <= c.all.mean() {
			return
		}
	default:
		return
	}
	// A sample is clamped to a day: a bogus outcome must not poison every
	// estimate that follows (the window forgets it only after N samples).
	o.ServiceTime = min(o.ServiceTime, maxSample)
	// The window of all calls follows a level shift only while the calls
	// are of one shape: of several, it is a mixture, whose level moves
	// with the mix — earliest deadline first serves the short calls of a
	// burst first, then the long ones — and its change-point test would
	// take a change of mix for the provider slowing, and every queued
	// call's wait with it. Each shape's own window follows a slowdown.
	c.all.follow = !c.cfg.NoEarlyRefusal && len(c.shapes) <= 1 && len(c.families) <= 1
	c.all.add(o.ServiceTime)
	if shape != 0 {
		c.recordShape(now, c.shapes, shape, o.ServiceTime)
	}
	if family != 0 {
		c.recordShape(now, c.families, family, o.ServiceTime)
	}
	if key == "" {
		return
	}
	w := c.keys[key]
	if w == nil {
		if len(c.keys) >= c.cfg.MaxKeys {
			return
		}
		w = newWindow(c.cfg.ServiceWindow, !c.cfg.NoEarlyRefusal)
		c.keys[key] = w
	}
	w.add(o.ServiceTime)
}

// maxSample is the longest service time the estimator records.
const maxSample = 24 * time.Hour

// Cancel removes a queued ticket whose caller gave up: reason expired when its
// deadline passed, or no reason (a plain cancellation) when reason is zero.
// It reports whether t was still queued; false means the Core decided it
// already (look at t) and the owner must honour that decision — for a grant,
// by releasing the slot.
func (c *Core) Cancel(now time.Time, t *Ticket, reason Reason) bool {
	if t.state != ticketQueued {
		return false
	}
	c.unlink(t)
	t.state, t.decided = ticketRejected, now
	if reason == reasonNone {
		t.reason = reasonNone
		c.c.canceled++
	} else {
		t.reason = reason
		t.retry = c.retryAfterFor(now, t.rank, t.req.Tenant, &t.req)
		c.c.rejected[reason]++
	}
	return true
}

// SetConcurrency changes the number of slots. Raising it serves waiters at
// once; lowering it lets work in flight finish and grants nothing until the
// in-flight count is below the new limit. Queued work is kept.
func (c *Core) SetConcurrency(now time.Time, n int) error {
	if n < 1 {
		return fmt.Errorf("admission: concurrency %d, want ≥ 1", n)
	}
	c.concurrency, c.settled = n, 0
	c.dispatch(now)
	return nil
}

// SetTrialConcurrency changes the number of slots to n, as SetConcurrency
// does, of which the wait estimates, the refusals they decide and every
// RetryAfter count on settled only (at most n): for an owner trying a
// limit it has not measured yet — a learnt concurrency's slow start —
// work is sent to all n slots, but what the gate promises a caller is
// the rate it knows. Counting the tried slots, the gate would admit a
// queue for a rate the dependency may not have; when the trial ends in
// a lower limit, that queue's tail is refused after it waited.
func (c *Core) SetTrialConcurrency(now time.Time, n, settled int) error {
	if settled < 1 || settled > n {
		return fmt.Errorf("admission: settled concurrency %d, want 1..%d", settled, n)
	}
	if err := c.SetConcurrency(now, n); err != nil {
		return err
	}
	c.settled = settled
	return nil
}

// rateSlots is the concurrency the estimates count on.
func (c *Core) rateSlots() int {
	if c.settled > 0 && c.settled < c.concurrency {
		return c.settled
	}
	return c.concurrency
}

// Shed refuses every queued ticket at now with reason, retry as its
// RetryAfter, and reports how many: for an owner that knows none of them
// can be served here — the dependency behind the gate went down — so
// that each caller is told at once, and may be sent elsewhere, instead
// of being granted a slot whose call cannot reach it. The decisions come
// back from Events; slots in flight are left alone.
func (c *Core) Shed(now time.Time, reason Reason, retry time.Duration) int {
	n := 0
	for r := range c.levels {
		l := &c.levels[r]
		for l.depth > 0 {
			c.reject(now, l.lastServed(), reason, retry)
			n++
		}
	}
	return n
}

// holdRank counts a slot taken (+1) or given back (-1) at rank.
func (c *Core) holdRank(rank, d int) {
	if rank < 0 || rank >= len(c.levels) {
		return
	}
	if c.inFlightAt == nil {
		c.inFlightAt = make([]int, len(c.levels))
	}
	if c.inFlightAt[rank]+d >= 0 {
		c.inFlightAt[rank] += d
	}
}

// Concurrency returns the current number of slots.
func (c *Core) Concurrency() int { return c.concurrency }

// InFlight returns the number of slots in use.
func (c *Core) InFlight() int { return c.inFlight }

// Queued returns the number of waiting tickets.
func (c *Core) Queued() int { return c.queued }

// Events returns the tickets decided since the previous call — granted,
// evicted or expired — and forgets them. The slice is reused by the next call
// into the Core.
func (c *Core) Events() []*Ticket {
	ev := c.events
	c.events = c.events[:0]
	return ev
}

// dispatch grants free slots to queued tickets, highest rank first, dropping
// those that can no longer finish in time.
func (c *Core) dispatch(now time.Time) {
	for c.inFlight < c.concurrency && c.queued > 0 {
		t := c.pop(now)
		if t == nil {
			return // every tenant with queued work is at its cap
		}
		if !t.req.Deadline.IsZero() && !c.cfg.NoDequeueExpiry {
			if now.Add(c.startMargin(now, &t.req)).After(t.req.Deadline) {
				t.state, t.reason, t.decided = ticketRejected, ReasonExpired, now
				t.retry = c.perSlot()
				c.c.rejected[ReasonExpired]++
				c.events = append(c.events, t)
				continue
			}
		}
		t.state, t.decided = ticketGranted, now
		c.take(now, t.ts, t.rank, t.cost, t.class, t.units)
		c.c.granted++
		c.events = append(c.events, t)
	}
	c.refuseLate(now)
}

// pop takes the next ticket to serve, or nil when every tenant with queued
// work is at its concurrency cap.
//
// Rank decides first, but a tenant's fair share is decided here, at
// dequeue, not at arrival: whether a tenant is over its max-min fair share
// of the slots depends on who else is waiting when a slot frees, which is
// not known when its request arrives — a tenant alone must get every slot
// (work conservation), and the same request must yield as soon as others
// come. A tenant's work that would take it past its share while others
// wait is served as over-quota work, like a tenant past its spend budget:
// after the work within its share of every rank above Ranks.LowTier, and
// before rank LowTier and below.
//
// Within one rank, fair queuing alone decides between tenants within and
// over their shares, unless work within its share waits at a lower rank
// above LowTier: then only the tenants within their shares are served at
// the higher rank. So a flood at the top class cannot hold back the others'
// lower-class work, yet within a rank a tenant's burst above its share
// still takes the turns the others leave (their requests that expired at
// dequeue, for example), as plain fair queuing would give it.
func (c *Core) pop(now time.Time) *Ticket {
	top := len(c.levels) - 1
	if c.contended() {
		within := func(tq *tenantQueue) bool {
			return !tq.ts.capped() && !c.overShare(tq.ts, tq.peek().cost)
		}
		first := -1 // the highest rank above LowTier with work within a share
		for r := top; r > c.ranks.LowTier; r-- {
			if !c.levels[r].has(within) {
				continue
			}
			if first < 0 {
				first = r
				continue
			}
			// Work within a share waits below first: at first, serve
			// only the tenants within their shares.
			return c.popFrom(now, first, within)
		}
		if first >= 0 {
			return c.popFrom(now, first, uncapped)
		}
	}
	for r := top; r >= 0; r-- {
		if t := c.popFrom(now, r, uncapped); t != nil {
			return t
		}
	}
	return nil
}

func uncapped(tq *tenantQueue) bool { return !tq.ts.capped() }

func (c *Core) popFrom(now time.Time, r int, ok func(*tenantQueue) bool) *Ticket {
	l := &c.levels[r]
	if l.depth == 0 {
		return nil
	}
	tq := l.next(ok)
	if tq == nil {
		return nil
	}
	t := l.take(now, tq, &c.overload)
	c.forget(t)
	return t
}

func (c *Core) reject(now time.Time, t *Ticket, reason Reason, retry time.Duration) {
	c.unlink(t)
	t.state, t.reason, t.retry, t.decided = ticketRejected, reason, retry, now
	c.c.rejected[reason]++
	c.events = append(c.events, t)
}

func (c *Core) push(t *Ticket, ts *tenantState, class uint8) {
	c.levels[t.rank].push(t, ts, !c.cfg.NoEarlyRefusal, class)
	c.queued++
	ts.queued++
	ts.queuedCost += t.cost
	c.changed(ts)
}

// unlink removes a queued ticket from every structure.
func (c *Core) unlink(t *Ticket) {
	c.levels[t.rank].remove(t)
	c.forget(t)
}

// forget updates the counts for a ticket that left its level.
func (c *Core) forget(t *Ticket) {
	c.queued--
	ts := t.ts
	ts.queued--
	ts.queuedCost = max(ts.queuedCost-t.cost, 0)
	c.changed(ts)
}

// service returns the p50 and p95 service time of a call of key and shape
// at now: its shape's own window once it has enough samples, else its
// key's, else all requests', else the configured initial service time —
// and a p95 no shorter than the calls in flight say it is (see running),
// when they are all of one key and one shape: a gate serving several
// cannot tell a long call of one from a slowdown.
func (c *Core) service(now time.Time, key string, shape, family uint64) (p50, p95 time.Duration) {
	p50, p95 = c.windowService(key, shape, family)
	if !c.cfg.NoEarlyRefusal && len(c.keys) <= 1 && len(c.shapes) <= 1 && len(c.families) <= 1 {
		p95 = max(p95, c.running.overdue(now))
	}
	return p50, p95
}

func (c *Core) windowService(key string, shape, family uint64) (p50, p95 time.Duration) {
	if w := c.shapeWindow(shape, family); w != nil {
		return w.quantiles()
	}
	if key != "" {
		if w := c.keys[key]; w != nil && w.count() >= minKeySamples {
			return w.quantiles()
		}
	}
	if c.all.count() > 0 {
		return c.all.quantiles()
	}
	return c.cfg.InitialServiceTime, c.cfg.InitialServiceTime
}

// startMargin is the service time a queued request must still have before
// its deadline to be started: the p95, the same bar it was admitted under.
// Admission at arrival promised that the estimated wait plus the p95 fits
// the deadline; at dequeue the wait is over and known, and the same
// predicate is asked again with it. A bar higher than the arrival's (the
// p99) would drop admitted work whose promise still holds — at a deadline
// twice the median service time, every request that waited a fifth of it —
// turning a one-in-twenty chance of a late answer into a certain failure.
func (c *Core) startMargin(now time.Time, req *Request) time.Duration {
	_, p95 := c.service(now, req.Key, req.Shape, req.Family)
	return p95
}

// minKeySamples is how many samples a key needs before its own statistics are
// trusted over the overall ones.
const minKeySamples = 16

// perSlot is the expected time between two completions when every slot is
// busy: the service time over the concurrency. It is the unit of the wait
// estimate and the floor of every RetryAfter: a retry sooner than one
// completion cannot find the queue any shorter. With no data it is one second.
func (c *Core) perSlot() time.Duration {
	s := c.serviceForRate()
	if s <= 0 {
		return time.Second
	}
	return max(s/time.Duration(c.rateSlots()), time.Millisecond)
}

// Interval is the expected time between two completions while every slot
// is busy — the service time over the concurrency, one second with no data:
// the pace at which the gate admits work under load, and the floor of every
// RetryAfter.
func (c *Core) Interval() time.Duration { return c.perSlot() }

func (c *Core) serviceForRate() time.Duration {
	if c.all.count() == 0 {
		return c.cfg.InitialServiceTime
	}
	if c.cfg.WaitEstimator == ByMedian {
		p50, _ := c.all.quantiles()
		return p50
	}
	return c.all.mean()
}

// waitFor estimates the wait of a newcomer of rank, tenant and cost by
// Little's law: every queued ticket that would be served before it, plus
// itself, needs one completion when all slots are busy; completions come at
// concurrency / service time.
func (c *Core) waitFor(now time.Time, rank int, tenant string, cost float64, pl *place) time.Duration {
	return c.waitOf(now, rank, tenant, c.tenants[tenant], cost, pl)
}

// waitOf is waitFor with the tenant's state at hand (nil: none yet).
func (c *Core) waitOf(now time.Time, rank int, tenant string, ts *tenantState, cost float64, pl *place) time.Duration {
	ahead := c.ahead(now, rank, tenant, ts, cost, pl)
	free := c.concurrency - c.inFlight
	return c.drain(now, rank, pl.class, pl.due, ts, ahead+1-float64(free))
}

// drain estimates how long, from now, need completions take to reach work
// of rank and tenant ts (nil: none yet): by Little's law need × service
// time ÷ concurrency — counting, beside the work queued now, the slots its
// tenant's higher ranks will go on taking meanwhile. Work queued at a rank
// is not served while higher ranks wait, and under load the higher ranks
// go on arriving: a retry, a batch call or a speculative one that ranks
// below its tenant's flood of first attempts counts what is queued above
// it now and then waits for the next arrivals above it too. Those take
// slots at the rate they were granted them lately (grantRates), so work of
// rank gets the rest, concurrency ÷ service time − that rate, and the wait
// is need over it (Little's law in a fluid approximation); when the ranks
// above took every slot it gets none, and its wait is unbounded. Only the
// tenant's own ranks above count: another tenant's flood yields to it
// once it waits, by the fair shares (see pop), however many slots that
// flood took while it did not.
//
// The calls of the same rank whose callers came with shorter budgets
// (lanes of a lower class, see lane.go) overtake it too, but only for a
// while: a call that arrives later is due at its own deadline, and once
// that is later than the waiting call's it queues behind it. A lane's
// calls overtake for the horizon from now to the waiting call's due time
// less the shortest budget of the lane (its class's lower bound), at the
// rate they were granted lately; a burst of short-deadline calls is not
// taken to go on for the whole of a long deadline's wait.
func (c *Core) drain(now time.Time, rank int, class uint8, due time.Time, ts *tenantState, need float64) time.Duration {
	if need <= 0 {
		return 0
	}
	s := c.serviceForRate()
	if s <= 0 {
		return 0
	}
	if c.cfg.NoEarlyRefusal || ts == nil {
		return scaleUnits(need, s, c.rateSlots())
	}
	above, lanes := ts.grants.overtaking(now, rank, class, c.rateWindow(), c.laneScratch[:0])
	c.laneScratch = lanes[:0]
	if above == 0 && len(lanes) == 0 && rank+1 >= len(c.levels) {
		return scaleUnits(need, s, c.rateSlots())
	}
	mu := float64(c.rateSlots()) / s.Seconds()
	rest := mu - above
	if rest <= mu/1000 {
		return maxWait
	}
	wait := need / rest // seconds, before the lanes that overtake
	if len(lanes) > 0 {
		left := due.Sub(now).Seconds()
		// wait = (need + Σ rate·min(wait, horizon)) / rest: its fixed
		// point, by steps from below — each lane's term grows with the
		// wait until its horizon, so the steps rise to it (capped: a
		// few are within a millisecond at any rates that leave a rest).
		for range 8 {
			extra := 0.0
			for _, l := range lanes {
				h := left - laneFloor(l.class).Seconds()
				extra += l.rate * max(0, min(wait, h))
			}
			next := (need + extra) / rest
			if next-wait < 1e-4 {
				wait = next
				break
			}
			wait = next
		}
	}
	return min(time.Duration(wait*float64(time.Second)), maxWait)
}

// laneFloor is the shortest budget of a lane class: the calls of the lane
// came with at least that much time.
func laneFloor(class uint8) time.Duration {
	if class == 0 || class == noDeadline {
		return 0
	}
	return time.Duration(1<<(class-1)) * time.Millisecond
}

// cappedWait is the wait of a tenant at its concurrency cap: its queued
// work and the newcomer go through its own slots only.
func (c *Core) cappedWait(ts *tenantState) time.Duration {
	s := c.serviceForRate()
	if s <= 0 {
		return 0
	}
	return scale(ts.queued+1, s, ts.maxInFlight)
}

// maxWait caps estimates far below the largest Duration, so that adding a
// service time (at most maxSample) to one can never overflow.
const maxWait = time.Duration(1 << 62)

// scaleUnits returns u·s/k for u units of work, capped at maxWait.
func scaleUnits(u float64, s time.Duration, k int) time.Duration {
	w := u * float64(s) / float64(k)
	if !(w < float64(maxWait)) {
		return maxWait
	}
	return time.Duration(max(w, 0))
}

// scale returns n·s/k, capped at maxWait.
func scale(n int, s time.Duration, k int) time.Duration {
	if n > 0 && s > 0 && time.Duration(n) > maxWait/s {
		return maxWait
	}
	return min(time.Duration(n)*s/time.Duration(k), maxWait)
}

// ahead counts the queued tickets served before a newcomer of rank, tenant
// and cost: the higher ranks and its place in its own rank — except that,
// while tenants contend, a newcomer within its fair share does not count
// the work at higher ranks of tenants over their share, which pop serves
// after it (as over-quota work).
func (c *Core) ahead(now time.Time, rank int, tenant string, ts *tenantState, cost float64, pl *place) float64 {
	if c.queued == 0 {
		return 0 // the fast path: nothing waits
	}
	weight := 1.0
	if ts != nil {
		weight = ts.weight
	}
	// Within its own rank fair queuing decides, whatever the shares.
	return c.aheadAbove(rank, ts, cost) + c.levels[rank].ahead(tenant, cost, weight, c.front(now, rank, tenant, ts, pl.class), pl.class, pl.due)
}

// front says whether a newcomer of tenant (state ts, nil: none yet) at rank
// and lane class would be an overload ticket, queued at the front of its
// lane's newest-first tickets, behind the promised ones (see lane).
func (c *Core) front(now time.Time, rank int, tenant string, ts *tenantState, class uint8) bool {
	if c.cfg.NoEarlyRefusal || c.cfg.FIFOOnly {
		return false
	}
	if tq := c.levels[rank].queues[tenant]; tq != nil {
		if ln := tq.laneOf(class, false); ln != nil && ln.ovN > 0 {
			return true
		}
	}
	return ts.standing(now, rank, class)
}

// aheadAbove counts the queued tickets of ranks above rank served before
// work of tenant ts and cost at rank (see ahead).
func (c *Core) aheadAbove(rank int, ts *tenantState, cost float64) float64 {
	var skip func(*tenantQueue) bool
	if rank > c.ranks.LowTier && c.contended() && (ts == nil || !c.overShare(ts, cost)) {
		skip = func(tq *tenantQueue) bool { return c.overShare(tq.ts, tq.peek().cost) }
	}
	n := 0.0
	for r := len(c.levels) - 1; r > rank; r-- {
		l := &c.levels[r]
		if skip == nil || l.depth == 0 {
			n += l.units
			continue
		}
		for tq := l.ring; ; {
			if !skip(tq) {
				n += tq.units
			}
			if tq = tq.next; tq == l.ring {
				break
			}
		}
	}
	return n
}

// retryAfter is when a request refused for its wait has a chance: the
// backlog ahead drains one second per second (ignoring new arrivals, which
// is why it is a lower bound), so after wait + p95 − budget the same request
// would fit. A request whose budget cannot hold even p95 has no chance with
// the same deadline; it is told how long the backlog ahead takes to drain.
func (c *Core) retryAfter(wait, p95, budget time.Duration) time.Duration {
	floor := c.perSlot()
	if budget < p95 {
		return max(wait, floor)
	}
	return max(wait+p95-budget, floor)
}

// retryAfterFor is the RetryAfter of a request refused at the bound or
// evicted: the time for the backlog ahead of its rank to shrink by one
// completion, or for its wait to fit its deadline, whichever is later.
func (c *Core) retryAfterFor(now time.Time, rank int, tenant string, req *Request) time.Duration {
	cost, _ := req.cost()
	pl := c.placeOf(now, req)
	wait := c.waitFor(now, rank, tenant, cost, &pl)
	if req.Deadline.IsZero() {
		return max(wait, c.perSlot())
	}
	return c.retryAfter(wait, pl.p95, req.Deadline.Sub(now))
}

// Estimate says what would happen to req if it arrived now, without queuing
// it or changing any counter.
func (c *Core) Estimate(now time.Time, req Request) (Decision, error) {
	rank, err := c.ranks.Rank(&req)
	if err != nil {
		return Decision{}, err
	}
	cost, err := req.cost()
	if err != nil {
		return Decision{}, err
	}
	// A tenant not seen yet is looked at through a state of its own that
	// the Core does not keep: an estimate changes nothing.
	ts := c.tenants[req.Tenant]
	if ts == nil {
		ts = c.newTenant(req.Tenant)
	}
	pl := c.placeOf(now, &req)
	d := c.decide(now, &req, rank, ts, cost, &pl)
	if tq := c.levels[rank].queues[req.Tenant]; tq != nil {
		if ln := tq.laneOf(pl.class, false); ln != nil && ln.newestFirst() {
			d.Overloaded = true
		}
	}
	if d.Verdict == Queued {
		switch {
		case ts.maxQueue > 0 && ts.queued >= ts.maxQueue,
			c.queued >= c.cfg.MaxQueue && c.victimFor(rank, ts, cost) == nil:
			d.Verdict, d.Reason = Rejected, ReasonQueueFull
			d.RetryAfter = c.retryAfterFor(now, rank, req.Tenant, &req)
		}
	}
	return d, nil
}

// Refusing early.
//
// The wait estimate at arrival is a promise: a newcomer queued is expected
// to start in time. Two things break it later, and each is told at once
// rather than when the caller's deadline passes — a caller left waiting
// out a promise nobody keeps learns nothing and cannot go elsewhere:
//
//   - Work that overtakes it: a higher rank, a newer call while its queue
//     serves newest-first, the service slowing down. After every change
//     that can move queued work back (an arrival, a release), refuseLate
//     asks again, of the ticket each rank would serve last, whether the
//     work now ahead of it still lets it start by its deadline less its
//     expected (p95) service time; one that cannot is refused with reason
//     queue_wait.
//   - A queue that stands. Under sustained overload the waiting room is
//     full to the callers' deadlines at every moment: each call admitted
//     waits almost its whole budget, meets its deadline barely (an unlucky
//     service time then misses it), and serves nobody better than a short
//     queue would, since the slots are busy either way. A queue absorbs
//     bursts; one that has been refusing newcomers for their wait without
//     a pause for a quarter of a newcomer's budget (standingInterval) is
//     no longer absorbing one, and a newcomer may then wait only its
//     allowance: a twentieth of its budget, or four slots' time, whichever
//     is longer (allowance). The callers turned away are told at once,
//     with Retry-After; those admitted start soon and finish in time; and
//     the slots never idle, since the room still holds the next few
//     completions' work. The signal is refusals, not the queue's length or
//     age, because it must survive its own cure: a queue kept short still
//     refuses while the overload lasts, and a tenant whose calls queue
//     briefly beside another's flood, within its fair share, is refused
//     nothing and never stands.

// standingInterval is how long a tenant's queue of one rank must have been
// refusing newcomers for their wait, without a longer pause, before it
// stands, for a newcomer with the given budget: a quarter of it. A burst
// that fills the queue for less than that is absorbed up to the deadlines.
func standingInterval(budget time.Duration) time.Duration { return budget / 4 }

// allowance is the longest a newcomer with the given budget may wait in a
// rank whose queue stands: a twentieth of its budget, or four slots' time
// (the service time over the concurrency, four times), whichever is
// longer — short enough that a caller refused after waiting it has lost
// little, long enough that the queue still feeds every slot.
func (c *Core) allowance(budget time.Duration) time.Duration {
	return max(budget/20, 4*c.perSlot())
}

// budget is what is left of req's time at now; zero without a deadline.
func budget(now time.Time, req *Request) time.Duration {
	if req.Deadline.IsZero() {
		return 0
	}
	return req.Deadline.Sub(now)
}

// refuseLate refuses, at now, the queued tickets that can no longer start
// by their deadline less their expected service time, judging, rank by
// rank from the highest, the ticket each would serve last (see
// "Refusing early" above). A rank whose last ticket still fits is left
// alone, as are tickets without a deadline; a ticket at the front that
// misses is dropped at dequeue.
func (c *Core) refuseLate(now time.Time) {
	if c.queued == 0 || c.cfg.NoEarlyRefusal {
		return
	}
	s := c.serviceForRate()
	if s <= 0 {
		return // no estimate yet: nothing to judge by
	}
	free := float64(c.concurrency - c.inFlight)
	for r := len(c.levels) - 1; r >= 0; r-- {
		l := &c.levels[r]
		c.expire(now, l)
		if l.depth == 0 {
			continue
		}
		for l.depth > 0 {
			t := c.lateIn(now, r, l, l.heaviest(), free)
			if t == nil {
				break
			}
			c.refuseQueued(now, t)
		}
	}
}

// lateIn returns the first of tq's lanes' last-served tickets (see
// refuseLate) that can no longer start by its deadline less its expected
// service time, or that, served newest-first, has been overtaken for its
// whole allowance; nil when each still fits.
func (c *Core) lateIn(now time.Time, r int, l *level, tq *tenantQueue, free float64) *Ticket {
	for _, ln := range tq.lanes {
		t := ln.lastServed()
		if t.req.Deadline.IsZero() {
			continue
		}
		if t.overload && now.Sub(t.enqueued) > c.allowance(t.req.Deadline.Sub(t.enqueued)) {
			// Served newest-first, it has been overtaken for its whole
			// allowance: newer calls will go on taking its turn for as
			// long as the lane stands.
			return t
		}
		wait := c.drain(now, r, ln.class, t.due, tq.ts, c.aheadAbove(r, tq.ts, t.cost)+l.aheadOfLast(tq, t)+1-free)
		if now.Add(wait + c.startMargin(now, &t.req)).After(t.req.Deadline) {
			return t
		}
	}
	return nil
}

// expire refuses, with reason expired, the tickets at the front of each of
// level l's tenant queues whose deadline less their expected (p95)
// service time has passed: they cannot start in time wherever they wait.
// Dequeue drops such work too, but work that is not dequeued — below a
// flood of higher ranks, or of a tenant past its fair share while others
// are served first — would wait until its caller's deadline and learn
// nothing; at the front of its queue it is the oldest, and it is told as
// soon as the gate knows.
func (c *Core) expire(now time.Time, l *level) {
	if l.depth == 0 {
		return
	}
	late := c.lateScratch[:0]
	for tq := l.ring; ; {
		for _, ln := range tq.lanes {
			for t := ln.head; t != nil && !t.req.Deadline.IsZero() && now.Add(c.startMargin(now, &t.req)).After(t.req.Deadline); t = t.next {
				late = append(late, t)
			}
		}
		if tq = tq.next; tq == l.ring {
			break
		}
	}
	for _, t := range late {
		c.reject(now, t, ReasonExpired, c.perSlot())
	}
	clear(late)
	c.lateScratch = late[:0]
}

// refuseQueued refuses queued ticket t for its wait at now. Its queue is
// refusing, as it is when it turns a newcomer away (see refusing).
func (c *Core) refuseQueued(now time.Time, t *Ticket) {
	t.ts.refusingAt(t.rank, t.class).refused(now, standingInterval(t.req.Deadline.Sub(t.enqueued)))
	c.reject(now, t, ReasonQueueWait, c.retryAfterFor(now, t.rank, t.req.Tenant, &t.req))
}

// servedAt is the rank work of rank, tenant ts and cost is served at when
// it takes a slot now: its own, or, for a tenant past its fair share while
// others wait, just above Ranks.LowTier, where pop serves over-share work
// (see pop) — so that a flood's excess does not count as ranking above the
// work of the tenants within their shares.
func (c *Core) servedAt(rank int, ts *tenantState, cost float64) int {
	if low := c.ranks.LowTier; rank > low+1 && c.overShare(ts, cost) {
		return low + 1
	}
	return rank
}

// granted books a slot granted at now to work of tenant ts served at
// rank, of lane class and units of work.
func (c *Core) granted(now time.Time, ts *tenantState, rank int, class uint8, units float64) {
	if !c.cfg.NoEarlyRefusal {
		ts.grants.add(now, rank, len(c.levels), c.rateWindow(), class, units)
	}
}

// rateWindow is the time constant of the grant rates: 32 completions'
// time when every slot is busy, and at least a second — long enough to
// smooth the grants of a few slots, short enough to see a flood start.
func (c *Core) rateWindow() time.Duration { return max(time.Second, 32*c.perSlot()) }

// grantRates are, by rank, the work granted slots per second lately (in
// units, see Ticket.units: a call of the mean service time is one),
// counted in two buckets of one window each, the current one and the one
// before: the rate is the current count plus the share of the previous
// count its window still covers, over a window — a sliding window's
// count, without a clock read or an exponential per grant. A bucket's
// length is the window when it began. lanes count the same by lane of a
// rank, for the lanes that overtake a longer lane's calls (see drain).
type grantRates struct {
	start     time.Time
	length    time.Duration
	cur, prev []float64
	lanes     []laneGrants
}

// laneGrants is the work granted to one lane class of a rank.
type laneGrants struct {
	rank      int
	class     uint8
	cur, prev float64
}

// roll moves the buckets on to now.
func (g *grantRates) roll(now time.Time, window time.Duration) {
	if g.length == 0 {
		g.start, g.length = now, window
		return
	}
	switch end := g.start.Add(g.length); {
	case now.Before(end):
		return
	case now.Before(end.Add(window)):
		copy(g.prev, g.cur)
		for i := range g.lanes {
			g.lanes[i].prev = g.lanes[i].cur
		}
	default:
		clear(g.prev)
		for i := range g.lanes {
			g.lanes[i].prev = 0
		}
	}
	clear(g.cur)
	for i := range g.lanes {
		g.lanes[i].cur = 0
	}
	g.start, g.length = now, window
}

func (g *grantRates) add(now time.Time, rank, ranks int, window time.Duration, class uint8, units float64) {
	if g.cur == nil {
		g.cur, g.prev = make([]float64, ranks), make([]float64, ranks)
	}
	g.roll(now, window)
	g.cur[rank] += units
	for i := range g.lanes {
		if l := &g.lanes[i]; l.rank == rank && l.class == class {
			l.cur += units
			return
		}
	}
	g.lanes = append(g.lanes, laneGrants{rank: rank, class: class, cur: units})
}

// laneRate is the rate work was granted lately to a lane of a rank.
type laneRate struct {
	class uint8
	rate  float64
}

// overtaking is the rate, at now, of the work granted lately that a call
// of rank and lane class waits for besides the work queued ahead of it:
// above, the grants to the ranks above rank; lanes, appended to buf, the
// grants to the lanes of rank whose callers' budgets are shorter — both
// served before it as they arrive (the lanes for a while: see drain).
func (g *grantRates) overtaking(now time.Time, rank int, class uint8, window time.Duration, buf []laneRate) (above float64, lanes []laneRate) {
	if g.cur == nil {
		return 0, buf
	}
	g.roll(now, window)
	left := 1 - float64(now.Sub(g.start))/float64(g.length)
	secs := g.length.Seconds()
	for r := rank + 1; r < len(g.cur); r++ {
		above += g.cur[r] + left*g.prev[r]
	}
	lanes = buf
	if class != noDeadline {
		// A call without a deadline goes by its arrival: the calls with
		// deadlines that come after it do not overtake it.
		for i := range g.lanes {
			if l := &g.lanes[i]; l.rank == rank && l.class < class {
				if r := (l.cur + left*l.prev) / secs; r > 0 {
					lanes = append(lanes, laneRate{class: l.class, rate: r})
				}
			}
		}
	}
	return above / secs, lanes
}

// Observe decides req at now as Arrive would, with wait, and enforces
// nothing of it: a call Arrive would refuse takes nothing and gets the
// refusal it would have had in the Decision; any other call is granted a
// slot at once, beyond the concurrency if need be, and its Decision says
// whether it would have been granted or queued (with the wait it would
// have had). The slots taken past the concurrency stand, in every later
// estimate, for the queue those calls would have waited in: the
// decisions that follow are the ones a gate enforcing the same policy
// would make while that queue drained. Nothing is counted as admitted or
// refused: observe mode's counts are the shell's. It is what a shell runs
// for a call in observe mode (see the chain's mode).
func (c *Core) Observe(now time.Time, req Request, wait bool) (Decision, error) {
	d, _, err := c.observe(now, &req, wait)
	return d, err
}

func (c *Core) observe(now time.Time, req *Request, wait bool) (Decision, *tenantState, error) {
	rank, cost, err := c.rankAndCost(req)
	if err != nil {
		return Decision{}, nil, err
	}
	ts := c.tenant(req.Tenant)
	pl := c.placeOf(now, req)
	d := c.decide(now, req, rank, ts, cost, &pl)
	if d.Verdict == Queued {
		// The waiting room's bounds, with the slots taken past the
		// concurrency as its occupants.
		waiting := c.queued + max(c.inFlight-c.concurrency, 0)
		switch {
		case !wait:
			d.Verdict, d.Reason = Rejected, ReasonQueueWait
			d.RetryAfter = max(d.EstimatedWait, c.perSlot())
		case waiting >= c.cfg.MaxQueue:
			d.Verdict, d.Reason = Rejected, ReasonQueueFull
			d.RetryAfter = c.retryAfterFor(now, d.Rank, req.Tenant, req)
		}
	}
	if d.Verdict == Rejected {
		if d.Reason == ReasonQueueWait && budget(now, req) > 0 {
			// Refused callers that come back are refused early, as
			// they would be when enforced.
			ts.refusingAt(rank, pl.class).refused(now, standingInterval(budget(now, req)))
		}
		return d, ts, nil
	}
	c.take(now, ts, rank, cost, pl.class, pl.units)
	return d, ts, nil
}

// rankAndCost are the rank and the cost in the fair shares of req, or
// an error naming what is invalid.
func (c *Core) rankAndCost(req *Request) (int, float64, error) {
	rank, err := c.ranks.Rank(req)
	if err != nil {
		return 0, 0, err
	}
	cost, err := req.cost()
	return rank, cost, err
}

// take books a slot granted at now to work of rank, cost, lane class
// and units of tenant ts.
func (c *Core) take(now time.Time, ts *tenantState, rank int, cost float64, class uint8, units float64) {
	c.granted(now, ts, c.servedAt(rank, ts, cost), class, units)
	c.inFlight++
	c.running.add(now)
	c.holdRank(rank, 1)
	ts.inFlight++
	ts.inFlightCost += cost
	c.changed(ts)
}
