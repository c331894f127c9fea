package sim

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/workload"
)

// setup is a scenario resolved for one run: the arrival window, every time
// point in it, the rates and the policy's configuration.
type setup struct {
	sc       *scenario.Scenario
	policy   Policy
	load     float64
	seed     uint64
	window   time.Duration // arrivals happen in [0, window)
	end      time.Duration // the run stops here: every caller has left
	capacity float64       // nominal calls per second, before any step
	mean     time.Duration // nominal mean service time
	sampler  *sampler
	sources  []*source
	classes  []scenario.Class
	tenants  []string
	bucket   time.Duration
	trace    bool
	// spend is the scenario's spend section completed as the gateway
	// completes its own; nil without one.
	spend      *spend.Config
	rateWindow time.Duration // spend's rate window
	// models are the models calls are made to, by name.
	models map[string]*modelInfo
}

// modelInfo is a model as the simulator runs it: the name the request
// carries, the factor on the service time drawn for a call, the steps of
// its own (upstream.steps[].model), and the provider's slots when it has
// a concurrency of its own.
type modelInfo struct {
	name   string
	factor float64
	steps  []resolvedStep // sorted by at
	slots  int            // zero: the upstream's, shared
}

// source is a traffic source, resolved.
type source struct {
	idx            int
	name           string
	class          int
	deadline       time.Duration
	client         clientKind
	maxAttempts    int
	attemptTimeout time.Duration
	cost           float64 // of one call, in dollars
	tenant         int
	model          *modelInfo
	rung           *modelInfo         // the ladder's next rung below model, or nil
	rungCost       float64            // of one call degraded to rung
	costs          map[string]float64 // of one call to each model, for calls the route stage degrades
	usage          contract.Usage
	maxTokens      int64
	undeclared     bool              // its callers send no retry header (headers: none)
	samePrompt     bool              // every request the same (same_prompt)
	req            admission.Request // Class, Tenant, Tier, Key; the rest per attempt
	base           float64           // first attempts per second before steps and bursts
	segs           []segment
	rng            *rand.Rand
	count          uint64
	replica        int     // the replica its traffic goes to; -1: round-robin
	seg            int     // current segment
	t              float64 // seconds: the latest arrival
	// script, when set (by tests), replaces the Poisson process: the
	// arrivals happen at exactly these offsets.
	script []time.Duration
	// calls, with a trace, are the source's calls: they arrive at their
	// offsets, with their own tokens; the count-th is the one arriving.
	// longest is the longest deadline of their own past the source's.
	calls    []workload.Call
	nextCall int
	longest  time.Duration
}

// segment is a stretch of constant rate, ending at end (seconds).
type segment struct {
	end  float64
	rate float64 // per second
}

// Options tune a run beyond the scenario.
type Options struct {
	// Requests overrides scenario.Scenario.Requests. Zero keeps it.
	Requests int
	// Client, when set, makes every source use this client (naive, polite
	// or client). Empty keeps each source's own.
	Client string
	// Trace collects time series (queue depth, estimated wait, latency per
	// bucket) into Result.Series.
	Trace bool
	// Bucket is the width of a time-series bucket. Zero means the
	// scenario's timeseries.bucket, else 1s.
	Bucket time.Duration
}

