package chain

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Core is the chain over an admission.Core, with time as an input: every
// method takes now, nothing blocks, and decisions about queued calls are
// collected with Events after each call that may make them (Arrive,
// Release, Cancel, SetConcurrency). It is what the simulator drives. Not
// safe for concurrent use.
type Core struct {
	gates []*admission.Core // the pools', in RoutingConfig.Pools order
	// shadows are the pools' pictures of their slots for calls in observe
	// mode (shadow.go), in the order of gates.
	shadows []*shadow
	stages  *stages
	events  []*Ticket
	// paced are the tickets waiting for their pool's requests or tokens
	// per minute (Request.NotBefore) before they reach its gate; due are
	// those Advance decided at once, for Events.
	paced []*Ticket
	due   []*Ticket
	// now is the time of the last call that could decide queued tickets:
	// Events gives back what refused tickets held as of then.
	now time.Time
}

// Ticket is one call's place in a Core: the request as the stages left it,
// what they hold, and its ticket in the gate. The owner allocates it and
// may reuse it once the Core has decided it and it has been released or
// refused.
type Ticket struct {
	// Owner is the shell's own handle for the call.
	Owner any
	req   Request
	gt    admission.Ticket
	holds holds
	rej   *admission.Rejection // the gate's refusal of it while queued, with its time on the calendar
	// paced: waiting for its NotBefore; granted: granted by the gate when
	// its pacing ended.
	paced, granted bool
	// slot is an observed call's slot in its pool's picture (shadow.go);
	// nil for one its gate would have refused, let through without one.
	slot *shadowSlot
	// units is the gate's Decision.Units of a call granted on arrival.
	units float64
}

// Units is the call's expected work in calls of its pool's mean service
// time (admission.Decision.Units), once granted.
func (t *Ticket) Units() float64 {
	if t.gt.Granted() {
		return t.gt.Units()
	}
	return t.units
}

// Request returns the call as the stages left it (tenant, tier, model).
func (t *Ticket) Request() *Request { return &t.req }

// Granted says a queued ticket was granted a slot.
func (t *Ticket) Granted() bool { return t.granted || t.gt.Granted() }

// Rejection returns the refusal of a ticket the gate refused while queued.
func (t *Ticket) Rejection() *admission.Rejection {
	if t.rej != nil {
		return t.rej
	}
	return t.gt.Rejection()
}

// QueueTime is how long the ticket waited for its slot.
func (t *Ticket) QueueTime() time.Duration { return t.gt.QueueTime() }

// Decision is what Arrive decided.
type Decision struct {
	// Verdict: Granted (call now), Queued (see Events), Rejected.
	Verdict admission.Verdict
	// Rejection is the refusal when Rejected, by a stage or the gate.
	Rejection *admission.Rejection
}

