package promise

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/workload"
)

// Production is a scenario of traffic shaped like production's, not a
// storm: two services of very different sizes and deadlines calling one
// model through one class (workload.ProductionShape: chats of a median
// 129-token answer whose callers wait 10 s, code completions of 13 whose
// callers wait 3 s, each service with its own key), arriving at Base × the
// provider's capacity with a burst of two to three times that lasting 10
// to 30 s, in front of a decode-bound provider of Slots slots whose calls
// take 50 ms, 0.02 ms a prompt token and 2 ms an answer token, × a
// lognormal of σ 0.2 (workload.ProductionModel). Callers retry twice at
// once, each attempt given the whole deadline.
//
// Its figures are measured on the same calls against two baselines in the
// same run: no gateway at all (the callers straight at the provider, its
// queue theirs), and the best schedule of the calls made offline
// (workload.Bound: earliest deadline first, a call started only when its
// service's p95 still fits). A gateway must serve at least as many on time
// as no gateway, service by service, and close to the schedule.
type Production struct {
	// Base is the arrival rate between bursts, as a share of the
	// provider's capacity for calls of the shape's sizes.
	Base float64
}

// ProductionSeconds is how long a production scenario's arrivals last,
// both ways: time for its burst (10 to 30 s, starting 15 to 45 s in) and
// the calm after it.
const ProductionSeconds = 90

// prodModel is the model name the production callers ask for: one the
// mock's table does not know, so that it runs at the mock's own latency
// (factor 1), which ProductionModel is.
const prodModel = "llm-production"

// prodSources are the production scenario's callers: its shape's services,
// each its own source of class interactive with its own deadline and its
// share of the calls (the shape's weights, normalised).
func prodSources() []Source {
	svs := workload.ProductionShape().Services
	var total float64
	for _, sv := range svs {
		total += sv.Share
	}
	var out []Source
	for _, sv := range svs {
		out = append(out, Source{Tenant: "", Class: "interactive", Share: sv.Share / total, Deadline: sv.Deadline, Service: sv.Name})
	}
	return out
}

// productionTrace is the calls of one run of p: a trace of the production
// shape over span, at the rate that offers Base × the capacity, the same
// for a seed whichever way it runs.
func productionTrace(p *Production, seed uint64, span time.Duration) (*workload.Trace, error) {
	sh := workload.ProductionShape()
	sh.Span = span
	sh.Rate = sh.RateFor(workload.ProductionModel(), Slots, p.Base)
	return sh.Trace(seed)
}

// productionScenario is sc's calls for a seed as a simulator scenario: the
// trace, the provider by tokens, a source per service with its deadline,
// max_tokens and callers, and the gateway's default waiting room. Its
// natural load is the load to run it at (the trace at its own speed).
func productionScenario(sc Scenario, v Variant, tr *workload.Trace) (*scenario.Scenario, float64, error) {
	def, err := gatewayDefaults(Slots)
	if err != nil {
		return nil, 0, err
	}
	maxQueue, _ := def.EffectiveMaxQueue()
	m := workload.ProductionModel()
	s := &scenario.Scenario{
		Name: sc.Name,
		Upstream: scenario.Upstream{Concurrency: Slots,
			Service: scenario.Service{Tokens: &scenario.Tokens{Base: m.Base, PerPromptToken: m.PerPromptToken, PerOutputToken: m.PerOutputToken, Sigma: m.Sigma}}},
		Classes: []scenario.Class{{Name: "interactive", Deadline: longestDeadline(sc)}},
		Sluice:  scenario.SluiceConfig{MaxQueue: maxQueue},
		Trace:   tr,
	}
	headers := "attempt"
	if v.Undeclared {
		headers = "none"
	}
	for _, src := range sc.Sources {
		sv, _ := workload.ProductionShape().Service(src.Service)
		s.Traffic = append(s.Traffic, scenario.Source{
			Name:           src.Service,
			Class:          src.Class,
			Deadline:       src.Deadline,
			Client:         "naive",
			MaxAttempts:    3,
			AttemptTimeout: src.Deadline,
			Headers:        headers,
			MaxTokens:      int64(sv.MaxTokens),
		})
	}
	if err := s.Validate(); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", sc.Name, err)
	}
	return s, tr.Load(m, Slots), nil
}

