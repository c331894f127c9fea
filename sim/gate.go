package sim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
)

// gateServer is a sluice policy: the admission chain the gateway runs —
// package chain's Core, with the real retry budgets, spend limiter and
// admission.Core behind it — driven in virtual time. The chain's stages
// and their order are the gateway's by construction; what this shell does
// is what the gateway's shell does around it:
//
//   - the request's deadline is the attempt's own (X-Sluice-Timeout-Ms,
//     which every loadgen client sends from its attempt timeout);
//   - a queued request whose caller leaves is withdrawn with Core.Cancel —
//     reason expired when its deadline has passed, none otherwise;
//   - refusals carry the chain's Retry-After;
//   - a call that ends is settled with the usage it reports; a call whose
//     caller leaves while it runs is settled then without usage (the
//     gateway hangs up and sees none: its estimate stands, as wasted).
//
// One difference is stated in the package documentation: a slot is held
// until the upstream call ends even when the caller has left, because the
// provider keeps generating (and billing) it.
type gateServer struct {
	e       *engine
	core    *chain.Core
	tickets []*chain.Ticket   // free tickets
	probe   admission.Request // what estimatedWait asks about
	probeAt int               // the pool estimatedWait asks, with pools
	spend   *spendShell       // nil without the spend limiter
	// paceAt is when the pace event scheduled last is due, if paceSet:
	// the Core's NextPaced then, for the calls the pools' rate limits
	// hold back (policy pools).
	paceAt  time.Duration
	paceSet bool
	// learn is the concurrency controller of the policy learned (nil for
	// the others), fed every answer as the gateway feeds its own;
	// atProvider counts the calls at the upstream.
	learn      *adaptive.Concurrency
	atProvider int
}

func newGateServer(e *engine) (*gateServer, error) {
	s := e.s
	cfg := chain.Config{Admission: s.coreConfig(), Retries: chain.RetryConfig{Disabled: true}}
	if s.policy.gate.retryBudget {
		rb := s.sc.Sluice.RetryBudget
		cfg.Retries = chain.RetryConfig{Budget: rb, PerTenant: rb, Recognise: s.sc.Sluice.Recognise}
	} else {
		// The rungs before retry budgets predate recognition too: they
		// take a caller's word for its attempt, as the gateway once did.
		cfg.Retries.Recognise.Disabled = true
	}
	g := &gateServer{e: e, probe: s.sources[0].req}
	g.probe.Tenant = tenantName(g.probe.Tenant)
	if s.policy.gate.pools {
		cfg.Routing = s.routingConfig()
		for i, p := range cfg.Routing.Pools {
			if p.Model == g.probe.Key {
				g.probeAt = i
			}
		}
	}
	if s.policy.gate.spend {
		var err error
		if g.spend, err = newSpendShell(e); err != nil {
			return nil, fmt.Errorf("policy %s: %w", s.policy.Name, err)
		}
		cfg.Spend = g.spend.l
	}
	core, err := chain.NewCore(cfg)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.policy.Name, err)
	}
	g.core = core
	if s.policy.gate.learn {
		if g.learn, err = adaptive.New(*s.sc.Sluice.Learn, epoch); err != nil {
			return nil, fmt.Errorf("policy %s: %w", s.policy.Name, err)
		}
		e.m.learnedLimit(0, g.learn.Limit())
	}
	return g, nil
}

// request is attempt a as the gateway would present it to the chain: its
// attempt number as the caller's header says it (none for callers that
// send no header), and a fingerprint that is the request's identity — its
// logical request's, or its source's when every request is the same
// prompt — as the gateway's hash of the body would be.
func (g *gateServer) request(a *attempt) chain.Request {
	src := a.c.src
	attempt := int(a.n)
	if src.undeclared {
		attempt = 0
	}
	fp := 1<<63 | a.c.seq
	switch {
	case src.samePrompt:
		fp = 1<<63 | uint64(src.idx)<<40
	case a.c.prompt != 0: // a replayed script's
		fp = 1<<62 | a.c.prompt
	}
	var caller uint64
	if src.calls != nil {
		// A trace's services each send their own key.
		caller = uint64(src.idx) + 1
	}
	return chain.Request{
		Tenant:          tenantName(src.req.Tenant),
		Caller:          caller,
		Tier:            src.req.Tier,
		Class:           src.req.Class,
		Attempt:         attempt,
		AttemptDeclared: !src.undeclared,
		Fingerprint:     fp,
		Deadline:        g.e.s.at(a.leaveAt),
		Model:           src.req.Key,
		InputTokens:     int64(a.c.in),
		MaxOutputTokens: int64(a.c.maxTokens),
	}
}

