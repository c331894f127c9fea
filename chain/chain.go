package chain

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Chain is the chain over an admission.Gate: the blocking shell, in real
// time, that the gateway runs. Acquire asks the stages, then waits for the
// gate; the Permit's Done settles the call with every stage and releases
// its slot. Safe for concurrent use.
type Chain struct {
	gates []*admission.Gate // the pools', in RoutingConfig.Pools order
	// shadows are the pools' pictures of their slots for calls in
	// observe mode (shadow.go), in the order of gates.
	shadows []*shadow
	stages  *stages
	now     func() time.Time
	reconf  sync.Mutex // serializes Reconfigure
}

// New returns a Chain for cfg, or an error naming the invalid field.
func New(cfg Config) (*Chain, error) {
	c := &Chain{now: time.Now}
	gates, rt, err := newPools(cfg.routing(), c.now(), admission.New, func(g *admission.Gate) poolGate { return realGate{g} })
	if err != nil {
		return nil, err
	}
	c.gates = gates
	c.shadows = make([]*shadow, len(gates))
	for i := range c.shadows {
		c.shadows[i] = new(shadow)
	}
	st, err := newStages(cfg, rt)
	if err != nil {
		return nil, err
	}
	c.stages = st
	return c, nil
}

// gateOf is the gate of the call's pool.
func (c *Chain) gateOf(r *Request) *admission.Gate { return c.gates[r.Pool] }

// Gate returns the gate of the first pool — the only one of a chain
// without routing — for its statistics and estimates, and for programs
// that protect other work with the same slots.
func (c *Chain) Gate() *admission.Gate { return c.gates[0] }

// Identify finds the tenant of an API key — the identify stage's own
// lookup — for a shell that authenticates callers before it reads their
// request (the gateway answers 401 before reading a body). It returns
// false for a missing or unknown key when tenants have keys.
func (c *Chain) Identify(apiKey string) (tenant string, tier admission.Tier, ok bool) {
	t := c.stages.identify.byKey(apiKey)
	if t == nil {
		return "", 0, false
	}
	return t.name, t.tier, true
}

// Observes says whether tenant's calls are observed — mode: observe, its
// own or the chain's: decided, counted and forwarded, never refused. A
// name the chain does not know is in the chain's mode.
func (c *Chain) Observes(tenant string) bool {
	tb := c.stages.identify.table.Load()
	if t := tb.byName[tenant]; t != nil {
		return t.observe
	}
	return tb.anonymous.observe
}

// Acquire runs req through the chain and waits for a slot until it is
// granted, the call is refused, or ctx ends. A refusal is a
// *admission.Rejection; a cancelled ctx returns ctx.Err(); other errors
// are the caller's bad input (ErrUnknownKey, an unknown class, a model
// without a price). On success the caller must call Done on the permit.
func (c *Chain) Acquire(ctx context.Context, req Request) (*Permit, error) {
	p := &Permit{c: c, req: req}
	// The call's deadline, once, by the gate's rule: the route stage picks
	// the pool that meets the deadline the gate will judge the call by.
	p.req.Deadline = admission.CallDeadline(ctx, req.Deadline)
	if d, err := c.stages.admit(c.now(), &p.req, &p.holds); err != nil {
		return nil, err
	} else if d.Verdict == admission.Rejected {
		c.stages.spread.assign(c.now(), d.Rejection, &p.req, c.gateOf(&p.req))
		return nil, d.Rejection
	}
	if p.req.Observe {
		return c.observe(p)
	}
	gate := c.gateOf(&p.req)
	if !pace(ctx, p.req.NotBefore, c.now) {
		p.holds.cancel(c.now(), ctx.Err())
		return nil, ctx.Err()
	}
	var gp *admission.Permit
	var err error
	if p.req.overRetryBudget != nil {
		// A recognised retry past its budgets runs only on a slot nobody
		// waits for (retries.Admit).
		gp, err = gate.TryAcquire(p.req.admission())
	} else {
		// The gate's, or another pool's of the call's route (routeshell.go).
		gp, err = c.wait(ctx, p)
		gate = c.gateOf(&p.req)
	}
	if err != nil {
		now := c.now()
		var rej *admission.Rejection
		if errors.As(err, &rej) {
			rej = p.req.refusal(rej)
			err = rej
			c.stages.spread.assign(now, rej, &p.req, gate)
		}
		p.holds.cancel(now, err)
		return nil, err
	}
	p.gp = gp
	return p, nil
}

// observe gives an observed call (Request.Observe) its gate's decision
// without enforcing it: no pacing, no wait, no refusal. A call its gate
// would take gets a slot now, beyond the concurrency if need be, so that
// the calls after it are decided as they would be behind it; one its gate
// would refuse takes no slot — enforced, it would not be there for the
// calls after it — and is sent all the same, the refusal recorded.
func (c *Chain) observe(p *Permit) (*Permit, error) {
	p.req.NotBefore = time.Time{}
	gate := c.gateOf(&p.req)
	gp, d, err := gate.Observe(p.req.admission(), p.req.overRetryBudget == nil)
	now := c.now()
	if err != nil {
		p.holds.cancel(now, err)
		return nil, err
	}
	if rej := d.Rejection(); rej != nil {
		// No Retry-After is told: the refusal calendar is left as it is.
		p.req.would(p.req.refusal(rej))
	}
	if gp != nil {
		p.slot = &shadowSlot{release: func(_ time.Time, o admission.Outcome) { gp.Done(o) }}
	}
	c.shadows[p.req.Pool].take(now, p.slot, gate.Concurrency())
	p.req.WouldWait = d.EstimatedWait
	p.start = now
	return p, nil
}

