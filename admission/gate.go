package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Gate is the blocking shell around a [Core]: the semaphore in front of the
// dependency. Safe for concurrent use.
//
// A mutex guards the Core; channels are used only to wake waiters, and a
// waiter is always woken after the mutex is released.
type Gate struct {
	mu struct {
		sync.Mutex
		core *Core
	}
	// epoch anchors the gate's clock: now is epoch + time.Since(epoch), one
	// monotonic clock read, where time.Now reads the wall clock too and
	// costs twice as much on the admission path. The result carries a
	// monotonic reading, so comparisons with context deadlines are exact.
	epoch time.Time
	// waiters recycles queue entries: a waiter goes back only after its
	// owner has consumed its wake-up, so a recycled one never holds a stale
	// signal.
	waiters sync.Pool
}

type waiter struct {
	t     Ticket
	ready chan struct{} // buffered: the waker never blocks
}

// New returns a gate for cfg, or an error naming the invalid field.
func New(cfg Config) (*Gate, error) {
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	g := &Gate{epoch: time.Now()}
	g.mu.core = core
	g.waiters.New = func() any {
		w := &waiter{ready: make(chan struct{}, 1)}
		w.t.Owner = w
		return w
	}
	return g, nil
}

// Acquire waits for a slot until it is granted, the request is refused, or
// ctx ends. A refusal is a *[Rejection]; a cancelled ctx returns ctx.Err(),
// and a ctx whose deadline passes while waiting returns a Rejection with
// reason expired that also matches context.DeadlineExceeded. The request's
// deadline is the earlier of its own and ctx's ([CallDeadline]). On success the caller must call Done (or Drop)
// on the permit.
func (g *Gate) Acquire(ctx context.Context, req Request) (*Permit, error) {
	// Kept small enough to inline, so that a caller that does not let the
	// permit escape gets it on its own stack: Acquire+Done allocates nothing.
	var p Permit
	return g.acquire(ctx, &req, &p, true)
}

// TryAcquire takes a free slot or refuses at once; it never waits. A request
// that would have had to queue is refused with reason queue_wait, carrying the
// wait it would have had.
func (g *Gate) TryAcquire(req Request) (*Permit, error) {
	var p Permit
	return g.acquire(nil, &req, &p, false)
}

// acquire takes the request by pointer to keep Acquire cheap enough to
// inline; it never retains the pointer.
//
// It is not inlined so that Acquire stays cheap enough to be.
//
//go:noinline
func (g *Gate) acquire(ctx context.Context, reqp *Request, p *Permit, wait bool) (*Permit, error) {
	if err := g.admit(ctx, reqp, p, wait); err != nil {
		return nil, err
	}
	return p, nil
}

func (g *Gate) admit(ctx context.Context, reqp *Request, p *Permit, wait bool) error {
	// reqp points at Acquire's own copy of the request: it may be changed.
	req := reqp
	var done <-chan struct{}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		done = ctx.Done()
		req.Deadline = CallDeadline(ctx, req.Deadline)
	}
	now := g.now()
	var w *waiter
	var t *Ticket
	if wait {
		// Only a request that may wait needs a queue entry.
		w = g.waiters.Get().(*waiter)
		t = &w.t
	}
	var buf [4]*waiter
	g.mu.Lock()
	d, ts, err := g.mu.core.arrive(now, req, t, wait)
	woken := g.eventsLocked(buf[:0])
	g.mu.Unlock()
	wake(woken)
	if err != nil || d.Verdict != Queued {
		if w != nil {
			g.waiters.Put(w)
		}
		if err != nil {
			return err
		}
		if d.Verdict == Rejected {
			return d.Rejection()
		}
		cost, _ := req.cost() // valid: arrive accepted it
		p.grant(g, req, ts, cost, d.Rank, now, 0)
		p.units = d.Units
		return nil
	}

	// Queued. A deadline of the request's own that is earlier than ctx's
	// needs a timer; otherwise ctx carries it.
	var expiry <-chan time.Time
	if ctxDeadline, ok := contextDeadline(ctx); !req.Deadline.IsZero() && (!ok || req.Deadline.Before(ctxDeadline)) {
		timer := time.NewTimer(req.Deadline.Sub(now))
		defer timer.Stop()
		expiry = timer.C
	}
	select {
	case <-w.ready:
		return g.decided(w, p)
	case <-done:
		reason := reasonNone
		if ctx.Err() == context.DeadlineExceeded {
			reason = ReasonExpired
		}
		return g.abandon(w, reason, ctx.Err())
	case <-expiry:
		return g.abandon(w, ReasonExpired, nil)
	}
}

