package sim

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/retrybudget"
)

// gateServer is a sluice policy: the real admission.Core, driven in virtual
// time exactly as the gateway's Gate drives it in real time, with the real
// retry budgets in front of it as the gateway has them.
//
// The shell's decisions mirror the gateway's:
//
//   - the request's deadline is the attempt's own (X-Sluice-Timeout-Ms, which
//     every loadgen client sends from its attempt timeout);
//   - a queued request whose caller leaves is withdrawn with Core.Cancel —
//     reason expired when its deadline has passed, none otherwise;
//   - a first attempt deposits into its tenant's retry budget and the global
//     one; a retry must withdraw from both or is refused (429 retry_budget);
//   - rejections carry the Core's Retry-After;
//   - with the spend limiter (policy spend), every attempt that passed the
//     retry budgets is put to spend.Limiter.Admit before the Core, as the
//     gateway's spendAdmit does: see spendShell.
//
// One difference is stated in the package documentation: a slot is held
// until the upstream call ends even when the caller has left, because the
// provider keeps generating (and billing) it.
type gateServer struct {
	e       *engine
	core    *admission.Core
	budgets []*retrybudget.Budget // per tenant; nil without the retry budget
	global  *retrybudget.Budget
	tickets []*admission.Ticket // free tickets
	probe   admission.Request   // what estimatedWait asks about
	spend   *spendShell         // nil without the spend limiter
}

func newGateServer(e *engine) (*gateServer, error) {
	s := e.s
	core, err := admission.NewCore(s.coreConfig())
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.policy.Name, err)
	}
	g := &gateServer{e: e, core: core, probe: s.sources[0].req}
	if s.policy.gate.retryBudget {
		cfg, err := s.sc.Sluice.RetryBudget.config()
		if err != nil {
			return nil, fmt.Errorf("sluice.retry_budget: %w", err)
		}
		g.global, _ = retrybudget.New(cfg)
		for range s.tenants {
			b, _ := retrybudget.New(cfg)
			g.budgets = append(g.budgets, b)
		}
	}
	if s.policy.gate.spend {
		if g.spend, err = newSpendShell(e, core); err != nil {
			return nil, fmt.Errorf("policy %s: %w", s.policy.Name, err)
		}
	}
	return g, nil
}

func (g *gateServer) arrive(now time.Duration, a *attempt) {
	e := g.e
	t := e.s.at(now)
	src := a.c.src
	if g.budgets != nil {
		tb := g.budgets[src.tenant]
		if a.n == 0 {
			tb.Deposit(t)
			g.global.Deposit(t)
		} else {
			if !tb.TryWithdraw(t) {
				e.refuse(a, refRetryBudget, max(tb.RetryAfter(t), time.Millisecond), true)
				return
			}
			if !g.global.TryWithdraw(t) {
				tb.Refund(t) // this retry is not sent: its tenant keeps the token
				e.refuse(a, refRetryBudget, max(g.global.RetryAfter(t), time.Millisecond), true)
				return
			}
		}
	}
	req := src.req
	req.Attempt = int(a.n)
	req.Deadline = e.s.at(a.leaveAt)
	if g.spend != nil && !g.spend.admit(t, a, &req) {
		return // refused, or the run failed
	}
	tk := g.ticket()
	tk.Owner = a
	d, err := g.core.Arrive(t, req, tk, true)
	if err != nil {
		g.tickets = append(g.tickets, tk)
		g.spend.cancel(t, a)
		e.fail(fmt.Errorf("policy %s: %w", e.s.policy.Name, err))
		return
	}
	switch d.Verdict {
	case admission.Granted:
		g.tickets = append(g.tickets, tk)
		e.grant(a)
	case admission.Queued:
		a.state = stQueued
		a.enqAt = now
		a.slot = tk
	case admission.Rejected:
		g.tickets = append(g.tickets, tk)
		g.spend.cancel(t, a)
		e.refuse(a, refusalOf(d.Reason), d.RetryAfter, true)
	}
	g.drain() // an eviction to make room
}

func (g *gateServer) leave(now time.Duration, a *attempt) {
	tk := a.slot.(*admission.Ticket)
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
	g.tickets = append(g.tickets, tk)
	g.spend.cancel(t, a)
	g.e.withdrawn(a)
}

func (g *gateServer) done(now time.Duration, a *attempt) {
	t := g.e.s.at(now)
	g.spend.reconcile(t, a)
	g.core.Release(t, a.model.name, admission.Outcome{Result: admission.Success, ServiceTime: a.end - a.start})
	g.drain()
}

func (g *gateServer) abandoned(now time.Duration, a *attempt) {
	g.spend.abandon(g.e.s.at(now), a)
}

func (g *gateServer) end(now time.Duration) error { return g.spend.end(g.e.s.at(now)) }

// drain carries out the Core's decisions about queued tickets.
func (g *gateServer) drain() {
	for _, tk := range g.core.Events() {
		a := tk.Owner.(*attempt)
		a.slot = nil
		if tk.Granted() {
			g.e.grant(a)
		} else {
			rej := tk.Rejection()
			g.spend.cancel(g.e.s.at(g.e.now), a)
			g.e.refuse(a, refusalOf(rej.Reason), rej.RetryAfter, true)
		}
		tk.Owner = nil
		g.tickets = append(g.tickets, tk)
	}
}

func (g *gateServer) ticket() *admission.Ticket {
	if n := len(g.tickets); n > 0 {
		tk := g.tickets[n-1]
		g.tickets = g.tickets[:n-1]
		return tk
	}
	return new(admission.Ticket)
}

func (g *gateServer) depth() int { return g.core.Queued() }

func (g *gateServer) estimatedWait(now time.Duration) (time.Duration, bool) {
	d, err := g.core.Estimate(g.e.s.at(now), g.probe)
	if err != nil {
		return 0, false
	}
	return d.EstimatedWait, true
}

func (g *gateServer) sweep(now time.Duration) { g.spend.tick(now) }

func newServer(e *engine) (server, error) {
	if e.s.policy.Sluice {
		return newGateServer(e)
	}
	return newQueueServer(e), nil
}