// pace waits until notBefore (zero: not at all), the time the call's
// requests and tokens per minute allow it to be sent, and reports false
// when ctx ended first.
func pace(ctx context.Context, notBefore time.Time, now func() time.Time) bool {
	if notBefore.IsZero() {
		return ctx.Err() == nil
	}
	d := notBefore.Sub(now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// UpstreamRetry takes a token from the global retry budget for a retry the
// shell makes on its own account (the gateway retrying the provider), and
// says whether it may. Without retry budgets it always refuses.
func (c *Chain) UpstreamRetry(now time.Time) bool {
	return c.stages.retries != nil && c.stages.retries.global.TryWithdraw(now)
}

// Permit is an admitted call: its request as the stages left it and its
// slot. Done settles and releases it; it is safe to call more than once
// and from any goroutine, and only the first call counts.
type Permit struct {
	c     *Chain
	req   Request
	gp    *admission.Permit
	holds holds
	done  atomic.Bool
	moved time.Duration // waited at pools the call left (Chain.wait)
	// An observed call (Request.Observe) has no gp: its slot, if its
	// gate would have let it through, is slot, in its pool's picture
	// (shadow.go); start is when it was sent, its service time's start.
	slot  *shadowSlot
	start time.Time
}

// Request returns the call as the stages left it: its tenant and tier, the
// model to call (degraded or not), over quota, the reserved cost.
func (p *Permit) Request() *Request { return &p.req }

// Units is the call's expected work in calls of its pool's mean service
// time when it was granted (admission.Decision.Units); 1 for an observed
// call.
func (p *Permit) Units() float64 {
	if p.gp == nil {
		return 1
	}
	return p.gp.Units()
}

// QueueTime is how long the call waited for its slot.
func (p *Permit) QueueTime() time.Duration {
	if p.gp == nil {
		return p.moved
	}
	return p.moved + p.gp.QueueTime()
}

// Done books the call's outcome with every stage, then releases its slot.
// A zero ServiceTime is measured from the grant. An error is a stage's
// broken book, for the shell to log; the slot is released regardless.
func (p *Permit) Done(o Outcome) error {
	if !p.done.CompareAndSwap(false, true) {
		return nil
	}
	now := p.c.now()
	if o.ServiceTime <= 0 && p.gp == nil {
		o.ServiceTime = now.Sub(p.start)
	} else if o.ServiceTime <= 0 {
		o.ServiceTime = now.Sub(p.gp.Start())
	}
	err := p.holds.settle(now, o)
	if p.req.Observe {
		c := p.c
		c.shadows[p.req.Pool].end(now, p.slot, gateResult(o), c.gates[p.req.Pool].Concurrency())
		return err
	}
	p.gp.Done(admission.Outcome{Result: gateResult(o), ServiceTime: o.ServiceTime})
	return err
}

// gateResult is the outcome's result as the gate books it: a call whose
// deployment could not be reached has no service time — its sample would
// tell the gate that calls are quick — and is booked unused.
func gateResult(o Outcome) admission.Result {
	if o.Result == admission.Failure && o.Unreachable {
		return admission.Unused
	}
	return o.Result
}

// Drop gives back what the stages took and the slot, for a call that was
// admitted but never sent. Like Done, only the first call of either counts.
func (p *Permit) Drop() {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	now := p.c.now()
	p.holds.cancel(now, nil)
	if p.req.Observe {
		p.c.shadows[p.req.Pool].end(now, p.slot, admission.Unused, p.c.gates[p.req.Pool].Concurrency())
		return
	}
	p.gp.Drop()
}

// RetryBalance is the global retry budget's balance at now, and false
// without retry budgets.
func (c *Chain) RetryBalance(now time.Time) (float64, bool) {
	if c.stages.retries == nil {
		return 0, false
	}
	return c.stages.retries.global.Balance(now), true
}

// RetriesRecognised counts the calls the recognise stage found to be
// retries their callers did not declare (see RecogniseConfig), refused or
// not. Zero with recognition disabled.
func (c *Chain) RetriesRecognised() uint64 { return c.stages.retriesRecognised() }

// TenantInfo describes a configured tenant, without its keys.
type TenantInfo struct {
	Name string
	Tier admission.Tier
	Keys int // how many keys it has
	// Mode is the mode its calls are in: its own, or the chain's.
	Mode string
}

// Tenants lists the configured tenants, in configuration order.
func (c *Chain) Tenants() []TenantInfo {
	tb := c.stages.identify.table.Load()
	out := make([]TenantInfo, 0, len(tb.order))
	for _, t := range tb.order {
		n := 0
		for _, k := range tb.keys {
			if k.tenant == t {
				n++
			}
		}
		out = append(out, TenantInfo{Name: t.name, Tier: t.tier, Keys: n, Mode: modeName(t.observe)})
	}
	return out
}

// Mode is the chain's mode (Config.Mode, as last reconfigured): the mode
// of calls whose tenant names none of its own.
func (c *Chain) Mode() string { return modeName(c.stages.identify.table.Load().anonymous.observe) }

func modeName(observe bool) string {
	if observe {
		return ModeObserve
	}
	return ModeEnforce
}
