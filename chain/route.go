package chain

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// router is the route stage, the last before the gate: it picks the pool
// of each call for the model the earlier stages leave it — the first of
// the model's route that starts it at once, else the first whose estimate
// (the gate's wait and p95, plus the wait for its tokens) meets the call's
// deadline — and reserves the call's requests and tokens from the pool's
// buckets. Its estimates (pick) are also the degrade stage's
// (degrade.go), which sends a call one rung down the ladder before spend
// when none of its model's pools can serve it in time.
type router struct {
	pools    []*pool
	routes   map[string][]*pool
	ladder   map[string]string // RoutingConfig.Ladder, for the degrade stage
	degrade  map[string]bool   // classes degraded without asking
	probe    time.Duration
	maxProbe time.Duration
	gateView GateView // the stages' view: the pools' gates by model
}

// newPools builds a gate per pool of rc with newGate — admission.New for
// the real-time shell, admission.NewCore for the simulator's — and the
// route stage over them, seen through view.
func newPools[G any](rc *RoutingConfig, now time.Time, newGate func(admission.Config) (G, error), view func(G) poolGate) ([]G, *router, error) {
	gates := make([]G, len(rc.Pools))
	views := make([]poolGate, len(rc.Pools))
	for i, pc := range rc.Pools {
		g, err := newGate(pc.Admission)
		if err != nil {
			return nil, nil, fmt.Errorf("routing: pools[%d] (%s): %w", i, pc.Name, err)
		}
		gates[i], views[i] = g, view(g)
	}
	rt, err := newRouter(rc, views, now)
	if err != nil {
		return nil, nil, err
	}
	return gates, rt, nil
}

func newRouter(cfg *RoutingConfig, gates []poolGate, now time.Time) (*router, error) {
	rt := &router{routes: map[string][]*pool{}, ladder: cfg.Ladder, degrade: map[string]bool{},
		probe: cfg.ProbeInterval, maxProbe: cfg.MaxProbeInterval}
	if rt.probe == 0 {
		rt.probe = DefaultProbeInterval
	}
	if rt.maxProbe == 0 {
		rt.maxProbe = DefaultMaxProbeInterval
	}
	if rt.probe < 0 || rt.maxProbe < rt.probe {
		return nil, fmt.Errorf("routing: probe intervals %v and %v, want 0 < probe ≤ max", rt.probe, rt.maxProbe)
	}
	byName := map[string]*pool{}
	for i, pc := range cfg.Pools {
		switch {
		case pc.Name == "" || pc.Deployment == "" || pc.Model == "":
			return nil, fmt.Errorf("routing: pools[%d]: name, deployment and model (or %q) are required", i, AnyModel)
		case byName[pc.Name] != nil:
			return nil, fmt.Errorf("routing: pools[%d]: the name %q is taken", i, pc.Name)
		case pc.RPM < 0 || pc.TPM < 0:
			return nil, fmt.Errorf("routing: pools[%d] (%s): rpm %d, tpm %d: want ≥ 0", i, pc.Name, pc.RPM, pc.TPM)
		}
		p := &pool{cfg: pc, idx: i, gate: gates[i]}
		if pc.RPM > 0 {
			p.rpm.Store(newBucket(pc.RPM, now))
		}
		if pc.TPM > 0 {
			p.tpm.Store(newBucket(pc.TPM, now))
		}
		byName[pc.Name] = p
		rt.pools = append(rt.pools, p)
	}
	if len(rt.pools) == 0 {
		return nil, errors.New("routing: no pools")
	}
	routed := map[*pool]bool{}
	// In order of name, so that a configuration with several faults is
	// told the same one every time.
	for _, model := range slices.Sorted(maps.Keys(cfg.Routes)) {
		names := cfg.Routes[model]
		if len(names) == 0 {
			return nil, fmt.Errorf("routing: routes[%q]: no pools", model)
		}
		for _, n := range names {
			p := byName[n]
			if p == nil {
				return nil, fmt.Errorf("routing: routes[%q]: no pool %q", model, n)
			}
			if slices.Contains(rt.routes[model], p) {
				return nil, fmt.Errorf("routing: routes[%q]: pool %q twice", model, n)
			}
			rt.routes[model] = append(rt.routes[model], p)
			routed[p] = true
		}
	}
	for _, p := range rt.pools {
		if !routed[p] {
			return nil, fmt.Errorf("routing: pool %q is on no route", p.cfg.Name)
		}
	}
	for _, from := range slices.Sorted(maps.Keys(cfg.Ladder)) {
		to := cfg.Ladder[from]
		if rt.routeOf(from) == nil || rt.routeOf(to) == nil {
			return nil, fmt.Errorf("routing: ladder[%q] = %q: both must be routed models", from, to)
		}
		for m, n := to, 0; m != ""; m, n = cfg.Ladder[m], n+1 {
			if m == from || n > len(cfg.Ladder) {
				return nil, fmt.Errorf("routing: ladder[%q]: the ladder loops back to %q", from, from)
			}
		}
	}
	for _, c := range cfg.DegradeClasses {
		rt.degrade[c] = true
	}
	rt.gateView = poolsView{rt}
	return rt, nil
}

