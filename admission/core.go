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
	inFlight    int
	queued      int
	levels      []level
	perTenant   map[string]int // queued tickets per tenant, all ranks
	overload    overload

	all  *window
	keys map[string]*window

	events []*Ticket
	c      counters
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
		perTenant:   make(map[string]int),
		all:         newWindow(cfg.ServiceWindow),
		keys:        make(map[string]*window),
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
	return c.arrive(now, &req, t, wait)
}

// arrive is Arrive without copying the request on the way in.
func (c *Core) arrive(now time.Time, req *Request, t *Ticket, wait bool) (Decision, error) {
	rank, err := c.ranks.Rank(req)
	if err != nil {
		return Decision{}, err
	}
	if t != nil && t.state == ticketQueued {
		return Decision{}, fmt.Errorf("admission: ticket is already queued")
	}
	d := c.decide(now, req, rank)
	if d.Verdict == Rejected {
		c.c.rejected[d.Reason]++
		return d, nil
	}
	if d.Verdict == Granted {
		c.inFlight++
		c.c.admitted++
		return d, nil
	}
	if !wait || t == nil {
		d.Verdict, d.Reason = Rejected, ReasonQueueWait
		d.RetryAfter = max(d.EstimatedWait, c.perSlot())
		c.c.rejected[d.Reason]++
		return d, nil
	}
	// Queued, unless the waiting room is at its bounds.
	if c.cfg.MaxQueuePerTenant > 0 && c.perTenant[req.Tenant] >= c.cfg.MaxQueuePerTenant {
		return c.refuseFull(now, d, req), nil
	}
	if c.queued >= c.cfg.MaxQueue {
		victim := c.victim(rank, req.Tenant)
		if victim == nil {
			return c.refuseFull(now, d, req), nil
		}
		c.reject(now, victim, ReasonEvicted, c.retryAfterFor(now, victim.rank, victim.req.Tenant, &victim.req))
	}
	*t = Ticket{Owner: t.Owner, req: *req, rank: rank, enqueued: now, state: ticketQueued, wait: d.EstimatedWait}
	c.push(t)
	c.c.enqueued++
	return d, nil
}

// decide is the admission rule, without side effects: Granted when a slot is
// free and the work fits its deadline, Rejected when it cannot finish in time,
// else Queued (bounds not yet considered).
func (c *Core) decide(now time.Time, req *Request, rank int) Decision {
	p50, p95 := c.service(req.Key)
	d := Decision{Rank: rank, ServiceP50: p50, ServiceP95: p95}
	var budget time.Duration // what is left of the caller's time
	if hasDeadline := !req.Deadline.IsZero(); hasDeadline {
		if budget = req.Deadline.Sub(now); budget <= 0 {
			d.Verdict, d.Reason = Rejected, ReasonExpired
			d.RetryAfter = c.perSlot()
			return d
		}
	}
	d.EstimatedWait = c.waitFor(rank, req.Tenant)
	if budget > 0 && d.EstimatedWait+p95 > budget {
		d.Verdict, d.Reason = Rejected, ReasonQueueWait
		d.RetryAfter = c.retryAfter(d.EstimatedWait, p95, budget)
		return d
	}
	if c.inFlight < c.concurrency && d.EstimatedWait == 0 {
		d.Verdict = Granted
		return d
	}
	d.Verdict = Queued
	return d
}

func (c *Core) refuseFull(now time.Time, d Decision, req *Request) Decision {
	d.Verdict, d.Reason = Rejected, ReasonQueueFull
	d.RetryAfter = c.retryAfterFor(now, d.Rank, req.Tenant, req)
	c.c.rejected[d.Reason]++
	return d
}

// victim picks the queued ticket a newcomer of rank and tenant may evict at
// the bound: the last-served ticket of the lowest non-empty rank below the
// newcomer's, or, within its own rank, of a tenant holding at least two more
// tickets of that rank than the newcomer's tenant (so the bound is shared
// fairly). Nil when nothing may be evicted.
func (c *Core) victim(rank int, tenant string) *Ticket {
	for r := 0; r < rank; r++ {
		if c.levels[r].depth > 0 {
			return c.levels[r].lastServed()
		}
	}
	l := &c.levels[rank]
	if l.depth == 0 {
		return nil
	}
	own := 0
	if tq := l.queues[tenant]; tq != nil {
		own = tq.n
	}
	if h := l.heaviest(); h.tenant != tenant && h.n >= own+2 {
		return h.lastServed()
	}
	return nil
}

// Release frees one slot held by work with the given key and records its
// outcome, then serves the queue.
func (c *Core) Release(now time.Time, key string, o Outcome) {
	if c.inFlight > 0 {
		c.inFlight--
	}
	if o.Result <= Unused {
		c.c.completed[o.Result]++
	}
	c.record(key, o)
	c.dispatch(now)
}

