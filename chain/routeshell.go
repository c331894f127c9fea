package chain

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	"github.com/sluicehq/sluice/admission"
)

// The shells' side of routing: moving an admitted call to another pool
// after its deployment failed it, the provider's rate-limit headers, and
// the pools' state and settings the gateway reads and sets.

// Failover moves an admitted call to the next pool of its route after its
// deployment failed it — o is the failed attempt's outcome: a connection
// failure, a 5xx or a 429, received before any byte reached the caller —
// and reports whether it did. The next pool is the first of the route not
// tried yet, and not down (unless the call can be its probe), whose
// estimate meets the call's deadline; moving there takes a
// token of the global retry budget (when there are retry budgets, and
// unless the failed deployment could not be reached at all, which never
// had the call), waits
// for its requests and tokens per minute and for its gate (within ctx),
// and only then gives back the failed pool's slot, booking the failure
// with the pool's health. When it cannot, the call keeps its pool and
// slot (what it took for the move, retry token included, is given back),
// and the shell answers with the failure. Without routing it never
// moves a call. Not to be called concurrently with Done or Drop.
func (p *Permit) Failover(ctx context.Context, o Outcome) bool {
	rt := p.c.stages.route
	i := p.routeHold()
	if rt == nil || i < 0 || p.req.Observe {
		// An observed call is answered as its deployment answered it:
		// moving it would wait, or be refused, where it was not.
		return false
	}
	old := p.holds.h[i].(*routeHold)
	now := p.c.now()
	if o.Unreachable {
		// Known at once: the pool goes down now, and the calls queued
		// for it leave it now, not when this one has found a slot.
		old.book(now, o)
	}
	tried := old.tried | old.p.bit()
	skip := func(q *pool) bool { return tried&q.bit() != 0 }
	r := p.req
	c, err := rt.pick(now, &r, r.Model, skip)
	if err != nil || !c.fits || (!c.probe && c.p.health.isDown()) {
		// A pool found down takes a failover only as its probe: pick
		// falls back on one when every pool left is down.
		return false
	}
	// A deployment that could not be reached never had the call: moving
	// it is its first attempt, not a retry, and costs no token.
	rb := p.c.stages.retries
	if o.Unreachable {
		rb = nil
	}
	if rb != nil && !rb.global.TryWithdraw(now) {
		return false
	}
	nh := rt.reserve(now, &r, c)
	nh.tried = tried
	r.Pool, r.Upstream, r.UpstreamModel = c.p.idx, c.p.cfg.Deployment, c.p.modelAt(r.Model)
	var gp *admission.Permit
	if pace(ctx, r.NotBefore, p.c.now) {
		gp, err = p.c.gates[c.p.idx].Acquire(ctx, r.admission())
	}
	if gp == nil || err != nil {
		// Not moved: the retry was not made after all.
		now = p.c.now()
		nh.Cancel(now, err)
		if rb != nil {
			rb.global.Refund(now)
		}
		return false
	}
	now = p.c.now()
	_ = old.Settle(now, o) // a route hold's Settle cannot fail
	// A refusal or an unreachable deployment is no service time: its
	// sample would tell the pool's estimates that calls are quick.
	res := o.Result
	if o.Unreachable || o.RateLimited {
		res = admission.Unused
	}
	p.gp.Done(admission.Outcome{Result: res, ServiceTime: now.Sub(p.gp.Start())})
	p.holds.h[i], p.gp, p.req, p.moved = nh, gp, r, 0
	return true
}

