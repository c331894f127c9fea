package chain

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// spendStage asks the spend limiter about the call: the rank it would have
// in the gate (before any over-quota demotion) goes with its tenant,
// model, class and tokens to spend.Limiter.Admit. A refusal is the call's
// answer (429 tenant_budget or 503 spend_ceiling); over quota marks the
// call for the gate; a degraded call continues with the rung's model. The
// model is the one the call will call: the degrade stage, before this one,
// has already sent a call down a rung under load, so the one reservation
// made here is at the right price.
type spendStage struct {
	l    *spend.Limiter
	gate GateView
}

// Admit reserves the call's estimated cost.
func (s *spendStage) Admit(now time.Time, r *Request) (Hold, error) {
	if r.Unpriced {
		return nil, nil
	}
	d, err := s.decide(now, r, s.l.Admit)
	if d.Reservation == nil {
		return nil, err
	}
	// Allowed; or, for an observed call, reserved and refused (err).
	return &spendHold{s: s, res: d.Reservation, tenant: r.Tenant, model: d.Model, estimate: d.EstimatedUSD}, err
}

// decide asks the limiter about the call — ask is its Admit, or its Peek
// for an estimate — and applies its answer to r: over quota, degraded,
// the estimated cost. A refusal is returned as the error. The decision's
// Model is the model priced: r.Model, but for a rung of the routing ladder
// spend has no price for.
func (s *spendStage) decide(now time.Time, r *Request, ask func(time.Time, spend.Request) (spend.Decision, error)) (spend.Decision, error) {
	rank, err := s.gate.Rank(r.admission())
	if err != nil {
		return spend.Decision{}, err
	}
	req := spend.Request{
		Tenant:               r.Tenant,
		Model:                r.Model,
		Rank:                 rank,
		Class:                r.Class,
		EstimatedInputTokens: r.InputTokens,
		MaxOutputTokens:      r.MaxOutputTokens,
		Observe:              r.Observe,
	}
	d, err := ask(now, req)
	if err != nil && r.DegradedBy == DegradedByLoad && errors.Is(err, spend.ErrUnknownModel) {
		// The routing ladder's rung has no price, the model asked may:
		// the call is priced (and refused, or degraded for money) as the
		// model asked, booked high rather than refused for a rung its
		// caller never named.
		req.Model = r.AskedModel
		d, err = ask(now, req)
	}
	switch {
	case err != nil:
		return d, err
	case !d.Allow && d.Reservation == nil:
		return d, d.Rejection
	}
	if d.WouldDegrade != "" {
		r.WouldDegrade = d.WouldDegrade
	}
	if d.OverQuota {
		r.OverQuota = true
	}
	if d.Degraded {
		if !r.Degraded {
			r.AskedModel = r.Model
		}
		// A call degraded under load keeps the model its caller asked;
		// the cause is the last move down.
		r.Model, r.Degraded, r.DegradedBy = d.Model, true, DegradedBySpend
	}
	r.EstimatedUSD = d.EstimatedUSD
	if !d.Allow {
		// Observed: reserved, and refused.
		return d, d.Rejection
	}
	return d, nil
}

// spendHold is one call's reservation, at model.
type spendHold struct {
	s        *spendStage
	res      *spend.Reservation
	tenant   string
	model    string
	estimate float64
}

func (h *spendHold) Cancel(now time.Time, _ error) { h.s.l.Cancel(now, h.res) }

// Settle replaces the reservation with what the call cost. A call cut
// short (the caller left, or its deadline passed) is booked at its
// estimate when no usage was seen — a provider that keeps generating bills
// it all — and counted as wasted; the part of the estimate the provider
// probably did not generate because the call was cut (the share of the
// model's median service time that had not elapsed) is counted as saved.
func (h *spendHold) Settle(now time.Time, o Outcome) error {
	l := h.s.l
	cost, err := l.Reconcile(now, h.res, o.Usage, o.UsageKnown)
	if err != nil {
		l.Cancel(now, h.res)
		return fmt.Errorf("spend: reconcile %s: %w", h.model, err)
	}
	if o.Result != admission.Canceled {
		return nil
	}
	if err := l.RecordWasted(now, h.tenant, h.model, cost); err != nil {
		return fmt.Errorf("spend: record wasted: %w", err)
	}
	if p50 := h.s.gate.KeyStats(h.model).P50; p50 > o.ServiceTime && !o.UsageKnown {
		saved := h.estimate * float64(p50-o.ServiceTime) / float64(p50)
		if err := l.RecordSaved(now, h.tenant, h.model, saved); err != nil {
			return fmt.Errorf("spend: record saved: %w", err)
		}
	}
	return nil
}