// record adds a service-time sample per the Result's rules.
func (c *Core) record(key string, o Outcome) {
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
	c.all.add(o.ServiceTime)
	if key == "" {
		return
	}
	w := c.keys[key]
	if w == nil {
		if len(c.keys) >= c.cfg.MaxKeys {
			return
		}
		w = newWindow(c.cfg.ServiceWindow)
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
	c.concurrency = n
	c.dispatch(now)
	return nil
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
		if !t.req.Deadline.IsZero() && !c.cfg.NoDequeueExpiry {
			if now.Add(c.startMargin(t.req.Key)).After(t.req.Deadline) {
				t.state, t.reason, t.decided = ticketRejected, ReasonExpired, now
				t.retry = c.perSlot()
				c.c.rejected[ReasonExpired]++
				c.events = append(c.events, t)
				continue
			}
		}
		t.state, t.decided = ticketGranted, now
		c.inFlight++
		c.c.granted++
		c.events = append(c.events, t)
	}
}

func (c *Core) pop(now time.Time) *Ticket {
	for r := len(c.levels) - 1; r >= 0; r-- {
		if c.levels[r].depth > 0 {
			t := c.levels[r].pop(now, &c.overload)
			c.forget(t)
			return t
		}
	}
	panic("admission: pop from an empty queue") // unreachable: callers check queued
}

func (c *Core) reject(now time.Time, t *Ticket, reason Reason, retry time.Duration) {
	c.unlink(t)
	t.state, t.reason, t.retry, t.decided = ticketRejected, reason, retry, now
	c.c.rejected[reason]++
	c.events = append(c.events, t)
}

func (c *Core) push(t *Ticket) {
	c.levels[t.rank].push(t)
	c.perTenant[t.req.Tenant]++
	c.queued++
}

// unlink removes a queued ticket from every structure.
func (c *Core) unlink(t *Ticket) {
	c.levels[t.rank].remove(t)
	c.forget(t)
}

// forget updates the counts for a ticket that left its level.
func (c *Core) forget(t *Ticket) {
	c.queued--
	if n := c.perTenant[t.req.Tenant] - 1; n > 0 {
		c.perTenant[t.req.Tenant] = n
	} else {
		delete(c.perTenant, t.req.Tenant)
	}
}

// service returns the p50 and p95 service time for key: the key's own window
// once it has enough samples, else all requests', else the configured
// initial service time.
func (c *Core) service(key string) (p50, p95 time.Duration) {
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
// its deadline to be started: the p99. Admission at arrival uses the p95 with
// the wait estimate's own slack; at dequeue the wait is over and only the
// service time is uncertain, and a start that will be late one time in
// twenty is money spent on a probable waste — so the bar to start is
// higher than the bar to wait.
func (c *Core) startMargin(key string) time.Duration {
	if w := c.keys[key]; w != nil && w.count() >= minKeySamples {
		return w.tail()
	}
	if c.all.count() > 0 {
		return c.all.tail()
	}
	return c.cfg.InitialServiceTime
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
	return max(s/time.Duration(c.concurrency), time.Millisecond)
}

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

// waitFor estimates the wait of a newcomer of rank and tenant by Little's
// law: every queued ticket that would be served before it, plus itself, needs
// one completion when all slots are busy; completions come at concurrency /
// service time.
func (c *Core) waitFor(rank int, tenant string) time.Duration {
	ahead := c.ahead(rank, tenant)
	free := c.concurrency - c.inFlight
	need := ahead + 1 - free
	if need <= 0 {
		return 0
	}
	s := c.serviceForRate()
	if s <= 0 {
		return 0
	}
	return scale(need, s, c.concurrency)
}

// maxWait caps estimates far below the largest Duration, so that adding a
// service time (at most maxSample) to one can never overflow.
const maxWait = time.Duration(1 << 62)

// scale returns n·s/k, capped at maxWait.
func scale(n int, s time.Duration, k int) time.Duration {
	if n > 0 && s > 0 && time.Duration(n) > maxWait/s {
		return maxWait
	}
	return min(time.Duration(n)*s/time.Duration(k), maxWait)
}

func (c *Core) ahead(rank int, tenant string) int {
	n := 0
	for r := len(c.levels) - 1; r > rank; r-- {
		n += c.levels[r].depth
	}
	return n + c.levels[rank].ahead(tenant)
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
	wait := c.waitFor(rank, tenant)
	if req.Deadline.IsZero() {
		return max(wait, c.perSlot())
	}
	_, p95 := c.service(req.Key)
	return c.retryAfter(wait, p95, req.Deadline.Sub(now))
}

// Estimate says what would happen to req if it arrived now, without queuing
// it or changing any counter.
func (c *Core) Estimate(now time.Time, req Request) (Decision, error) {
	rank, err := c.ranks.Rank(&req)
	if err != nil {
		return Decision{}, err
	}
	d := c.decide(now, &req, rank)
	if d.Verdict == Queued {
		switch {
		case c.cfg.MaxQueuePerTenant > 0 && c.perTenant[req.Tenant] >= c.cfg.MaxQueuePerTenant,
			c.queued >= c.cfg.MaxQueue && c.victim(rank, req.Tenant) == nil:
			d.Verdict, d.Reason = Rejected, ReasonQueueFull
			d.RetryAfter = c.retryAfterFor(now, rank, req.Tenant, &req)
		}
	}
	return d, nil
}