// Unreachable is the refusal of an admitted call whose deployment could
// not be reached — no connection was made: the call never reached a
// provider — and that Failover did not move: queue_wait, with the soonest
// estimated wait of its route's other pools or, with every one down, the
// time until the first is probed, and a Retry-After on the retry calendar.
// The failure is booked with the pool's health at once (a connection
// failure takes it down, and the calls queued for it leave). The shell
// answers the caller with this refusal, 503 — never the unreachable
// deployment again, which its probe watches, and never a 502 for a call no
// provider saw — and ends the call with Done(Outcome{Result: Failure,
// Unreachable: true}). Nil without routing. Not to be called concurrently
// with Done or Drop.
func (p *Permit) Unreachable() *admission.Rejection {
	rt := p.c.stages.route
	i := p.routeHold()
	if rt == nil || i < 0 {
		return nil
	}
	h := p.holds.h[i].(*routeHold)
	now := p.c.now()
	h.book(now, Outcome{Result: admission.Failure, Unreachable: true})
	r := p.req
	_, _, rej := rt.elsewhere(now, &r, h.tried|h.p.bit())
	if rej == nil {
		// A pool could take it after all (one came up, or its queue
		// drained since Failover asked): the call is refused all the same
		// — it was not moved — with the soonest start as its chance.
		rej = &admission.Rejection{Reason: admission.ReasonQueueWait, RetryAfter: p.c.gateOf(&p.req).Interval()}
	}
	p.c.stages.spread.assign(now, rej, &p.req, p.c.gateOf(&p.req))
	return rej
}

// wait waits for the call's slot at its pool's gate (Acquire's last step).
// When the gate refuses it there after all — the call waited, and the
// pool slowed or work overtook it so that it can no longer start there in
// time, or the pool's deployment could not be reached and the gate shed
// its queue (routeHold.book) — or grants it a slot at a deployment found
// unreachable meanwhile, the call moves to another pool of its route that can serve
// it in time (router.elsewhere) and waits there; it never comes back to a
// pool it left. When none can, it is refused: with its gate's own refusal
// when its pool is up (a route of one pool refuses as its gate does), with
// the route's (queue_wait, Retry-After until a probe or the soonest start
// elsewhere) when its deployment is unreachable.
func (c *Chain) wait(ctx context.Context, p *Permit) (*admission.Permit, error) {
	start := c.now()
	for {
		gp, err := c.gateOf(&p.req).Acquire(ctx, p.req.admission())
		i := p.routeHold()
		if i < 0 {
			return gp, err
		}
		h := p.holds.h[i].(*routeHold)
		down := !h.probe && h.p.health.dead()
		var rej *admission.Rejection
		switch {
		case err == nil && !down:
			return gp, nil
		case err == nil:
			// It joined the queue as its pool went down: the slot is
			// given back unused, and the call goes elsewhere.
			gp.Drop()
		case ctx.Err() != nil || !errors.As(err, &rej) || rej.ContextDeadline:
			return nil, err
		case !down && !movable(rej.Reason):
			return nil, err
		}
		now := c.now()
		tried := h.tried | h.p.bit()
		r := p.req
		nc, ok, refusal := c.stages.route.elsewhere(now, &r, tried)
		if !ok {
			if down {
				return nil, refusal
			}
			return nil, err
		}
		h.Cancel(now, err) // it never went upstream
		nh := c.stages.route.reserve(now, &r, nc)
		nh.tried = tried
		r.Pool, r.Upstream, r.UpstreamModel = nc.p.idx, nc.p.cfg.Deployment, nc.p.modelAt(r.Model)
		p.holds.h[i], p.req, p.moved = nh, r, now.Sub(start)
		if !pace(ctx, r.NotBefore, c.now) {
			return nil, ctx.Err()
		}
	}
}

// movable are the refusals of a queued call by its gate that another pool
// may not share: its wait there (queue_wait, expired before it could start
// there in time), the bound of its queue or a displacement by work of a
// higher rank.
func movable(r admission.Reason) bool {
	switch r {
	case admission.ReasonQueueWait, admission.ReasonExpired, admission.ReasonQueueFull, admission.ReasonEvicted:
		return true
	}
	return false
}

// bit is the pool's bit in a set of pools tried (the first 64 pools have
// one; the others are never skipped).
func (p *pool) bit() uint64 {
	if p.idx < 64 {
		return 1 << p.idx
	}
	return 0
}

// routeHold is the index of the call's route hold among its holds, -1
// without one.
func (p *Permit) routeHold() int {
	for i := p.holds.n - 1; i >= 0; i-- {
		if _, ok := p.holds.h[i].(*routeHold); ok {
			return i
		}
	}
	return -1
}