func longestDeadline(sc Scenario) time.Duration {
	var d time.Duration
	for _, src := range sc.Sources {
		d = max(d, src.Deadline)
	}
	return d
}

// runProductionSim runs a production scenario in the simulator: the
// policy the gateway runs (told the slots, or learning them), "fifo" — no
// gateway: the provider's own queue — and the offline bound, on the same
// calls.
func runProductionSim(ctx context.Context, sc Scenario, v Variant, opt SimOptions, seconds float64) (*Result, error) {
	tr, err := productionTrace(sc.Production, opt.Seed, time.Duration(seconds*float64(time.Second)))
	if err != nil {
		return nil, err
	}
	s, load, err := productionScenario(sc, v, tr)
	if err != nil {
		return nil, err
	}
	s.Seed = opt.Seed
	policy := scenario.PolicySluice
	if opt.Learn {
		policy = scenario.PolicyLearned
		s.Sluice.Learn = &adaptive.Config{}
		s.Sluice.MaxQueue = 0 // the gateway's room for a learnt concurrency
	}
	start := time.Now()
	r, err := sim.Run(ctx, s, policy, load, sim.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", sc.Name, v, err)
	}
	fifo, err := sim.Run(ctx, s, scenario.PolicyFIFO, load, sim.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s %s: no gateway: %w", sc.Name, v, err)
	}
	b, err := sim.Bound(s, load)
	if err != nil {
		return nil, err
	}
	out := &Result{
		Scenario:      sc.Name,
		Variant:       v.String(),
		Way:           "sim",
		GoodputPct:    r.GoodputPct,
		WastePct:      r.WastePct,
		UnansweredPct: r.UnansweredPct,
		RefusalP99Ms:  r.RefusalP99Ms,
		Refusals:      r.Refused,
		Success:       map[string]float64{},
		PeakInFlight:  -1,
		Declared:      !v.Undeclared,
		Learnt:        opt.Learn,
		Recognised:    r.RetriesRecognised + r.FirstsRecognised,
		OnTime:        r.OnTime,
		Requests:      r.Requests,
		NoGateway:     &Baseline{OnTime: fifo.OnTime, Success: map[string]float64{}},
		Bound:         &Baseline{OnTime: b.OnTime, Success: map[string]float64{}},
		Seconds:       time.Since(start).Seconds(),
	}
	for _, src := range r.Sources {
		out.Success[src.Name] = src.SuccessPct
	}
	for _, src := range fifo.Sources {
		out.NoGateway.Success[src.Name] = src.SuccessPct
	}
	for _, src := range b.Sources {
		out.Bound.Success[src.Name] = src.SuccessPct
	}
	if r.Learned != nil {
		out.Limits = [][]int{r.Learned.Limit}
	}
	return out, nil
}

// Baseline is what a baseline served of a production scenario's calls:
// its on-time answers, and its success per source.
type Baseline struct {
	OnTime  int
	Success map[string]float64
}

// The production floors, the figures of issue 35.

// vsNoGateway: the on-time answers at least min % of no gateway's.
func vsNoGateway(min float64) Floor {
	return Floor{What: "on time % of no gateway's", Min: true, Bound: min,
		Of: func(r *Result) (float64, bool) {
			if r.NoGateway == nil || r.NoGateway.OnTime == 0 {
				return 0, false
			}
			return 100 * float64(r.OnTime) / float64(r.NoGateway.OnTime), true
		}}
}

// serviceVsNoGateway: a source's success at least min % of its success
// with no gateway.
func serviceVsNoGateway(source string, min float64) Floor {
	return Floor{What: source + " success % of no gateway's", Min: true, Bound: min, Source: source,
		Of: func(r *Result) (float64, bool) {
			if r.NoGateway == nil || r.NoGateway.Success[source] == 0 {
				return 0, false
			}
			return 100 * r.Success[source] / r.NoGateway.Success[source], true
		}}
}