func (g *gateServer) arrive(now time.Duration, a *attempt) {
	e := g.e
	t := e.s.at(now)
	tk := g.ticket()
	tk.Owner = a
	d, err := g.core.Arrive(t, g.request(a), tk, true)
	if err != nil {
		g.tickets = append(g.tickets, tk)
		e.fail(fmt.Errorf("policy %s: %w", e.s.policy.Name, err))
		return
	}
	e.m.recognised(a, tk.Request().RetrySeen)
	switch d.Verdict {
	case admission.Granted:
		g.start(a, tk)
	case admission.Queued:
		if !tk.Request().NotBefore.IsZero() {
			e.m.paced++
		}
		a.state = stQueued
		a.enqAt = now
		a.slot = tk
	case admission.Rejected:
		g.tickets = append(g.tickets, tk)
		e.refuse(a, refusalOf(d.Rejection.Reason), d.Rejection.RetryAfter, true)
	}
	g.drain() // an eviction to make room
	g.schedulePace()
}

// schedulePace asks the engine for a pace event when the Core holds calls
// back for their pool's rate limits (Request.NotBefore) sooner than the
// one already asked for: as the gateway's shell sleeps until NotBefore.
func (g *gateServer) schedulePace() {
	next, ok := g.core.NextPaced()
	if !ok {
		return
	}
	at := max(next.Sub(epoch), g.e.now)
	if g.paceSet && g.paceAt <= at {
		return
	}
	g.paceAt, g.paceSet = at, true
	g.e.wakePaced(at)
}

// pace presents the calls whose pacing is over to their pools' gates.
func (g *gateServer) pace(now time.Duration) {
	if g.paceSet && now >= g.paceAt {
		g.paceSet = false
	}
	if err := g.core.Advance(g.e.s.at(now)); err != nil {
		g.e.fail(fmt.Errorf("policy %s: %w", g.e.s.policy.Name, err))
	}
	g.drain()
	g.schedulePace()
}

// start begins a's upstream call, with the model the chain chose: the
// source's, or the rung below it when the spend stage degraded the call
// (the spend ladder's) or the route stage did under load (the routing
// ladder's, sluice.degrade). With pools, the model called is the one of
// the call's pool.
func (g *gateServer) start(a *attempt, tk *chain.Ticket) {
	a.slot = tk
	r := tk.Request()
	src := a.c.src
	switch {
	case r.Degraded && r.DegradedBy == chain.DegradedBySpend:
		if src.rung == nil || r.Model != src.rung.name {
			g.e.fail(fmt.Errorf("policy %s: the chain degraded %q to %q, not the spend ladder's rung", g.e.s.policy.Name, src.model.name, r.Model))
			return
		}
		a.model, a.cost, a.degraded = src.rung, src.rungCost, true
	case r.Degraded:
		m, cost, ok := g.e.s.modelOf(src, r.Model)
		if d := g.e.s.sc.Sluice.Degrade; !ok || d == nil || d.Ladder[src.model.name] != r.Model || r.UpstreamModel != r.Model {
			g.e.fail(fmt.Errorf("policy %s: the chain degraded %q to %q (by %s, sent as %q), not sluice.degrade's rung", g.e.s.policy.Name, src.model.name, r.Model, r.DegradedBy, r.UpstreamModel))
			return
		}
		a.model, a.cost, a.degraded = m, cost, true
		g.e.m.degradedByLoad++
	case r.UpstreamModel != "" && r.UpstreamModel != src.model.name:
		g.e.fail(fmt.Errorf("policy %s: the chain sent %q as %q without degrading it", g.e.s.policy.Name, src.model.name, r.UpstreamModel))
		return
	}
	if g.learn != nil {
		g.atProvider++
		a.inflight = int32(g.atProvider)
		a.units = tk.Units()
		a.window = g.learn.Sent(g.e.s.at(g.e.now))
	}
	g.e.grant(a)
}

func (g *gateServer) leave(now time.Duration, a *attempt) {
	tk := a.slot.(*chain.Ticket)
	t := g.e.s.at(now)
	var reason admission.Reason // zero: a plain cancellation
	if !t.Before(tk.Request().Deadline) {
		reason = admission.ReasonExpired
	}
	if !g.core.Cancel(t, tk, reason) {
		// Every decision is collected right after the call that made it,
		// so a queued attempt's ticket is still queued.
		g.e.fail(fmt.Errorf("policy %s: the Core had decided a ticket the simulator believed queued", g.e.s.policy.Name))
		return
	}
	a.slot = nil
	g.tickets = append(g.tickets, tk)
	g.e.withdrawn(a)
}