// Limits are a provider's counts of a rate limit, as its headers give them
// on an answer: the limit per minute and what remains of it. Zero Limit
// means not sent; Remaining is meaningful only with Known.
type Limits struct {
	Limit, Remaining int64
	Known            bool
}

// ObserveLimits aligns the call's pool on what its provider says remains of
// its requests and tokens per minute: the pool's buckets never hold more
// than the provider would accept. A pool without a configured limit learns
// one from the first answer that gives it, when its PoolConfig.Learn says
// so, so that it paces the calls it sends before the provider refuses
// them.
func (p *Permit) ObserveLimits(requests, tokens Limits) {
	i := p.routeHold()
	if i < 0 {
		return
	}
	pl := p.holds.h[i].(*routeHold).p
	now := p.c.now()
	for _, x := range [...]struct {
		b *atomic.Pointer[bucket]
		l Limits
	}{{&pl.rpm, requests}, {&pl.tpm, tokens}} {
		if !x.l.Known {
			continue
		}
		b := x.b.Load()
		if b == nil {
			if x.l.Limit <= 0 || !pl.cfg.Learn {
				continue
			}
			nb := newBucket(x.l.Limit, now)
			nb.learned = true
			if sh := math.Float64frombits(pl.share.Load()); sh > 0 && sh < 1 {
				nb.setShare(now, sh)
			}
			if !x.b.CompareAndSwap(nil, nb) {
				b = x.b.Load()
			} else {
				b = nb
			}
		}
		b.observe(now, x.l.Limit, x.l.Remaining)
	}
}

// Rank is the rank req would get: the same in every pool, which share the
// chain's classes.
func (c *Chain) Rank(req admission.Request) (int, error) { return c.gates[0].Rank(req) }

// PoolInfo describes one pool of a routing chain.
type PoolInfo struct {
	Name, Deployment, Model, Flavour string
	// Gate is the pool's gate, for its statistics.
	Gate *admission.Gate
}

// Pools lists the pools, in RoutingConfig.Pools order: one, DefaultPool,
// without routing.
func (c *Chain) Pools() []PoolInfo {
	rt := c.stages.route
	out := make([]PoolInfo, len(rt.pools))
	for i, p := range rt.pools {
		out[i] = PoolInfo{Name: p.cfg.Name, Deployment: p.cfg.Deployment, Model: p.cfg.Model, Flavour: p.cfg.Flavour, Gate: c.gates[i]}
	}
	return out
}

// PoolState is a pool's state at now: the tokens and requests its buckets
// hold (false without a bucket) and whether it is down.
type PoolState struct {
	Tokens, Requests           float64
	TokensKnown, RequestsKnown bool
	Down                       bool
}

// PoolState returns pool i's state (see Pools).
func (c *Chain) PoolState(i int) PoolState {
	p := c.stages.route.pools[i]
	now := c.now()
	var s PoolState
	if b := p.tpm.Load(); b != nil {
		s.Tokens, s.TokensKnown = b.available(now), true
	}
	if b := p.rpm.Load(); b != nil {
		s.Requests, s.RequestsKnown = b.available(now), true
	}
	s.Down = p.health.isDown()
	return s
}

// SetPoolShare makes pool i's request and token buckets this replica's
// share of its deployment's limits (in (0, 1]: 1/n with n replicas), the
// buckets learned later included.
func (c *Chain) SetPoolShare(i int, share float64) {
	p := c.stages.route.pools[i]
	now := c.now()
	p.share.Store(math.Float64bits(share))
	for _, b := range [...]*bucket{p.rpm.Load(), p.tpm.Load()} {
		if b != nil {
			b.setShare(now, share)
		}
	}
}

// SetPoolConcurrency sets pool i's concurrency: the gateway's adaptive
// limit acts on each pool's gate.
func (c *Chain) SetPoolConcurrency(i, n int) error { return c.gates[i].SetConcurrency(n) }

// SetPoolTrialConcurrency sets pool i's gate to n slots, of which its
// estimates count on settled only (admission.Gate.SetTrialConcurrency).
func (c *Chain) SetPoolTrialConcurrency(i, n, settled int) error {
	return c.gates[i].SetTrialConcurrency(n, settled)
}