// vsBound: the on-time answers at least min % of the offline schedule's.
func vsBound(min float64) Floor {
	return Floor{What: "on time % of the offline bound", Min: true, Bound: min,
		Of: func(r *Result) (float64, bool) {
			if r.Bound == nil || r.Bound.OnTime == 0 {
				return 0, false
			}
			return 100 * float64(r.OnTime) / float64(r.Bound.OnTime), true
		}}
}

// productionFloors are a production scenario's floors: at least as many
// on time as no gateway, in total and for each service; at least 92% of
// the offline bound; waste and unanswered attempts at most 1%. A gateway
// that learns its concurrency is held to lower bounds of the bound and of
// each service against no gateway: learning the provider's slots from a
// mix of answers a tenth of a second to two seconds long, it holds fewer
// calls at the provider than its slots in some of a burst's seconds —
// see docs/perf.md, "Production-shaped traffic", for the medians. Over
// HTTP the bound's share is 4 points lower: the bound is computed from
// the provider's model, and the run on loopback loses some of each call
// to HTTP and to the two cores it shares with the mock and the load (told
// 16, seed 1 reached 90.1–93.7% over HTTP in four runs, 94.1% in the
// simulator).
func productionFloors(sources []Source) []Floor {
	fs := []Floor{vsNoGateway(100), vsBound(92).learnt(85).overHTTP(4), waste(1), unanswered}
	for _, s := range sources {
		fs = append(fs, serviceVsNoGateway(s.Service, 100).learnt(80))
	}
	return fs
}

// prodVariants are the ways a production scenario is run: its callers
// declare their attempts or not. (Each of its calls is its own prompt:
// one prompt for every caller is a storm's, not a trace's.)
func prodVariants() []Variant {
	return []Variant{{}, {Undeclared: true}}
}

// serviceNames are a result's sources, sorted.
func serviceNames(r *Result) []string { return slices.Sorted(maps.Keys(r.Success)) }