// routeOf is model's route: its own, or the route of every model.
func (rt *router) routeOf(model string) []*pool {
	if ps, ok := rt.routes[model]; ok {
		return ps
	}
	return rt.routes[AnyModel]
}

// modelAt is the name model has at pool p: p's model, or the name it is
// asked by when p serves every model.
func (p *pool) modelAt(model string) string {
	if p.cfg.Model == AnyModel {
		return model
	}
	return p.cfg.Model
}

// candidates are the pools that may serve model for the call's flavour.
func (rt *router) candidates(model, flavour string) ([]*pool, error) {
	if model == "" {
		// A call that names no model (a listing passed through): the
		// first pool of its flavour, in configuration order.
		for _, p := range rt.pools {
			if flavour == "" || p.cfg.Flavour == "" || p.cfg.Flavour == flavour {
				return rt.pools[p.idx : p.idx+1], nil
			}
		}
		return nil, &UnknownModelError{Flavour: flavour}
	}
	ps := rt.routeOf(model)
	if len(ps) == 0 {
		return nil, &UnknownModelError{Model: model}
	}
	if flavour == "" {
		return ps, nil
	}
	for _, p := range ps {
		if p.cfg.Flavour == "" || p.cfg.Flavour == flavour {
			continue
		}
		// Some pool of the model speaks another API: keep only the
		// call's (the common case allocates nothing).
		var out []*pool
		for _, q := range ps {
			if q.cfg.Flavour == "" || q.cfg.Flavour == flavour {
				out = append(out, q)
			}
		}
		if len(out) == 0 {
			return nil, &UnknownModelError{Model: model, Flavour: flavour}
		}
		return out, nil
	}
	return ps, nil
}

// choice is one pool considered for a call.
type choice struct {
	p      *pool
	tokens float64       // the call's charge against its tpm
	wait   time.Duration // for tokens, before the gate
	d      admission.Decision
	probe  bool
	fits   bool // the estimate meets the deadline
}

// consider estimates the call at p.
func (rt *router) consider(now time.Time, r *Request, p *pool) (choice, error) {
	c := choice{p: p, tokens: p.charge(r)}
	c.wait = p.tokenWait(now, c.tokens)
	ar := r.admission()
	ar.Key = p.modelAt(r.Model)
	d, err := p.gate.estimate(now, ar)
	if err != nil {
		return c, err
	}
	c.d = d
	c.fits = d.Verdict != admission.Rejected &&
		(r.Deadline.IsZero() || !now.Add(c.wait+d.EstimatedWait+d.ServiceP95).After(r.Deadline))
	return c, nil
}