// NewCore returns a Core for cfg, or an error naming the invalid field.
func NewCore(cfg Config) (*Core, error) {
	c := &Core{}
	gates, rt, err := newPools(cfg.routing(), time.Time{}, admission.NewCore, func(g *admission.Core) poolGate { return coreGate{g} })
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
func (c *Core) gateOf(r *Request) *admission.Core { return c.gates[r.Pool] }

// Pools returns the pools' gates, in RoutingConfig.Pools order: one
// without routing.
func (c *Core) Pools() []*admission.Core { return c.gates }

// Validate checks the configuration as New and NewCore would, returning
// their error: it builds the stages and the pools' gates in virtual time
// (no clock, no goroutine) and keeps nothing, so that a configuration
// file's loader checks a chain by the chain's own rule, in one place.
func (cfg Config) Validate() error {
	_, err := NewCore(cfg)
	return err
}

// Gate returns the first pool's gate — the only one without routing — for
// its statistics and estimates.
func (c *Core) Gate() *admission.Core { return c.gates[0] }

// Arrive runs the call through the chain at now. A refusal by a stage or
// the gate is a Rejected decision; an error that is not a refusal (an
// unknown key, an unknown class, a model without a price) is returned as
// an error, with nothing taken. With wait false a call is refused (reason
// queue_wait) rather than queued, whether by its gate or to wait for its
// pool's requests or tokens per minute.
func (c *Core) Arrive(now time.Time, req Request, t *Ticket, wait bool) (Decision, error) {
	c.now = now
	t.req = req
	t.gt.Owner = t
	t.rej = nil
	t.paced, t.granted, t.slot, t.units = false, false, nil, 1
	if d, err := c.stages.admit(now, &t.req, &t.holds); d.Verdict != 0 || err != nil {
		if d.Rejection != nil {
			c.stages.spread.assign(now, d.Rejection, &t.req, c.gateOf(&t.req))
		}
		return d, err
	}
	if t.req.Observe {
		return c.observe(now, t)
	}
	// A recognised retry past its budgets runs only on a slot nobody
	// waits for (retries.Admit).
	wait = wait && t.req.overRetryBudget == nil
	if t.req.NotBefore.After(now) {
		if !wait {
			// Refused rather than queued, as the gate would.
			rej := t.req.refusal(&admission.Rejection{Reason: admission.ReasonQueueWait, EstimatedWait: t.req.NotBefore.Sub(now),
				RetryAfter: t.req.NotBefore.Sub(now)})
			c.stages.spread.assign(now, rej, &t.req, c.gateOf(&t.req))
			t.holds.cancel(now, rej)
			return Decision{Verdict: admission.Rejected, Rejection: rej}, nil
		}
		// Its pool's rate limits pace it: it reaches the gate at
		// NotBefore (Advance), waiting until then as if queued.
		t.paced = true
		c.paced = append(c.paced, t)
		return Decision{Verdict: admission.Queued}, nil
	}
	return c.enter(now, t, wait)
}

// observe gives an observed call its gate's decision without enforcing it
// (see Chain.observe): it is Granted, with a slot unless its gate would
// have refused it.
func (c *Core) observe(now time.Time, t *Ticket) (Decision, error) {
	t.req.NotBefore = time.Time{}
	gate := c.gateOf(&t.req)
	d, err := gate.Observe(now, t.req.admission(), t.req.overRetryBudget == nil)
	if err != nil {
		t.holds.cancel(now, err)
		return Decision{}, err
	}
	if rej := d.Rejection(); rej != nil {
		// No Retry-After is told: the refusal calendar is left as it is.
		t.req.would(t.req.refusal(rej))
	} else {
		req := t.req.admission()
		t.slot = &shadowSlot{release: func(now time.Time, o admission.Outcome) { gate.Release(now, req, o) }}
	}
	c.shadows[t.req.Pool].take(now, t.slot, gate.Concurrency())
	t.req.WouldWait = d.EstimatedWait
	return Decision{Verdict: admission.Granted}, nil
}

// enter presents a ticket the stages admitted to its pool's gate.
func (c *Core) enter(now time.Time, t *Ticket, wait bool) (Decision, error) {
	gate := c.gateOf(&t.req)
	d, err := gate.Arrive(now, t.req.admission(), &t.gt, wait)
	if err != nil {
		t.holds.cancel(now, err)
		return Decision{}, err
	}
	if d.Verdict == admission.Rejected {
		rej := t.req.refusal(d.Rejection())
		c.stages.spread.assign(now, rej, &t.req, gate)
		t.holds.cancel(now, rej)
		return Decision{Verdict: admission.Rejected, Rejection: rej}, nil
	}
	t.units = d.Units
	return Decision{Verdict: d.Verdict}, nil
}

// NextPaced is the earliest NotBefore of the paced tickets, and false when
// none is paced: the shell calls Advance then.
func (c *Core) NextPaced() (time.Time, bool) {
	var first time.Time
	for _, t := range c.paced {
		if first.IsZero() || t.req.NotBefore.Before(first) {
			first = t.req.NotBefore
		}
	}
	return first, !first.IsZero()
}

// Advance presents the paced tickets whose NotBefore has come to their
// gates; those granted or refused at once, like those the gates decide
// later, come back from Events.
func (c *Core) Advance(now time.Time) error {
	c.now = now
	kept := c.paced[:0]
	var first error
	for _, t := range c.paced {
		if t.req.NotBefore.After(now) {
			kept = append(kept, t)
			continue
		}
		t.paced = false
		d, err := c.enter(now, t, true)
		switch {
		case err != nil:
			// The gate refused what the stages let by: the same bad
			// input Arrive would have reported.
			t.rej = &admission.Rejection{Reason: admission.ReasonQueueFull}
			c.due = append(c.due, t)
			if first == nil {
				first = err
			}
		case d.Verdict == admission.Granted:
			t.granted = true
			c.due = append(c.due, t)
		case d.Verdict == admission.Rejected:
			t.rej = d.Rejection
			c.due = append(c.due, t)
		}
	}
	clear(c.paced[len(kept):])
	c.paced = kept
	return first
}

// Cancel withdraws a queued ticket whose caller left (reason expired when
// its deadline passed, zero otherwise) and gives back what the stages
// took. It returns false when the ticket was not queued.
func (c *Core) Cancel(now time.Time, t *Ticket, reason admission.Reason) bool {
	c.now = now
	if t.paced {
		i := slices.Index(c.paced, t)
		c.paced = slices.Delete(c.paced, i, i+1)
		t.paced = false
		t.holds.cancel(now, withdrawal(reason))
		return true
	}
	if !c.gateOf(&t.req).Cancel(now, &t.gt, reason) {
		return false
	}
	t.holds.cancel(now, withdrawal(reason))
	return true
}

// Events returns the queued tickets decided by the last call: granted, or
// refused (what their stages took already given back). The slice is reused
// by the next call.
func (c *Core) Events() []*Ticket {
	c.events = append(c.events[:0], c.due...)
	clear(c.due)
	c.due = c.due[:0]
	for _, g := range c.gates {
		c.collect(g)
	}
	return c.events
}

// collect adds the tickets gate g decided to the events.
func (c *Core) collect(g *admission.Core) {
	for _, gt := range g.Events() {
		t := gt.Owner.(*Ticket)
		if !gt.Granted() {
			t.rej = gt.Rejection()
			c.stages.spread.assign(c.now, t.rej, &t.req, g)
			t.holds.cancel(c.now, t.rej)
		}
		c.events = append(c.events, t)
	}
}

// Settle books a granted call's outcome with its stages (usage, cost,
// waste) without releasing its slot: for a call whose caller left while
// the provider still runs it. Settling twice does nothing.
func (c *Core) Settle(now time.Time, t *Ticket, o Outcome) error {
	return t.holds.settle(now, o)
}

// Release settles a granted call (if Settle has not) and gives its slot
// back, feeding the service time to the gate's estimates.
func (c *Core) Release(now time.Time, t *Ticket, o Outcome) error {
	c.now = now
	err := t.holds.settle(now, o)
	t.granted = false
	if t.req.Observe {
		c.shadows[t.req.Pool].end(now, t.slot, gateResult(o), c.gateOf(&t.req).Concurrency())
		t.slot = nil
		return err
	}
	c.gateOf(&t.req).Release(now, t.req.admission(), admission.Outcome{Result: gateResult(o), ServiceTime: o.ServiceTime})
	return err
}

// RetriesRecognised counts the calls the recognise stage found to be
// retries their callers did not declare (see [Chain.RetriesRecognised]).
func (c *Core) RetriesRecognised() uint64 { return c.stages.retriesRecognised() }

// SetConcurrency changes the number of slots (see admission.Core).
func (c *Core) SetConcurrency(now time.Time, n int) error {
	c.now = now
	return c.gates[0].SetConcurrency(now, n)
}

// SetTrialConcurrency sets the first pool's gate to n slots, of which its
// estimates count on settled only (admission.Core.SetTrialConcurrency).
func (c *Core) SetTrialConcurrency(now time.Time, n, settled int) error {
	c.now = now
	return c.gates[0].SetTrialConcurrency(now, n, settled)
}

// withdrawal is the cause a withdrawn call's holds are told: its deadline
// passed (a refusal, reason expired), or its caller left.
func withdrawal(reason admission.Reason) error {
	if reason == 0 {
		return context.Canceled
	}
	return &admission.Rejection{Reason: reason}
}