func newSetup(sc *scenario.Scenario, policy string, load float64, opt Options) (*setup, error) {
	p, ok := policyByName(policy)
	if !ok {
		return nil, fmt.Errorf("unknown policy %q (known: %v)", policy, scenario.PolicyNames())
	}
	if p.gate.spend && sc.Spend == nil {
		return nil, fmt.Errorf("policy %s runs the spend limiter: scenario %s has no spend section", policy, sc.Name)
	}
	if p.gate.pools && !sc.Upstream.HasPools() {
		return nil, fmt.Errorf("policy %s runs a pool per model: scenario %s needs a concurrency on every model of upstream.models", policy, sc.Name)
	}
	if p.gate.pools && sc.Replicas != nil {
		return nil, fmt.Errorf("policy %s is not run with replicas (scenario %s has a replicas section)", policy, sc.Name)
	}
	if p.gate.learn && (sc.Sluice.Learn == nil || sc.Replicas != nil) {
		return nil, fmt.Errorf("policy %s learns the concurrency: scenario %s needs sluice.learn and no replicas", policy, sc.Name)
	}
	if !(load > 0) || load > scenario.MaxLoad || math.IsInf(load, 0) {
		return nil, fmt.Errorf("load: want a factor in (0, %g], got %v", scenario.MaxLoad, load)
	}
	if opt.Requests < 0 || opt.Requests > scenario.MaxRequests {
		return nil, fmt.Errorf("requests: want 1 to %d, got %d", scenario.MaxRequests, opt.Requests)
	}
	override := clientNaive
	if opt.Client != "" {
		k, ok := clientByName(opt.Client)
		if !ok {
			return nil, fmt.Errorf("client: unknown client %q (known: %v)", opt.Client, scenario.ClientNames())
		}
		override = k
	}
	if opt.Bucket < 0 {
		return nil, fmt.Errorf("bucket: want ≥ 0, got %v", opt.Bucket)
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	s := &setup{sc: sc, policy: p, load: load, seed: sc.Seed, classes: sc.Classes, trace: opt.Trace}
	s.mean = sc.Upstream.Service.Mean()
	if tk := sc.Upstream.Service.Tokens; tk != nil && sc.Trace == nil {
		// The sources' fixed sizes, by their shares.
		var sum, weight float64
		for _, src := range sc.Traffic {
			sum += shareOf(src) * float64(tk.Model().Mean(int(src.InputTokens), int(src.OutputTokens)))
			weight += shareOf(src)
		}
		s.mean = time.Duration(sum / weight)
	}
	var calls *workload.Trace // the trace, played at the load's speed
	if sc.Trace != nil {
		var err error
		if calls, err = s.traceAt(load); err != nil {
			return nil, err
		}
	}
	s.capacity = float64(sc.Upstream.Concurrency) / s.mean.Seconds()
	s.bucket = opt.Bucket
	if s.bucket == 0 && sc.Timeseries != nil {
		s.bucket = sc.Timeseries.Bucket
	}
	if s.bucket == 0 {
		s.bucket = time.Second
	}

	var pricer *spend.Limiter
	if sc.Spend != nil {
		cfg, err := sc.SpendConfig()
		if err != nil {
			return nil, err
		}
		s.spend = cfg
		s.rateWindow = cfg.RateWindow.D()
		if s.rateWindow == 0 {
			s.rateWindow = spend.DefaultRateWindow
		}
		// A Limiter of its own prices the calls of every policy from the
		// spend section's prices; it is never asked to admit anything.
		if pricer, err = spend.New(*cfg, spend.Options{}); err != nil {
			return nil, err
		}
	}
	models := map[string]*modelInfo{}
	s.models = models
	model := func(name string) *modelInfo {
		m := models[name]
		if m == nil {
			m = &modelInfo{name: name, factor: 1}
			if md, ok := sc.Upstream.Models[name]; ok {
				m.factor = md.ServiceFactor
				m.slots = md.Concurrency
			}
			models[name] = m
		}
		return m
	}
	for _, name := range slices.Sorted(maps.Keys(sc.Upstream.Models)) {
		model(name)
	}

	requests := sc.Requests
	if opt.Requests > 0 {
		requests = opt.Requests
	}
	if requests == 0 {
		requests = scenario.DefaultRequests
	}

	shares := 0.0
	for _, src := range sc.Traffic {
		if src.Load == 0 {
			shares += shareOf(src)
		}
	}
	tenants := map[string]int{}
	for i, src := range sc.Traffic {
		r := &source{idx: i, name: src.Name, cost: src.CostPerCall, replica: -1}
		if src.Replica != nil {
			r.replica = *src.Replica
		}
		if r.name == "" {
			r.name = src.Class
			if src.Tenant != "" {
				r.name = src.Tenant + "/" + src.Class
			}
		}
		r.class = slices.IndexFunc(sc.Classes, func(c scenario.Class) bool { return c.Name == src.Class })
		r.deadline = sc.Classes[r.class].Deadline
		r.client, _ = clientByName(src.Client)
		if opt.Client != "" {
			r.client = override
		}
		r.undeclared, r.samePrompt = src.Headers == "none", src.SamePrompt
		r.maxAttempts = src.MaxAttempts
		if r.maxAttempts == 0 {
			r.maxAttempts = 3
		}
		r.attemptTimeout = src.AttemptTimeout
		if r.attemptTimeout == 0 {
			r.attemptTimeout = r.deadline / 2
		}
		if r.cost == 0 {
			r.cost = sc.Upstream.CostPerCall
		}
		r.model = model(src.Model)
		r.costs = map[string]float64{}
		for name := range models {
			r.costs[name] = r.cost
			if pricer != nil {
				if c, err := pricer.Cost(name, r.usage); err == nil {
					r.costs[name] = c
				}
			}
		}
		r.usage = contract.Usage{Input: src.InputTokens, Output: src.OutputTokens}
		r.maxTokens = src.MaxTokens
		if pricer != nil {
			var err error
			// Validate checked that every source's model is priced.
			if r.cost, err = pricer.Cost(src.Model, r.usage); err != nil {
				return nil, fmt.Errorf("traffic[%d].model: %w", i, err)
			}
			if rung, ok := s.spend.Ladder[src.Model]; ok {
				r.rung = model(rung)
				if r.rungCost, err = pricer.Cost(rung, r.usage); err != nil {
					return nil, fmt.Errorf("spend.ladder.%s: %w", src.Model, err)
				}
			}
		}
		t, ok := tenants[src.Tenant]
		if !ok {
			t = len(s.tenants)
			tenants[src.Tenant] = t
			s.tenants = append(s.tenants, src.Tenant)
		}
		r.tenant = t
		tier, _ := admission.ParseTier(src.Tier)
		r.req = admission.Request{Class: src.Class, Tenant: src.Tenant, Tier: tier, Key: src.Model}
		if src.Load > 0 {
			r.base = src.Load * s.capacity
		} else {
			r.base = shareOf(src) / shares * load * s.capacity
		}
		r.rng = rand.New(rand.NewPCG(sc.Seed, mix(saltSource^uint64(i))))
		if src.Deadline > 0 {
			r.deadline = src.Deadline
			if src.AttemptTimeout == 0 {
				r.attemptTimeout = r.deadline / 2
			}
		}
		s.sources = append(s.sources, r)
	}

	var window time.Duration
	if calls != nil {
		// The trace's calls, each to the source named after its service.
		for _, c := range calls.Calls {
			i := 0
			if len(s.sources) > 1 {
				i = slices.IndexFunc(sc.Traffic, func(src scenario.Source) bool { return src.SourceName() == c.Service })
			}
			s.sources[i].calls = append(s.sources[i].calls, c)
		}
		window = calls.Calls[len(calls.Calls)-1].At + time.Nanosecond
		s.window = window
		for _, r := range s.sources {
			for _, c := range r.calls {
				if c.Deadline > 0 && c.Deadline > r.deadline {
					r.longest = max(r.longest, c.Deadline)
				}
			}
		}
	} else {
		var err error
		if window, err = s.solveWindow(float64(requests)); err != nil {
			return nil, err
		}
		s.window = window
		for i := range s.sources {
			s.sources[i].segs = s.segments(i, window)
		}
	}
	var steps []resolvedStep
	for _, st := range sc.Upstream.Steps {
		rs := resolvedStep{at: st.At.Resolve(window), factor: st.Factor}
		if st.Model != "" {
			m := models[st.Model]
			m.steps = append(m.steps, rs)
			continue
		}
		steps = append(steps, rs)
	}
	byAt := func(a, b resolvedStep) int { return cmpDur(a.at, b.at) }
	slices.SortStableFunc(steps, byAt)
	for _, m := range models {
		slices.SortStableFunc(m.steps, byAt)
	}
	s.sampler = newSampler(sc.Upstream.Service, steps)

	// Every caller has stopped listening once its last possible attempt has
	// timed out: a naive caller can spend MaxAttempts × its attempt timeout,
	// the others stop at their deadline.
	var longest time.Duration
	for _, r := range s.sources {
		l := max(r.deadline, r.longest)
		if r.client == clientNaive {
			l = max(l, time.Duration(r.maxAttempts)*r.attemptTimeout)
		}
		longest = max(longest, l)
	}
	s.end = window + longest + time.Nanosecond
	return s, nil
}

func shareOf(src scenario.Source) float64 {
	if src.Share == 0 {
		return 1
	}
	return src.Share
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// segments resolves source i's rate schedule for a window: constant stretches
// covering [0, window].
func (s *setup) segments(i int, window time.Duration) []segment {
	src := s.sc.Traffic[i]
	base := s.sources[i].base
	points := []time.Duration{0, window}
	for _, st := range src.Steps {
		points = append(points, st.At.Resolve(window))
	}
	for _, b := range src.Bursts {
		at := b.At.Resolve(window)
		points = append(points, at, at+b.For.Resolve(window))
	}
	slices.Sort(points)
	points = slices.Compact(points)
	mult := func(t time.Duration) float64 {
		f := 1.0
		var lastAt time.Duration = -1
		for _, st := range src.Steps {
			if at := st.At.Resolve(window); at <= t && at >= lastAt {
				f, lastAt = st.Factor, at
			}
		}
		for _, b := range src.Bursts {
			at := b.At.Resolve(window)
			if at <= t && t < at+b.For.Resolve(window) {
				f *= b.Factor
			}
		}
		return f
	}
	var segs []segment
	for k := 0; k+1 < len(points) && points[k] < window; k++ {
		end := min(points[k+1], window)
		segs = append(segs, segment{end: end.Seconds(), rate: base * mult(points[k])})
	}
	return segs
}

// expected is the expected number of arrivals over every source in a window.
func (s *setup) expected(window time.Duration) float64 {
	n := 0.0
	for i := range s.sources {
		start := 0.0
		for _, sg := range s.segments(i, window) {
			n += (sg.end - start) * sg.rate
			start = sg.end
		}
	}
	return n
}

// solveWindow finds the window in which n arrivals are expected. The
// expectation grows with the window (a step placed at 50% moves with it,
// one placed at 90s does not), so bisection finds it.
func (s *setup) solveWindow(n float64) (time.Duration, error) {
	hi := time.Second
	for s.expected(hi) < n {
		if hi >= scenario.MaxDuration {
			return 0, fmt.Errorf("requests: %v requests would need an arrival window beyond %v at these rates", n, scenario.MaxDuration)
		}
		hi = min(2*hi, scenario.MaxDuration)
	}
	lo := time.Duration(0)
	for hi-lo > time.Millisecond {
		mid := lo + (hi-lo)/2
		if s.expected(mid) < n {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// next returns the offset of the source's next arrival, or false once the
// window is over. Inter-arrival times are exponential in operational time
// (the integral of the rate), which makes each segment a Poisson process of
// its own rate without thinning.
func (r *source) next() (time.Duration, bool) {
	if r.calls != nil {
		if r.nextCall >= len(r.calls) {
			return 0, false
		}
		r.nextCall++
		return r.calls[r.nextCall-1].At, true
	}
	if r.script != nil {
		if len(r.script) == 0 {
			return 0, false
		}
		at := r.script[0]
		r.script = r.script[1:]
		return at, true
	}
	e := r.rng.ExpFloat64()
	for r.seg < len(r.segs) {
		sg := r.segs[r.seg]
		if sg.rate > 0 {
			room := (sg.end - r.t) * sg.rate
			if e < room {
				r.t += e / sg.rate
				return time.Duration(r.t * float64(time.Second)), true
			}
			e -= room
		}
		r.t = sg.end
		r.seg++
	}
	return 0, false
}

// capacityOver is how many calls the upstream could complete in [0, t): the
// integral of concurrency / mean service time, with the steps.
func (s *setup) capacityOver(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	c := float64(s.sc.Upstream.Concurrency)
	mean := s.mean.Seconds()
	total := 0.0
	cur := from
	f := s.sampler.factor(from)
	for _, st := range s.sampler.steps {
		if st.at <= from {
			continue
		}
		if st.at >= to {
			break
		}
		total += (st.at - cur).Seconds() * c / (mean * f)
		cur, f = st.at, st.factor
	}
	return total + (to-cur).Seconds()*c/(mean*f)
}

// ranks returns the admission ranks of the scenario's classes: the
// scenario's (or the default) ranks with priority shedding, every request at
// rank 0 without it.
func (s *setup) ranks(priority bool) *admission.Ranks { return s.sc.Ranks(priority) }

// coreConfig is the admission configuration of a sluice policy.
func (s *setup) coreConfig() admission.Config {
	if s.policy.gate.learn {
		// Not told the upstream's concurrency: the gate starts at the
		// learner's initial limit, with the waiting room the gateway
		// derives for its ceiling (at most 1024).
		l := s.sc.Sluice.Learn.WithDefaults(0)
		cfg := s.coreConfigFor(l.Initial, s.mean)
		if s.sc.Sluice.MaxQueue == 0 {
			cfg.MaxQueue = min(8*l.Max, 1024)
		}
		return cfg
	}
	return s.coreConfigFor(s.sc.Upstream.Concurrency, s.mean)
}

// coreConfigFor is the admission configuration of a sluice policy's gate
// of concurrency slots, for calls whose mean service time is mean (an
// operator's starting guess when sluice.initial_service_time is unset).
func (s *setup) coreConfigFor(concurrency int, mean time.Duration) admission.Config {
	g := s.policy.gate
	sl := s.sc.Sluice
	cfg := admission.Config{
		Concurrency:        concurrency,
		MaxQueue:           sl.MaxQueue,
		MaxQueuePerTenant:  sl.MaxQueuePerTenant,
		Ranks:              s.ranks(g.priority),
		WaitEstimator:      g.estimator,
		InitialServiceTime: sl.InitialServiceTime,
		FIFOOnly:           !g.lifo,
		NoDequeueExpiry:    !g.expiry,
		NoEarlyRefusal:     !g.early,
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 8 * cfg.Concurrency
	}
	if len(sl.Tenants) > 0 {
		// The tenants' shares as the gateway's: a queue share is taken of
		// the gate's own bound by admission.
		cfg.Tenants = sl.Tenants
	}
	if cfg.InitialServiceTime == 0 {
		cfg.InitialServiceTime = mean
	}
	return cfg
}

// modelOf is the model name as the simulator runs it, and what a call of
// source src costs on it; false when the upstream has no such model.
func (s *setup) modelOf(src *source, name string) (*modelInfo, float64, bool) {
	m, ok := s.models[name]
	if !ok {
		return nil, 0, false
	}
	return m, src.costs[name], true
}

// routingConfig is the route stage of the policy pools: a pool per model
// of the upstream — deployment "upstream", the model's name, a gate of the
// model's concurrency, its rpm and tpm — each model routed to its own, and
// sluice.degrade's ladder and classes.
func (s *setup) routingConfig() *chain.RoutingConfig {
	rc := &chain.RoutingConfig{Routes: map[string][]string{}}
	for _, name := range slices.Sorted(maps.Keys(s.sc.Upstream.Models)) {
		md := s.sc.Upstream.Models[name]
		pool := "upstream/" + name
		rc.Pools = append(rc.Pools, chain.PoolConfig{
			Name:       pool,
			Deployment: "upstream",
			Model:      name,
			Admission:  s.coreConfigFor(md.Concurrency, time.Duration(float64(s.mean)*md.ServiceFactor)),
			RPM:        md.RPM,
			TPM:        md.TPM,
			Learn:      true,
		})
		rc.Routes[name] = []string{pool}
	}
	if d := s.sc.Sluice.Degrade; d != nil {
		rc.Ladder = maps.Clone(d.Ladder)
		rc.DegradeClasses = slices.Clone(d.Classes)
	}
	return rc
}

// epoch is virtual time zero as the wall-clock time the admission code and
// the retry budgets are given. Any fixed instant would do.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at converts a virtual offset to the time.Time the cores take.
func (s *setup) at(d time.Duration) time.Time { return epoch.Add(d) }

// traceAt is the scenario's trace played at the speed that offers load
// (see scenario.Scenario.Trace), and the mean service time of its calls
// set as the setup's.
func (s *setup) traceAt(load float64) (*workload.Trace, error) {
	sc := s.sc
	slots := sc.Upstream.Concurrency
	if tk := sc.Upstream.Service.Tokens; tk != nil {
		m := tk.Model()
		t, err := sc.Trace.AtLoad(m, slots, load)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		s.mean = t.MeanService(m)
		return t, nil
	}
	// A service time that ignores tokens: the load is the rate over the
	// capacity.
	span := sc.Trace.Span()
	if span <= 0 || len(sc.Trace.Calls) < 2 {
		return nil, fmt.Errorf("trace: %d calls over %v offer no rate to speed up", len(sc.Trace.Calls), span)
	}
	rate := float64(len(sc.Trace.Calls)-1) / span.Seconds()
	capacity := float64(slots) / s.mean.Seconds()
	t, err := sc.Trace.Faster(load * capacity / rate)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return t, nil
}
