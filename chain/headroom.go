package chain

import (
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Headroom is a tenant's room for more calls like one request, as a caller
// pacing itself reads a provider's rate-limit headers (the gateway sends
// it in OpenAI's x-ratelimit-* names).
type Headroom struct {
	// Requests is the tenant's room at the call's pool's gate: its share
	// of the slots and the waiting room, judged by the admission rule.
	Requests admission.Headroom
	// TokensKnown says the pool has a tokens-per-minute limit, configured
	// or learned from the provider's headers; then TokensLimit is it (this
	// replica's share), TokensRemaining what is left of it now, and
	// TokensReset how long until it is full again.
	TokensKnown                  bool
	TokensLimit, TokensRemaining int64
	TokensReset                  time.Duration
}

// Headroom is the room of req's tenant for more calls like req — first
// attempts of its class, each with budget to its deadline (0: none) — at
// req's pool when routed (an admitted call's), else at the first pool of
// its model's route (a refused call's). Nothing is taken.
func (c *Chain) Headroom(req Request, budget time.Duration, routed bool) (Headroom, error) {
	now := c.now()
	r := req
	r.Attempt, r.Deadline = 0, time.Time{}
	if budget > 0 {
		r.Deadline = now.Add(budget)
	}
	if rt := c.stages.route; !routed && rt != nil {
		if ps := rt.routeOf(r.Model); len(ps) > 0 {
			r.Pool = ps[0].idx
		}
	}
	var h Headroom
	var err error
	if h.Requests, err = c.gateOf(&r).Headroom(r.admission()); err != nil {
		return Headroom{}, err
	}
	if rt := c.stages.route; rt != nil && r.Pool < len(rt.pools) {
		if b := rt.pools[r.Pool].tpm.Load(); b != nil {
			h.TokensKnown = true
			h.TokensLimit, h.TokensRemaining, h.TokensReset = b.headroom(now)
		}
	}
	return h, nil
}