// pick is the pool of model the call should go to: the first usable one,
// in route order, that starts it at once (a slot free, nothing ahead of
// it, its tokens there) and meets its deadline; else the first whose
// estimate meets its deadline and that would not serve it late (see
// choice.late: its queue serving newest-first, or a wait over a third of
// the call's budget); else the usable one of the soonest estimated start
// among those that meet its deadline; else the usable one of the soonest
// estimated start, with fits false. skip leaves pools out (those a
// failover tried). With every pool down and none due a probe, the first
// is chosen: a call is better sent than refused for a health check.
//
// A call waits at the first pool only when no pool of its route can
// start it now: a first pool that is busy spills to the next, as a
// provisioned deployment spills to a pay-as-you-go one when full. The
// first pool's slots stay full while calls keep coming — a queue there
// would not make it serve more — and a call that waits at it while the
// next idles has only lost time: time it lacks if the first pool slows
// meanwhile (east slowed ×4 in the gateway's failover tests: calls that
// had queued 0.5–1.1 s at east were started into the slowdown with too
// little of their 2 s left, and cut).
//
// A pool whose queue serves newest-first estimates a newcomer's wait as
// short — it is served next — while the callers it overtakes expire:
// were it first of the route, it would take every call and leave the next
// deployment idle.
func (rt *router) pick(now time.Time, r *Request, model string, skip func(*pool) bool) (choice, error) {
	ps, err := rt.candidates(model, r.Flavour)
	if err != nil {
		return choice{}, err
	}
	saved := r.Model
	r.Model = model
	defer func() { r.Model = saved }()
	var first, best, late choice
	foundFirst, found, foundLate := false, false, false
	for _, p := range ps {
		if skip != nil && skip(p) {
			continue
		}
		ok, probe := p.health.usable(now)
		if !ok {
			continue
		}
		c, err := rt.consider(now, r, p)
		if err != nil {
			return choice{}, err
		}
		c.probe = probe
		if c.fits {
			if c.atOnce() {
				return c, nil
			}
			if !c.late(now, r) {
				if !foundFirst {
					first, foundFirst = c, true
				}
				continue
			}
			if !foundLate || soonest(c) < soonest(late) {
				late, foundLate = c, true
			}
			continue
		}
		if !found || soonest(c) < soonest(best) {
			best, found = c, true
		}
	}
	if foundFirst {
		return first, nil
	}
	if foundLate {
		return late, nil
	}
	if found {
		return best, nil
	}
	for _, p := range ps {
		if skip == nil || !skip(p) {
			return rt.consider(now, r, p)
		}
	}
	return choice{}, errNoPool
}

// errNoPool: a failover found every pool of the route tried.
var errNoPool = errors.New("routing: every pool of the route was tried")

// atOnce says the call would start at c's pool now: a slot free there,
// nothing ahead of it, no wait for tokens.
func (c choice) atOnce() bool { return c.wait == 0 && c.d.Verdict == admission.Granted }

// soonest orders choices that do not fit: a refusal last, then by
// estimated wait.
func soonest(c choice) time.Duration {
	if c.d.Verdict == admission.Rejected {
		return maxWait + c.wait + c.d.EstimatedWait
	}
	return c.wait + c.d.EstimatedWait
}

const maxWait = time.Duration(1 << 61)

// late says a call that fits may still not be served in time: it would
// join a queue serving newest-first under overload, where later arrivals
// leave it behind whatever its estimated wait, or wait more than a third
// of its time budget. At half, its queue turns newest-first (admission's
// LIFO target is half the oldest call's budget); and the estimate counts
// the calls queued ahead, not those of higher classes that will arrive
// and overtake it meanwhile, which push a call estimated just under half
// past it. A third leaves that margin: at 3× a model's capacity with 20%
// of the calls interactive, batch calls allowed to degrade were served 93%
// of the time at half, 97% at a third (docs/perf.md). A call that may be
// degraded is better sent one rung down at once, and a call of a route
// with another deployment better sent there.
func (c choice) late(now time.Time, r *Request) bool {
	if c.wait+c.d.EstimatedWait == 0 {
		return false // started at once
	}
	if c.d.Overloaded {
		return true
	}
	return !r.Deadline.IsZero() && c.wait+c.d.EstimatedWait > r.Deadline.Sub(now)/3
}

// inTime says the call would be served in time at c's pool: its
// estimate meets the deadline and the call would not be served late.
func (c choice) inTime(now time.Time, r *Request) bool { return c.fits && !c.late(now, r) }