func (g *Gate) now() time.Time { return g.epoch.Add(time.Since(g.epoch)) }

// CallDeadline is the deadline of a call made with ctx whose request says
// own: the earlier of the two, either when the other is zero (or ctx has
// none), zero when neither has one. It is the one rule for a call's
// deadline: the gate applies it, and so does the admission chain before
// its stages estimate the call, so that both judge it by the same time.
func CallDeadline(ctx context.Context, own time.Time) time.Time {
	d, ok := contextDeadline(ctx)
	if !ok || (!own.IsZero() && own.Before(d)) {
		return own
	}
	return d
}

func contextDeadline(ctx context.Context) (time.Time, bool) {
	if ctx == nil {
		return time.Time{}, false
	}
	return ctx.Deadline()
}

// decided turns a woken waiter's ticket into a permit or a rejection.
func (g *Gate) decided(w *waiter, p *Permit) error {
	defer g.waiters.Put(w)
	if w.t.Granted() {
		p.grant(g, &w.t.req, w.t.ts, w.t.cost, w.t.rank, g.now(), w.t.QueueTime())
		p.units = w.t.units
		return nil
	}
	return w.t.Rejection()
}

// abandon takes a waiter out of the queue because its caller stopped
// waiting. If the Core decided it concurrently, that decision stands and is
// undone: a grant nobody will use gives its slot straight back.
func (g *Gate) abandon(w *waiter, reason Reason, cause error) error {
	defer g.waiters.Put(w)
	now := g.now()
	g.mu.Lock()
	queued := g.mu.core.Cancel(now, &w.t, reason)
	g.mu.Unlock()
	if !queued {
		<-w.ready // the waker signals after unlocking; wait for it before reuse
		if w.t.Granted() {
			g.release(g.now(), w.t.ts, w.t.req.Key, w.t.req.Shape, w.t.req.Family, w.t.rank, w.t.cost, Outcome{Result: Unused})
		}
	}
	if reason == reasonNone {
		return cause
	}
	rej := &Rejection{Reason: reason, EstimatedWait: w.t.wait, RetryAfter: w.t.retry, Rank: w.t.rank,
		ContextDeadline: cause == context.DeadlineExceeded}
	if rej.RetryAfter == 0 {
		g.mu.Lock()
		rej.RetryAfter = g.mu.core.perSlot()
		g.mu.Unlock()
	}
	return rej
}

// release gives back a slot of tenant ts for work with the given key and
// shape.
func (g *Gate) release(now time.Time, ts *tenantState, key string, shape, family uint64, rank int, cost float64, o Outcome) {
	var buf [4]*waiter
	g.mu.Lock()
	g.mu.core.release(now, ts, key, shape, family, rank, cost, o)
	woken := g.eventsLocked(buf[:0])
	g.mu.Unlock()
	wake(woken)
}

// eventsLocked collects the waiters the Core decided during the last call.
func (g *Gate) eventsLocked(buf []*waiter) []*waiter {
	for _, t := range g.mu.core.Events() {
		buf = append(buf, t.Owner.(*waiter))
	}
	return buf
}

func wake(ws []*waiter) {
	for _, w := range ws {
		w.ready <- struct{}{}
	}
}

// SetConcurrency changes the number of slots without losing queued work (see
// [Core.SetConcurrency]). n must be at least 1.
func (g *Gate) SetConcurrency(n int) error {
	var buf [16]*waiter
	g.mu.Lock()
	err := g.mu.core.SetConcurrency(g.now(), n)
	woken := g.eventsLocked(buf[:0])
	g.mu.Unlock()
	wake(woken)
	return err
}

// SetTrialConcurrency changes the number of slots to n, of which the
// estimates count on settled only (see [Core.SetTrialConcurrency]).
func (g *Gate) SetTrialConcurrency(n, settled int) error {
	var buf [16]*waiter
	g.mu.Lock()
	err := g.mu.core.SetTrialConcurrency(g.now(), n, settled)
	woken := g.eventsLocked(buf[:0])
	g.mu.Unlock()
	wake(woken)
	return err
}

