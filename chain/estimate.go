package chain

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/retrybudget"
)

// Peeker is a Stage that can answer, without taking anything, what its
// Admit would answer now: the refusal it would give (a
// *admission.Rejection), the bad input it would report, or nil — having
// changed r as Admit would (tenant, class, over quota, model). Peek must
// leave the stage exactly as it was: no token withdrawn, no reservation,
// no counter moved. The chain's estimate asks the stages that implement
// it; a stage that does not is assumed to let the call pass.
type Peeker interface {
	Peek(now time.Time, r *Request) error
}

// Estimate is the chain's answer to "what would a call like this get if
// it arrived now?", asked of every stage and then of the gate, with
// nothing taken.
type Estimate struct {
	// Decision is the gate's estimate for the call as the stages would
	// leave it (its rank, wait, service times), with Verdict Rejected and
	// the stage's Reason and RetryAfter when a stage would refuse it. A
	// refusal's RetryAfter is the one the call would be told now, its
	// place on the chain's retry calendar included.
	admission.Decision
	// Request is the call as the stages would leave it: its tenant and
	// tier, the class applied, the model it would call (degraded or not),
	// over quota.
	Request Request
}

// estimate is the one estimate of both shells: the stages' Peeks in order,
// then the gate's estimate at the rank they leave the call at. A stage's
// refusal is the answer; the gate's figures (rank, wait, service times)
// come with it when the gate can give them. Errors are the caller's bad
// input, as Acquire and Arrive report it.
func (s *stages) estimate(now time.Time, r Request, gateOf func(*Request) (func(admission.Request) (admission.Decision, error), calendarGate)) (Estimate, error) {
	var refused *admission.Rejection
	for _, st := range s.all {
		p, ok := st.(Peeker)
		if !ok {
			continue
		}
		if err := p.Peek(now, &r); err != nil {
			if !errors.As(err, &refused) {
				return Estimate{}, err
			}
			break
		}
	}
	estimate, gate := gateOf(&r) // the pool the route stage chose
	d, err := estimate(r.admission())
	switch {
	case err != nil && refused == nil:
		return Estimate{}, err
	case refused != nil:
		d.Verdict, d.Reason, d.RetryAfter = admission.Rejected, refused.Reason, refused.RetryAfter
		if err != nil {
			d.Rank = refused.Rank
		}
	case d.Verdict == admission.Rejected:
		refused = d.Rejection()
	case r.NotBefore.After(now):
		// Paced for its pool's requests or tokens per minute: it waits
		// for them before it reaches its gate, as Arrive queues it.
		d.Verdict, d.EstimatedWait = admission.Queued, r.NotBefore.Sub(now)+d.EstimatedWait
	}
	if refused != nil {
		d.RetryAfter = s.spread.peek(now, refused, &r, gate)
	}
	return Estimate{Decision: d, Request: r}, nil
}

// Estimate says what a call like req would get if it arrived now — from
// every stage (identify, retry budgets, spend ceiling and budgets, the
// ladder) and then the gate — without taking anything: no retry token,
// no spend reservation, no place in the queue or on the retry calendar.
// Errors are what Acquire would report as bad input (ErrUnknownKey, a
// *ClassError, an unknown class, a model without a price).
func (c *Chain) Estimate(req Request) (Estimate, error) {
	return c.stages.estimate(c.now(), req, func(r *Request) (func(admission.Request) (admission.Decision, error), calendarGate) {
		g := c.gateOf(r)
		return g.Estimate, g
	})
}

// Estimate is [Chain.Estimate] at now.
func (c *Core) Estimate(now time.Time, req Request) (Estimate, error) {
	return c.stages.estimate(now, req, func(r *Request) (func(admission.Request) (admission.Decision, error), calendarGate) {
		g := c.gateOf(r)
		return func(ar admission.Request) (admission.Decision, error) { return g.Estimate(now, ar) }, g
	})
}

// Peek sets the call's tenant and tier as Admit does; Admit takes nothing.
func (id *identify) Peek(now time.Time, r *Request) error {
	_, err := id.Admit(now, r)
	return err
}

// Peek answers as Admit would, without depositing or withdrawing: a first
// attempt passes, a retry passes when its tenant's budget and the global
// one both have a token.
func (b *retries) Peek(now time.Time, r *Request) error {
	if r.Attempt == 0 {
		return nil
	}
	b.mu.Lock()
	tb := b.tenant[r.Tenant]
	b.mu.Unlock()
	if tb == nil {
		tb, _ = retrybudget.New(b.perTenant) // what Admit would start it with; validated in newRetries
	}
	for _, rb := range [...]*retrybudget.Budget{tb, b.global} {
		if ok, ra := rb.Peek(now); !ok {
			return refusal(rb, ra)
		}
	}
	return nil
}

// Peek answers as Admit would, from spend.Limiter.Peek: nothing is
// reserved or counted.
func (s *spendStage) Peek(now time.Time, r *Request) error {
	if r.Unpriced {
		return nil
	}
	_, err := s.decide(now, r, s.l.Peek)
	return err
}

var (
	_ Peeker = (*identify)(nil)
	_ Peeker = (*retries)(nil)
	_ Peeker = (*spendStage)(nil)
)
