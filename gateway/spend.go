package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// The spend limiter is optional: with no `spend:` section the gateway
// keeps no books and applies no budget.

// spendConfig completes the spend section with what only the gateway knows
// (the gate's ranks) and checks that its tenants are the gateway's.
func (c Config) spendConfig() (*spend.Config, error) {
	if c.Spend == nil {
		return nil, nil
	}
	sc := *c.Spend
	acfg, err := c.admissionConfig()
	if err != nil {
		return nil, err
	}
	top := acfg.Ranks.Count() - 1
	switch {
	case sc.Stages.TopRank == 0:
		sc.Stages.TopRank = top
	case sc.Stages.TopRank != top:
		return nil, errorf("spend.stages.top_rank: %d, but the gate's highest rank is %d", sc.Stages.TopRank, top)
	}
	switch {
	case sc.Stages.OverQuotaRank == nil:
		low := acfg.Ranks.LowTier
		sc.Stages.OverQuotaRank = &low
	case *sc.Stages.OverQuotaRank != acfg.Ranks.LowTier:
		return nil, errorf("spend.stages.over_quota_rank: %d, but the gate's ranks.low_tier is %d", *sc.Stages.OverQuotaRank, acfg.Ranks.LowTier)
	}
	names := map[string]bool{}
	for _, t := range c.Tenants {
		names[t.Name] = true
	}
	if len(c.Tenants) == 0 {
		names[AnonymousTenant] = true
	}
	for _, name := range sortedKeys(sc.Tenants) {
		if !names[name] {
			return nil, errorf("spend.tenants.%s: not a tenant of the gateway (tenants[].name, or %q without tenants)", name, AnonymousTenant)
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}

// spendAdmit asks the limiter about a request. It returns the decision, or
// false when it has already answered the caller (a refusal or bad input).
func (g *Gateway) spendAdmit(w http.ResponseWriter, req *admission.Request, body *callBody) (spend.Decision, bool) {
	if g.spend == nil {
		return spend.Decision{Allow: true, Model: body.model}, true
	}
	rank, err := g.gate.Rank(*req)
	if err != nil {
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_request", msg: err.Error()})
		return spend.Decision{}, false
	}
	d, err := g.spend.Admit(time.Now(), spend.Request{
		Tenant:               req.Tenant,
		Model:                body.model,
		Rank:                 rank,
		Class:                req.Class,
		EstimatedInputTokens: spend.EstimateInputTokens(body.raw),
		MaxOutputTokens:      body.maxTokens,
	})
	switch {
	case errors.Is(err, spend.ErrUnknownModel):
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "model_not_priced",
			msg: fmt.Sprintf("model: %q has no price in spend.prices (and spend.unknown_model is reject)", body.model)})
		return d, false
	case err != nil:
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_request", msg: err.Error()})
		return d, false
	case !d.Allow:
		g.refuse(w, d.Rejection, req.Class, req.Tenant)
		return d, false
	}
	if d.OverQuota {
		req.OverQuota = true
	}
	if d.Degraded {
		raw, err := rewriteModel(body.raw, d.Model)
		if err != nil { // the body was parsed already: cannot happen
			g.spend.Cancel(time.Now(), d.Reservation)
			g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_json", msg: err.Error()})
			return d, false
		}
		body.raw, body.model, req.Key = raw, d.Model, d.Model
		g.metrics.degraded.Inc()
	}
	return d, true
}

// settleSpend replaces the call's reservation with what it cost, once the
// response has ended. A call cut short (the caller left, or its deadline
// passed) is booked at its estimate — a provider that keeps generating bills
// it all — and counted as wasted; the part of the estimate the provider
// probably did not generate because the gateway hung up (the share of the
// model's median service time that had not elapsed) is counted as saved.
func (c *call) settleSpend(result admission.Result, elapsed time.Duration) {
	l := c.g.spend
	if l == nil || c.res == nil {
		return
	}
	now := time.Now()
	var u Usage
	var known bool
	if c.meter != nil {
		u, known = c.meter.done()
	}
	cost, err := l.Reconcile(now, c.res, spend.Usage{Input: u.Input, CachedInput: u.CachedInput, Output: u.Output}, known)
	if err != nil {
		c.g.log.Warn("spend: reconcile failed", "model", c.model, "err", err)
		l.Cancel(now, c.res)
		return
	}
	if result != admission.Canceled {
		return
	}
	_ = l.RecordWasted(now, c.tenant, c.model, cost)
	if p50 := c.g.gate.KeyStats(c.model).P50; p50 > elapsed && !known {
		saved := c.estimate * float64(p50-elapsed) / float64(p50)
		_ = l.RecordSaved(now, c.tenant, c.model, saved)
	}
}

// RunAlerts evaluates the spend alerts until ctx ends (Server.Serve runs
// it; a program that mounts the Gateway itself should too). Without a spend
// section it returns at once.
func (g *Gateway) RunAlerts(ctx context.Context) error {
	if g.alerter == nil {
		return nil
	}
	return g.alerter.Run(ctx)
}