// Shed refuses every queued request with reason and retry as its
// RetryAfter, and reports how many (see [Core.Shed]).
func (g *Gate) Shed(reason Reason, retry time.Duration) int {
	g.mu.Lock()
	n := g.mu.core.Shed(g.now(), reason, retry)
	woken := g.eventsLocked(make([]*waiter, 0, n))
	g.mu.Unlock()
	wake(woken)
	return n
}

// Observe decides req as Acquire would and enforces nothing of it (see
// [Core.Observe]): a call Acquire would refuse gets a nil Permit and the
// refusal it would have had in the Decision; any other call gets a slot at
// once, beyond the concurrency if need be, which the caller releases with
// Done as for Acquire. wait false decides as TryAcquire would. It never
// blocks.
func (g *Gate) Observe(req Request, wait bool) (*Permit, Decision, error) {
	now := g.now()
	g.mu.Lock()
	d, ts, err := g.mu.core.observe(now, &req, wait)
	g.mu.Unlock()
	if err != nil || d.Verdict == Rejected {
		return nil, d, err
	}
	cost, _ := req.cost() // valid: observe accepted it
	p := &Permit{}
	p.grant(g, &req, ts, cost, d.Rank, now, 0)
	p.units = d.Units
	return p, d, nil
}

// Estimate says what would happen to req if it arrived now, without queuing
// it. A zero Deadline means none.
func (g *Gate) Estimate(req Request) (Decision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Estimate(g.now(), req)
}

// Interval is the expected time between two completions while every slot
// is busy (see [Core.Interval]).
func (g *Gate) Interval() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Interval()
}

// Concurrency is the number of slots.
func (g *Gate) Concurrency() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Concurrency()
}

// Stats returns a snapshot of the gate's state and counters.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Stats(g.now())
}

// KeyStats returns the service-time statistics of one key.
func (g *Gate) KeyStats(key string) KeyStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.KeyStats(key)
}

// Rank returns the rank req would get.
func (g *Gate) Rank(req Request) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Rank(req)
}

// Permit is a granted slot. Call Done when the work ends, or Drop if it was
// never done; both are safe to call more than once and from any goroutine,
// and only the first call counts.
type Permit struct {
	g        *Gate
	key      string
	shape    uint64
	family   uint64
	ts       *tenantState // guarded by g.mu; valid while the slot is held
	cost     float64
	start    time.Time
	queued   time.Duration
	rank     int
	units    float64
	released atomic.Bool
}

func (p *Permit) grant(g *Gate, req *Request, ts *tenantState, cost float64, rank int, start time.Time, queued time.Duration) {
	p.g, p.key, p.shape, p.family, p.ts, p.cost, p.rank, p.start, p.queued = g, req.Key, req.Shape, req.Family, ts, cost, rank, start, queued
}

// Done releases the slot and reports how the work went; the service time
// feeds the estimator (see [Result] for which outcomes count).
func (p *Permit) Done(o Outcome) {
	if p == nil || p.g == nil || !p.released.CompareAndSwap(false, true) {
		return
	}
	// One monotonic clock read gives both the service time and the current
	// time (start + elapsed): a full time.Now costs twice as much here and
	// this is the hot path.
	elapsed := time.Since(p.start)
	if o.ServiceTime <= 0 {
		o.ServiceTime = elapsed
	}
	p.g.release(p.start.Add(elapsed), p.ts, p.key, p.shape, p.family, p.rank, p.cost, o)
}

// Drop gives the slot back without doing the work; nothing is recorded.
func (p *Permit) Drop() { p.Done(Outcome{Result: Unused}) }

// Start is when the slot was granted: the service time of the work is
// measured from it.
func (p *Permit) Start() time.Time { return p.start }

// QueueTime is how long the request waited for its slot.
func (p *Permit) QueueTime() time.Duration { return p.queued }

// Rank is the rank the request was served at.
func (p *Permit) Rank() int { return p.rank }

// Units is the request's expected work, in calls of the gate's mean
// service time (see Decision.Units).
func (p *Permit) Units() float64 { return p.units }

// Keys returns the keys that have service-time statistics of their own.
func (g *Gate) Keys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Keys()
}

// Headroom is req's tenant's room for more requests like req (see
// [Core.Headroom]).
func (g *Gate) Headroom(req Request) (Headroom, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.core.Headroom(g.now(), req)
}