// runProductionHTTP runs a production scenario over real HTTP on
// loopback: the trace replayed by the load generator (each service its
// own key, max_tokens and deadline; X-Mock-Output-Tokens the answer's
// length) straight at a `sluice mock` whose time follows the tokens — no
// gateway — and through `sluice serve --upstream U` in front of another
// mock of the same seed; and the offline bound of the same calls, their
// times drawn as the simulator draws them (the same distribution as the
// mock's: see Production).
func runProductionHTTP(ctx context.Context, sc Scenario, v Variant, opt HTTPOptions) (*Result, error) {
	tr, err := productionTrace(sc.Production, opt.Seed, ProductionSeconds*time.Second)
	if err != nil {
		return nil, err
	}
	// Arrivals for a minute; callers wait at most 10 s past it.
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	start := time.Now()
	m := workload.ProductionModel()
	mockArgs := []string{"mock", "--listen", "127.0.0.1:0", "--slots", fmt.Sprint(Slots),
		"--median", m.Base.String(), "--per-prompt-token", m.PerPromptToken.String(), "--per-output-token", m.PerOutputToken.String(),
		"--sigma", fmt.Sprint(m.Sigma), "--seed", fmt.Sprint(opt.Seed)}

	nogw, err := noGateway(ctx, sc, v, tr, opt, mockArgs)
	if err != nil {
		return nil, err
	}

	// The gateway, with default flags, in front of a fresh mock.
	var procs procs
	defer procs.stop()
	mock, err := procs.start(ctx, opt.Bin, mockArgs, mockAddr)
	if err != nil {
		return nil, fmt.Errorf("sluice mock: %w", err)
	}
	mockURL := "http://" + mock
	target, err := startGateways(ctx, &procs, sc, mockURL, opt)
	if err != nil {
		return nil, err
	}
	trace := traceLimits(ctx, procs.admins)
	before, err := mockStats(ctx, mockURL)
	if err != nil {
		return nil, err
	}
	rep, err := replay(ctx, sc, v, tr, target)
	if err != nil {
		return nil, err
	}
	after, err := mockStats(ctx, mockURL)
	if err != nil {
		return nil, err
	}
	s, load, err := productionScenario(sc, v, tr)
	if err != nil {
		return nil, err
	}
	s.Seed = opt.Seed
	b, err := sim.Bound(s, load)
	if err != nil {
		return nil, err
	}
	r := tally(sc, v, []phase{{window: ProductionSeconds * time.Second, reps: map[string]*loadgen.Report{"": rep}, before: before, after: after}})
	r.Declared = !v.Undeclared
	r.Learnt = opt.Concurrency == 0
	r.OnTime, r.Requests = rep.OnTime, rep.Requests
	r.NoGateway = &Baseline{OnTime: nogw.OnTime, Success: map[string]float64{}}
	for _, c := range nogw.Classes {
		if c.Requests > 0 {
			r.NoGateway.Success[c.Name] = 100 * float64(c.OnTime) / float64(c.Requests)
		}
	}
	r.Bound = &Baseline{OnTime: b.OnTime, Success: map[string]float64{}}
	for _, src := range b.Sources {
		r.Bound.Success[src.Name] = src.SuccessPct
	}
	for _, admin := range procs.admins {
		n, err := recognised(ctx, "http://"+admin)
		if err != nil {
			return nil, err
		}
		r.Recognised += n
	}
	r.Limits = trace()
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// noGateway replays tr's calls straight at a `sluice mock` run with
// mockArgs — the callers at the provider, whose queue is theirs — once
// per scenario, seed and binary in a process: the calls, the mock's draws
// and the callers' retries are the same whatever a gateway would be told
// or however its callers declare their attempts (the mock reads no
// attempt header), so the cells of one seed share one baseline.
func noGateway(ctx context.Context, sc Scenario, v Variant, tr *workload.Trace, opt HTTPOptions, mockArgs []string) (*loadgen.Report, error) {
	k := noGatewayKey{scenario: sc.Name, seed: opt.Seed, bin: opt.Bin}
	noGatewayRuns.Lock()
	defer noGatewayRuns.Unlock()
	if rep, ok := noGatewayRuns.m[k]; ok {
		return rep, nil
	}
	var bare procs
	defer bare.stop()
	mock, err := bare.start(ctx, opt.Bin, mockArgs, mockAddr)
	if err != nil {
		return nil, fmt.Errorf("sluice mock: %w", err)
	}
	rep, err := replay(ctx, sc, v, tr, "http://"+mock)
	if err != nil {
		return nil, fmt.Errorf("no gateway: %w", err)
	}
	if noGatewayRuns.m == nil {
		noGatewayRuns.m = map[noGatewayKey]*loadgen.Report{}
	}
	noGatewayRuns.m[k] = rep
	return rep, nil
}

type noGatewayKey struct {
	scenario string
	seed     uint64
	bin      string
}

// noGatewayRuns are the no-gateway baselines run so far (see noGateway).
var noGatewayRuns struct {
	sync.Mutex
	m map[noGatewayKey]*loadgen.Report
}

// replay sends the trace's calls at target as sc's services: each its own
// key, max_tokens, deadline and naive callers retrying twice at once with
// the whole deadline each attempt, declaring their attempts or not.
func replay(ctx context.Context, sc Scenario, v Variant, tr *workload.Trace, target string) (*loadgen.Report, error) {
	headers := loadgen.AttemptHeadersBoth
	if v.Undeclared {
		headers = loadgen.AttemptHeadersNone
	}
	policy, err := loadgen.PolicyByName("naive")
	if err != nil {
		return nil, err
	}
	var classes []loadgen.Class
	for _, src := range sc.Sources {
		sv, _ := workload.ProductionShape().Service(src.Service)
		classes = append(classes, loadgen.Class{Name: src.Service, Priority: src.Class, Deadline: src.Deadline, AttemptTimeout: src.Deadline,
			APIKey: "sk-promise-" + src.Service, MaxTokens: sv.MaxTokens})
	}
	return loadgen.Run(ctx, loadgen.Config{
		Target:         target,
		Trace:          tr,
		Classes:        classes,
		Policy:         policy,
		MaxAttempts:    3,
		Model:          prodModel,
		AttemptHeaders: headers,
		MaxInFlight:    20_000,
	})
}