// route chooses the call's pool for r.Model, as the earlier stages leave
// it (degraded or not), and applies it to r: the pool and the deployment's
// model. A call no pool can serve in time goes to the pool of the soonest
// start, whose gate then decides — unless it must wait for that pool's
// tokens, when it is refused here: its wait for tokens and its gate's
// estimate together miss its deadline, or its gate would refuse it (a call
// is not paced only to be refused).
func (rt *router) route(now time.Time, r *Request) (choice, error) {
	c, err := rt.pick(now, r, r.Model, nil)
	if err != nil {
		return c, err
	}
	r.Pool, r.Upstream, r.UpstreamModel = c.p.idx, c.p.cfg.Deployment, c.p.modelAt(r.Model)
	if !c.fits && c.wait > 0 {
		if rej := c.d.Rejection(); rej != nil {
			// Its gate refuses it now: refused here, before it takes
			// tokens and waits for them only to be refused then.
			rej.RetryAfter = max(rej.RetryAfter, c.wait)
			return c, rej
		}
		// Its gate would take it; its tokens could not be had in time.
		return c, &admission.Rejection{Reason: admission.ReasonQueueWait, EstimatedWait: c.wait + c.d.EstimatedWait,
			RetryAfter: c.wait, Rank: c.d.Rank, Interval: c.p.refill(c.tokens)}
	}
	return c, nil
}

// Admit routes the call and reserves its requests and tokens.
func (rt *router) Admit(now time.Time, r *Request) (Hold, error) {
	c, err := rt.route(now, r)
	if err != nil {
		if r.Observe && c.p != nil {
			// Sent anyway: it takes its requests and tokens, and
			// the calls after it see the pool as it will be.
			return rt.reserve(now, r, c), err
		}
		return nil, err
	}
	return rt.reserve(now, r, c), nil
}

// reserve takes the call's requests and tokens from c's pool and, when
// it is due one, its probe; the wait for them becomes the call's NotBefore.
func (rt *router) reserve(now time.Time, r *Request, c choice) *routeHold {
	h := &routeHold{rt: rt, p: c.p, tokens: c.tokens, maxTokens: r.MaxOutputTokens}
	var w time.Duration
	if b := c.p.tpm.Load(); b != nil {
		w = b.reserve(now, c.tokens)
		h.tpm = b
	}
	if b := c.p.rpm.Load(); b != nil {
		w = max(w, b.reserve(now, 1))
		h.rpm = b
	}
	h.probe = c.probe && c.p.health.takeProbe(now)
	r.NotBefore = time.Time{}
	if w > 0 {
		r.NotBefore = now.Add(w)
	}
	return h
}

// Peek routes the call as Admit would, taking nothing; NotBefore is when
// its pool's requests and tokens would let it be sent.
func (rt *router) Peek(now time.Time, r *Request) error {
	c, err := rt.route(now, r)
	r.NotBefore = time.Time{}
	if err == nil && c.wait > 0 {
		r.NotBefore = now.Add(c.wait)
	}
	return err
}

// routeHold is a call's pool and what it took from the pool's buckets.
type routeHold struct {
	rt        *router
	p         *pool
	tpm, rpm  *bucket // the buckets charged (nil: none)
	tokens    float64
	maxTokens int64
	probe     bool
	tried     uint64 // pools a failover or a move left, by index (the first 64)
	booked    bool   // the outcome was booked with the pool's health (book)
}

// Cancel gives back what was reserved: the call never went upstream.
func (h *routeHold) Cancel(now time.Time, _ error) {
	h.refund(now)
	if h.probe {
		h.p.health.endProbe()
	}
}

func (h *routeHold) refund(now time.Time) {
	if h.tpm != nil {
		h.tpm.give(now, h.tokens)
	}
	if h.rpm != nil {
		h.rpm.give(now, 1)
	}
}

// Settle books the call's outcome with its pool: its health, and the
// tokens charged reconciled with the usage reported (the prompt as
// counted; the output as produced when the call named no max_tokens,
// since a provider charges max_tokens on arrival). A call refused by the
// provider or that never reached it gives its requests and tokens back;
// the provider's rate-limit headers (Permit.ObserveLimits) correct the
// level when the provider counted otherwise.
func (h *routeHold) Settle(now time.Time, o Outcome) error {
	p := h.p
	h.book(now, o)
	if o.Result == admission.Failure || o.Result == admission.Unused {
		h.refund(now)
		return nil
	}
	if !o.UsageKnown {
		return nil
	}
	if o.Usage.Output > 0 {
		p.output.Lock()
		if p.output.mean == 0 {
			p.output.mean = float64(o.Usage.Output)
		} else {
			p.output.mean += (float64(o.Usage.Output) - p.output.mean) / 16
		}
		p.output.Unlock()
	}
	if h.tpm != nil {
		actual := float64(o.Usage.Input)
		if h.maxTokens > 0 {
			actual += float64(h.maxTokens)
		} else {
			actual += float64(o.Usage.Output)
		}
		if actual > 0 {
			h.tpm.give(now, h.tokens-actual)
		}
	}
	return nil
}