func (g *gateServer) done(now time.Duration, a *attempt) {
	tk := a.slot.(*chain.Ticket)
	a.slot = nil
	err := g.core.Release(g.e.s.at(now), tk, chain.Outcome{Result: admission.Success, ServiceTime: a.end - a.start,
		Usage: contract.Usage{Input: int64(a.c.in), Output: int64(a.c.out)}, UsageKnown: true})
	tk.Owner = nil
	g.tickets = append(g.tickets, tk)
	if err != nil {
		g.e.fail(fmt.Errorf("policy %s: %w", g.e.s.policy.Name, err))
	}
	g.observe(now, a)
	g.drain()
	g.schedulePace()
}

// observe feeds the answer of a's call to the concurrency controller of
// the policy learned, and gives the gate the limit it returns and the
// part of it measured, which its estimates count on.
func (g *gateServer) observe(now time.Duration, a *attempt) {
	if g.learn == nil {
		return
	}
	g.atProvider--
	before, settled := g.learn.Limit(), g.learn.Settled()
	n := g.learn.Observe(g.e.s.at(now), adaptive.Sample{Sent: g.e.s.at(a.start), Answered: g.e.s.at(a.end), InFlight: int(a.inflight), Units: a.units, Window: a.window})
	if n == before && g.learn.Settled() == settled {
		return
	}
	if err := g.core.SetTrialConcurrency(g.e.s.at(now), n, g.learn.Settled()); err != nil {
		g.e.fail(fmt.Errorf("policy %s: %w", g.e.s.policy.Name, err))
	}
	g.e.m.learnedLimit(now, n)
}

// abandoned settles the call of a caller that left: the gateway hangs up
// and sees no usage, so the estimate stands, and it is wasted. The slot is
// held until the call ends (see done).
func (g *gateServer) abandoned(now time.Duration, a *attempt) {
	tk := a.slot.(*chain.Ticket)
	if err := g.core.Settle(g.e.s.at(now), tk, chain.Outcome{Result: admission.Canceled, ServiceTime: now - a.start}); err != nil {
		g.e.fail(fmt.Errorf("policy %s: %w", g.e.s.policy.Name, err))
	}
}

func (g *gateServer) end(now time.Duration) error { return g.spend.end(g.e.s.at(now)) }

// drain carries out the chain's decisions about queued tickets.
func (g *gateServer) drain() {
	for _, tk := range g.core.Events() {
		a := tk.Owner.(*attempt)
		a.slot = nil
		if tk.Granted() {
			g.start(a, tk)
			continue
		}
		rej := tk.Rejection()
		tk.Owner = nil
		g.tickets = append(g.tickets, tk)
		g.e.refuse(a, refusalOf(rej.Reason), rej.RetryAfter, true)
	}
}

func (g *gateServer) ticket() *chain.Ticket {
	if n := len(g.tickets); n > 0 {
		tk := g.tickets[n-1]
		g.tickets = g.tickets[:n-1]
		return tk
	}
	return new(chain.Ticket)
}

// depth is the calls queued at the gate, or at every pool's.
func (g *gateServer) depth() int {
	pools := g.core.Pools()
	if pools == nil {
		return g.core.Gate().Queued()
	}
	n := 0
	for _, p := range pools {
		n += p.Queued()
	}
	return n
}

// estimatedWait is the gate's estimate for the first source's call; with
// pools, its model's pool's.
func (g *gateServer) estimatedWait(now time.Duration) (time.Duration, bool) {
	gate := g.core.Gate()
	if pools := g.core.Pools(); pools != nil {
		gate = pools[g.probeAt]
	}
	d, err := gate.Estimate(g.e.s.at(now), g.probe)
	if err != nil {
		return 0, false
	}
	return d.EstimatedWait, true
}

func (g *gateServer) sweep(now time.Duration) { g.spend.tick(now) }

func newServer(e *engine) (server, error) {
	if e.s.policy.Sluice && e.s.sc.Replicas != nil {
		return newReplicaServer(e)
	}
	if e.s.policy.Sluice {
		return newGateServer(e)
	}
	return newQueueServer(e), nil
}

// tenantName is the tenant a source's calls are booked to: its own, or
// the anonymous one's.
func tenantName(name string) string {
	if name == "" {
		return chain.AnonymousTenant
	}
	return name
}
