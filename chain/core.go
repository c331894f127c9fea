package chain

import (
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Core is the chain over an admission.Core, with time as an input: every
// method takes now, nothing blocks, and decisions about queued calls are
// collected with Events after each call that may make them (Arrive,
// Release, Cancel, SetConcurrency). It is what the simulator drives. Not
// safe for concurrent use.
type Core struct {
	gate   *admission.Core
	stages *stages
	events []*Ticket
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
}

// Request returns the call as the stages left it (tenant, tier, model).
func (t *Ticket) Request() *Request { return &t.req }

// Granted says a queued ticket was granted a slot.
func (t *Ticket) Granted() bool { return t.gt.Granted() }

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
	gate, err := admission.NewCore(cfg.Admission)
	if err != nil {
		return nil, err
	}
	st, err := newStages(cfg, gate)
	if err != nil {
		return nil, err
	}
	return &Core{gate: gate, stages: st}, nil
}

// Gate returns the admission core, for its statistics and estimates.
func (c *Core) Gate() *admission.Core { return c.gate }

// Arrive runs the call through the chain at now. A refusal by a stage or
// the gate is a Rejected decision; an error that is not a refusal (an
// unknown key, an unknown class, a model without a price) is returned as
// an error, with nothing taken.
func (c *Core) Arrive(now time.Time, req Request, t *Ticket, wait bool) (Decision, error) {
	c.now = now
	t.req = req
	t.gt.Owner = t
	t.rej = nil
	if d, err := c.stages.admit(now, &t.req, &t.holds); d.Verdict != 0 || err != nil {
		if d.Rejection != nil {
			c.stages.spread.assign(now, d.Rejection, &t.req, c.gate)
		}
		return d, err
	}
	d, err := c.gate.Arrive(now, t.req.admission(), &t.gt, wait)
	if err != nil {
		t.holds.cancel(now)
		return Decision{}, err
	}
	if d.Verdict == admission.Rejected {
		t.holds.cancel(now)
		rej := d.Rejection()
		c.stages.spread.assign(now, rej, &t.req, c.gate)
		return Decision{Verdict: admission.Rejected, Rejection: rej}, nil
	}
	return Decision{Verdict: d.Verdict}, nil
}

// Cancel withdraws a queued ticket whose caller left (reason expired when
// its deadline passed, zero otherwise) and gives back what the stages
// took. It returns false when the ticket was not queued.
func (c *Core) Cancel(now time.Time, t *Ticket, reason admission.Reason) bool {
	c.now = now
	if !c.gate.Cancel(now, &t.gt, reason) {
		return false
	}
	t.holds.cancel(now)
	return true
}

// Events returns the queued tickets decided by the last call: granted, or
// refused (what their stages took already given back). The slice is reused
// by the next call.
func (c *Core) Events() []*Ticket {
	c.events = c.events[:0]
	now := c.now
	for _, gt := range c.gate.Events() {
		t := gt.Owner.(*Ticket)
		if !gt.Granted() {
			t.holds.cancel(now)
			t.rej = gt.Rejection()
			c.stages.spread.assign(now, t.rej, &t.req, c.gate)
		}
		c.events = append(c.events, t)
	}
	return c.events
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
	c.gate.Release(now, t.req.admission(), admission.Outcome{Result: o.Result, ServiceTime: o.ServiceTime})
	return err
}

// RetriesRecognised counts the calls the recognise stage found to be
// retries their callers did not declare (see [Chain.RetriesRecognised]).
func (c *Core) RetriesRecognised() uint64 { return c.stages.retriesRecognised() }

// SetConcurrency changes the number of slots (see admission.Core).
func (c *Core) SetConcurrency(now time.Time, n int) error {
	c.now = now
	return c.gate.SetConcurrency(now, n)
}