// book books the call's outcome with its pool's health, once (Settle, or
// Failover before the call waits elsewhere, so that the calls behind it
// learn at once). A deployment that could not be reached takes the pool
// down and sheds its queue: every call waiting for it is refused there at
// once (queue_wait, Retry-After until the pool's next probe) rather than
// granted a slot whose call cannot reach it, and the shell moves each to
// another pool of its route that can serve it in time, or refuses it
// (Chain.wait). A pool down for failing the calls it received (downCount
// in a row) keeps its queue: those calls may still be served, and fail
// over one by one if not.
func (h *routeHold) book(now time.Time, o Outcome) {
	if h.booked {
		return
	}
	h.booked = true
	p := h.p
	switch {
	case o.Result == admission.Success:
		p.health.result(now, true, false, h.probe, h.rt.probe, h.rt.maxProbe)
	case o.Result == admission.Failure && !o.RateLimited:
		p.health.result(now, false, o.Unreachable, h.probe, h.rt.probe, h.rt.maxProbe)
		if o.Unreachable {
			p.gate.shed(now, p.health.untilProbe(now))
		}
	case h.probe:
		p.health.endProbe()
	}
}

// elsewhere is where a call admitted at a pool that cannot serve it after
// all — its gate refused it while it waited (the pool slowed, or work
// overtook it), or its deployment is down — goes at now: the first pool of
// its route not tried yet (tried, by index), up or due its probe, that
// would serve it in time and not late (pick, choice.inTime). A pool that
// would serve it late is no place for it: it has waited already, and
// there it would wait again, be overtaken by newer calls, and start — if
// it starts — with barely its p95 left, to be cut at its deadline one time
// in twenty, billed. ok false when there is none;
// rej is then its refusal: queue_wait, with the soonest estimated wait of
// the pools left or, with every pool left down, the time until the first
// of them is probed, and a Retry-After that gives the call a chance.
func (rt *router) elsewhere(now time.Time, r *Request, tried uint64) (c choice, ok bool, rej *admission.Rejection) {
	skip := func(q *pool) bool { return q.idx < 64 && tried&(1<<q.idx) != 0 }
	c, err := rt.pick(now, r, r.Model, skip)
	if err == nil && c.inTime(now, r) && (c.probe || !c.p.health.isDown()) {
		return c, true, nil
	}
	rank, _ := rt.pools[0].gate.Rank(r.admission())
	if err == nil && !c.p.health.isDown() {
		// Up, and it cannot serve the call in time.
		if rej = c.d.Rejection(); rej == nil {
			wait := c.wait + c.d.EstimatedWait
			retry := wait
			if !r.Deadline.IsZero() {
				retry = wait + c.d.ServiceP95 - r.Deadline.Sub(now)
			}
			rej = &admission.Rejection{Reason: admission.ReasonQueueWait, EstimatedWait: wait, Rank: c.d.Rank,
				RetryAfter: max(retry, c.p.gate.Interval())}
		}
		return c, false, rej
	}
	// Every pool left is down (or tried): the call has a chance once one
	// of its route's pools is probed and found up.
	var until time.Duration
	found := false
	ps, _ := rt.candidates(r.Model, r.Flavour)
	for _, q := range ps {
		if w := q.health.untilProbe(now); q.health.isDown() && (!found || w < until) {
			until, found = w, true
		}
	}
	return c, false, &admission.Rejection{Reason: admission.ReasonQueueWait, EstimatedWait: until, RetryAfter: until, Rank: rank}
}

// poolsView is the stages' view of the gates when there are several: the
// rank (the same in every pool, which share their classes) and a model's
// service times, from the first pool of its route.
type poolsView struct{ rt *router }

func (v poolsView) Rank(r admission.Request) (int, error) { return v.rt.pools[0].gate.Rank(r) }

func (v poolsView) KeyStats(key string) admission.KeyStats {
	if ps := v.rt.routeOf(key); len(ps) > 0 {
		return ps[0].gate.KeyStats(ps[0].modelAt(key))
	}
	return v.rt.pools[0].gate.KeyStats(key)
}

var (
	_ Stage  = (*router)(nil)
	_ Peeker = (*router)(nil)
)
