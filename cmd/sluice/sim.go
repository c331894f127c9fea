package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/cmd/sluice/internal/calibrate"
	"github.com/sluicehq/sluice/cmd/sluice/internal/simreport"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/workload"
)

func init() {
	register("sim", "simulate admission policies in virtual time, on a scenario or a trace of your traffic, and print goodput, waste and latency tables", runSim)
}

// simFlags are the settings of `sluice sim`.
type simFlags struct {
	scenario  string
	all       bool
	dir       string
	out       string
	loads     []float64
	requests  int
	policies  []string
	client    string
	seed      uint64
	seedSet   bool
	asJSON    bool
	workers   int
	calibrate bool
	// speed is, with --all, the requests of the speed section's run.
	speed int

	// With --trace: the trace, the provider, the services' settings and
	// the speed it is played at.
	trace          string
	slots          int
	model          workload.ServiceModel
	deadlines      string // name=duration,...
	priorities     string // name=class,...
	maxTokens      string // name=N,...
	maxAttempts    int
	attemptTimeout time.Duration
	traceSpeed     float64
	// given are the flags set on the command line, by name.
	given map[string]bool
}

// traceOnly are the flags that describe a trace's replay: the provider
// and the services' callers.
var traceOnly = []string{"slots", "base", "per-prompt-token", "per-output-token", "sigma", "deadline", "priority", "service-max-tokens", "max-attempts", "attempt-timeout"}

// defaultTracePolicies are the policies a trace is run under unless
// --policy says otherwise: no gateway, sluice told the concurrency, and
// sluice learning it.
var defaultTracePolicies = []string{scenario.PolicyFIFO, scenario.PolicySluice, scenario.PolicyLearned}

func parseSimFlags(args []string, stderr io.Writer) (*simFlags, error) {
	f := &simFlags{}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice sim --scenario FILE [--load 5] [--requests N] [flags]")
		fmt.Fprintln(stderr, "       sluice sim --trace FILE [--speed F | --load L] [--deadline name=10s,...] [flags]")
		fmt.Fprintln(stderr, "       sluice sim --all --out docs/ [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Simulates a scenario (a YAML file: upstream, callers, deadlines) in virtual time")
		fmt.Fprintln(stderr, "under every admission policy, from an unbounded FIFO to full sluice — the real")
		fmt.Fprintln(stderr, "admission code — and prints goodput as a percentage of capacity, success per")
		fmt.Fprintln(stderr, "traffic source, wasted upstream calls, latency and attempts per request. A")
		fmt.Fprintln(stderr, "scenario with a spend section also runs policy spend (the real spend limiter)")
		fmt.Fprintln(stderr, "and prints the bill's peak rate, refusals, degradations and alert times.")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "--trace replays a CSV trace of your traffic instead (columns timestamp,")
		fmt.Fprintln(stderr, "context_tokens, generated_tokens, optional service, max_tokens, deadline_ms;")
		fmt.Fprintln(stderr, "Azure's public traces as published), each service a caller of its own, on a")
		fmt.Fprintln(stderr, "provider of --slots whose time follows each call's tokens, under no gateway")
		fmt.Fprintln(stderr, "(fifo), sluice told the concurrency (sluice) and sluice learning it (learned),")
		fmt.Fprintln(stderr, "and prints each one's on-time answers beside the best offline schedule of the")
		fmt.Fprintln(stderr, "same calls (the bound). A scenario may name a trace too (trace_file:).")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "--all regenerates results.md and plots/ under --out from every scenario in")
		fmt.Fprintln(stderr, "--scenarios, and, unless --calibrate=false, runs the calibration against the")
		fmt.Fprintln(stderr, "real gateway and mock on loopback (about a minute and a half of real time).")
		fmt.Fprintln(stderr)
		fmt.Fprintf(stderr, "policies: %s\n", strings.Join(scenario.PolicyNames(), ", "))
		fmt.Fprintf(stderr, "clients:  %s\n\n", strings.Join(scenario.ClientNames(), ", "))
		fs.PrintDefaults()
	}
	fs.StringVar(&f.scenario, "scenario", "", "scenario `file` (YAML)")
	fs.StringVar(&f.trace, "trace", "", "replay this CSV trace `file` instead of a scenario (see above)")
	fs.BoolVar(&f.all, "all", false, "run every scenario in --scenarios and write results.md and plots/ to --out")
	fs.StringVar(&f.dir, "scenarios", "scenarios", "`directory` of scenario files, for --all")
	fs.StringVar(&f.out, "out", "", "`directory` for results.md and plots/, with --all (e.g. docs/)")
	fs.Func("load", "load `factors`, comma-separated (default: the scenario's, else 0.8,1,2,5,10; with --trace: the speed that offers each factor × the provider's capacity, instead of --speed)", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			l, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(l) || !(l > 0) || l > 1000 {
				return fmt.Errorf("want load factors in (0, 1000], got %q", s)
			}
			f.loads = append(f.loads, l)
		}
		return nil
	})
	fs.IntVar(&f.requests, "requests", 0, "logical requests per run, about (default: the scenario's, else 100000; not with --trace: its calls are the requests)")
	policies := func(v string) error {
		for _, s := range strings.Split(v, ",") {
			f.policies = append(f.policies, strings.TrimSpace(s))
		}
		return nil
	}
	fs.Func("policy", "`policies` to run, comma-separated (default: all; with --trace: fifo,sluice,learned)", policies)
	fs.Func("policies", "`policies` to run: the same as --policy", policies)
	fs.StringVar(&f.client, "client", "", "make every caller `kind` naive, polite or client (default: as the scenario says; with --trace: naive)")
	fs.Func("seed", "override the scenario's `seed` (with --trace: default 1)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want a non-negative whole number, got %q", v)
		}
		f.seed, f.seedSet = n, true
		return nil
	})
	fs.BoolVar(&f.asJSON, "json", false, "print the results as JSON")
	fs.IntVar(&f.workers, "workers", 0, "runs at once (default: GOMAXPROCS)")
	fs.BoolVar(&f.calibrate, "calibrate", true, "with --all, also run the calibration against the real gateway and mock")
	var speed float64
	fs.Func("speed", "with --trace: play the trace this many times faster, a `number` (default 1: as recorded; not with --load); with --all: time one run of this many requests for the speed section (default 1000000; 0 skips it)", func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("want a number, got %q", v)
		}
		speed = x
		return nil
	})
	prod := workload.ProductionModel()
	fs.IntVar(&f.slots, "slots", 16, "with --trace: the provider's `concurrency`, the calls it serves at once")
	fs.DurationVar(&f.model.Base, "base", prod.Base, "with --trace: the fixed part of a call's time at the provider")
	fs.DurationVar(&f.model.PerPromptToken, "per-prompt-token", prod.PerPromptToken, "with --trace: a call's time per prompt token (0 and 0 per output token: a provider blind to tokens)")
	fs.DurationVar(&f.model.PerOutputToken, "per-output-token", prod.PerOutputToken, "with --trace: a call's time per answer token")
	fs.Float64Var(&f.model.Sigma, "sigma", prod.Sigma, "with --trace: the lognormal spread of a call's time around its median, 0 to 3")
	fs.StringVar(&f.deadlines, "deadline", "", "with --trace: how long each service's callers wait, as `name=duration,...` (required for a service whose rows lack deadline_ms; a row's own wins)")
	fs.StringVar(&f.priorities, "priority", "", "with --trace: the class each service's calls are sent as, `name=class,...`: interactive, batch or speculative (default interactive)")
	fs.StringVar(&f.maxTokens, "service-max-tokens", "", "with --trace: the max_tokens each service's calls are sent with, `name=N,...` (default: none; a row's own wins)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 3, "with --trace: attempts per call, the first included")
	fs.DurationVar(&f.attemptTimeout, "attempt-timeout", 0, "with --trace: a naive caller's fixed `timeout` per attempt (default: its deadline: it retries at once when it gives up)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	f.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	// Zero means "the default" for these inside package sim; on the command
	// line the default is to leave the flag out, so an explicit 0 is a
	// mistake to report.
	for _, z := range []struct {
		name string
		v    int
	}{{"requests", f.requests}, {"workers", f.workers}, {"max-attempts", f.maxAttempts}} {
		if f.given[z.name] && z.v == 0 {
			return nil, fmt.Errorf("--%s: want ≥ 1, got 0 (leave the flag out for the default)", z.name)
		}
	}
	if f.given["attempt-timeout"] && f.attemptTimeout <= 0 {
		return nil, fmt.Errorf("--attempt-timeout: want a positive duration, got %v (leave the flag out for the deadline)", f.attemptTimeout)
	}
	switch {
	case f.all && f.scenario != "":
		return nil, errors.New("--scenario and --all: give one of them")
	case f.trace != "" && f.scenario != "":
		return nil, errors.New("--trace and --scenario: give one of them (a scenario names its trace with trace_file:)")
	case f.trace != "" && f.all:
		return nil, errors.New("--trace and --all: give one of them")
	case !f.all && f.scenario == "" && f.trace == "":
		return nil, errors.New("--scenario FILE is required (or --trace FILE, or --all --out DIR)")
	case f.all && f.out == "":
		return nil, errors.New("--out: required with --all (e.g. --out docs/)")
	case !f.all && f.out != "":
		return nil, errors.New("--out: only with --all")
	case f.requests < 0:
		return nil, fmt.Errorf("--requests: want ≥ 1, got %d", f.requests)
	case f.workers < 0:
		return nil, fmt.Errorf("--workers: want ≥ 1, got %d", f.workers)
	}
	// --speed says how fast to play a trace, or how big the speed
	// section's run is.
	switch {
	case f.all:
		f.speed = 1_000_000
		if f.given["speed"] {
			if speed < 0 || speed != math.Trunc(speed) || speed > scenario.MaxRequests {
				return nil, fmt.Errorf("--speed: with --all, want a whole number of requests from 0 to %d, got %v", scenario.MaxRequests, speed)
			}
			f.speed = int(speed)
		}
	case f.trace != "":
		f.traceSpeed = 1
		if f.given["speed"] {
			if !(speed > 0) {
				return nil, fmt.Errorf("--speed: want a positive factor (2: twice as fast), got %v", speed)
			}
			if f.given["load"] {
				return nil, errors.New("--speed and --load: give one of them (--speed F plays the trace F times faster than recorded, --load L at the speed that offers L × the provider's capacity)")
			}
			f.traceSpeed = speed
		}
	case f.given["speed"]:
		return nil, errors.New("--speed: only with --trace (how fast to play it) or --all (the requests of the speed run)")
	}
	if f.trace != "" {
		if f.given["requests"] {
			return nil, errors.New("--requests: not with --trace: the trace's calls are the requests (--speed or --load plays them faster)")
		}
		for _, name := range []string{"scenarios", "calibrate"} {
			if f.given[name] {
				return nil, fmt.Errorf("--%s: only with --all", name)
			}
		}
		if !f.seedSet {
			f.seed = 1
		}
	} else {
		for _, name := range traceOnly {
			if f.given[name] {
				return nil, fmt.Errorf("--%s: only with --trace (a scenario file says it)", name)
			}
		}
	}
	for _, p := range f.policies {
		if !slices.Contains(scenario.PolicyNames(), p) {
			return nil, fmt.Errorf("--policy: unknown policy %q (known: %s)", p, strings.Join(scenario.PolicyNames(), ", "))
		}
	}
	if f.client != "" && !slices.Contains(scenario.ClientNames(), f.client) {
		return nil, fmt.Errorf("--client: unknown client %q (known: %s)", f.client, strings.Join(scenario.ClientNames(), ", "))
	}
	return f, nil
}

func (f *simFlags) sweepOptions() sim.SweepOptions {
	return sim.SweepOptions{
		Options:  sim.Options{Requests: f.requests, Client: f.client},
		Loads:    f.loads,
		Policies: f.policies,
		Workers:  f.workers,
	}
}

func (f *simFlags) load(path string) (*scenario.Scenario, error) {
	sc, err := scenario.Load(path)
	if err != nil {
		return nil, err
	}
	if f.seedSet {
		sc.Seed = f.seed
	}
	return sc, nil
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseSimFlags(args, stderr)
	if err != nil {
		return err
	}
	if f.all {
		return runSimAll(ctx, f, stderr)
	}
	if f.trace != "" {
		return runSimTrace(ctx, f, stdout)
	}
	sc, err := f.load(f.scenario)
	if err != nil {
		return err
	}
	sw, err := sim.RunSweep(ctx, sc, f.sweepOptions())
	if err != nil {
		return err
	}
	if sc.Trace != nil {
		// A scenario that replays a trace is measured as --trace is:
		// against the bound and against no gateway.
		rep, err := newTraceReport(sc, sc.TraceFile, sw)
		if err != nil {
			return err
		}
		return rep.write(stdout, f.asJSON)
	}
	if f.asJSON {
		var all []*sim.Result
		for _, row := range sw.Results {
			all = append(all, row...)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	return simreport.WriteText(stdout, sw)
}

func runSimAll(ctx context.Context, f *simFlags, stderr io.Writer) error {
	files, err := filepath.Glob(filepath.Join(f.dir, "*.yaml"))
	if err != nil {
		return fmt.Errorf("--scenarios: %v", err)
	}
	if len(files) == 0 {
		return fmt.Errorf("--scenarios: no *.yaml files in %s", f.dir)
	}
	sort.Slice(files, func(i, j int) bool { return scenarioOrder(files[i]) < scenarioOrder(files[j]) })
	var scenarios []*scenario.Scenario
	for _, file := range files {
		sc, err := f.load(file)
		if err != nil {
			return err
		}
		scenarios = append(scenarios, sc)
	}
	opt := simreport.Options{
		Dir:       f.out,
		Scenarios: scenarios,
		Sweep:     f.sweepOptions(),
		Speed:     f.speed,
		Progress:  stderr,
	}
	if f.calibrate {
		rep, err := calibrate.Run(ctx, calibrate.Config{Seed: 1}, stderr)
		if err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
		opt.Calibration = rep.WriteMarkdown
	}
	if err := simreport.Write(ctx, opt); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sim: wrote %s\n", filepath.Join(f.out, "results.md"))
	return nil
}

// scenarioOrder puts the five shipped scenarios first, from the plainest
// overload to the spend runaway, and any others after them by name.
func scenarioOrder(path string) string {
	order := []string{"retry-storm", "service-step", "mixed-deadlines", "speculative-flood", "runaway-tenant"}
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if i := slices.Index(order, base); i >= 0 {
		return fmt.Sprintf("%d", i)
	}
	return "9" + base
}

// runSimTrace runs `sluice sim --trace`: the trace's calls under each
// policy, at each speed asked for, beside the bound.
func runSimTrace(ctx context.Context, f *simFlags, stdout io.Writer) error {
	sc, loads, err := f.traceScenario()
	if err != nil {
		return err
	}
	opt := f.sweepOptions()
	// The policies and the callers are the scenario's, where Validate
	// checked them.
	opt.Loads, opt.Policies, opt.Client = loads, nil, ""
	sw, err := sim.RunSweep(ctx, sc, opt)
	if err != nil {
		return err
	}
	rep, err := newTraceReport(sc, f.trace, sw)
	if err != nil {
		return err
	}
	return rep.write(stdout, f.asJSON)
}

// traceScenario builds the scenario of --trace from the flags — the
// trace, its services as traffic sources, the provider — validated by
// scenario.Validate with its errors put back on the flags, and the load
// factors to run it at.
func (f *simFlags) traceScenario() (*scenario.Scenario, []float64, error) {
	if m := f.model; m.Base == 0 && m.PerPromptToken == 0 && m.PerOutputToken == 0 {
		return nil, nil, errors.New("--base, --per-prompt-token, --per-output-token: all zero: calls would take no time")
	}
	tr, err := workload.ReadFile(f.trace)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace: %v", err)
	}
	settings, err := parseClassSettings(f.deadlines, f.priorities, "", f.maxTokens)
	if err != nil {
		return nil, nil, err
	}
	// The services with their settings, as sluice load --trace reads
	// them: the same checks, the same names.
	services, err := traceClasses(f.trace, tr, settings)
	if err != nil {
		return nil, nil, err
	}
	keys := tr.Services() // the trace's service column, by source
	builtin := []string{"interactive", "batch", "speculative"}
	sc := &scenario.Scenario{
		Name:     strings.TrimSuffix(filepath.Base(f.trace), filepath.Ext(f.trace)),
		Seed:     f.seed,
		Policies: f.policies,
		Upstream: scenario.Upstream{
			Concurrency: f.slots,
			Service: scenario.Service{Tokens: &scenario.Tokens{
				Base: f.model.Base, PerPromptToken: f.model.PerPromptToken, PerOutputToken: f.model.PerOutputToken, Sigma: f.model.Sigma,
			}},
		},
		// Policy learned runs as the gateway does when told no
		// concurrency: adaptive's defaults.
		Sluice:    scenario.SluiceConfig{Learn: &adaptive.Config{}},
		TraceFile: f.trace,
		Trace:     tr,
	}
	if len(sc.Policies) == 0 {
		sc.Policies = defaultTracePolicies
	}
	classDeadline := map[string]time.Duration{}
	for i, svc := range services {
		if !slices.Contains(builtin, svc.Priority) {
			return nil, nil, fmt.Errorf("--priority: service %q: want one of %s, got %q", svc.Name, strings.Join(builtin, ", "), svc.Priority)
		}
		// A service with no --deadline has one on every call: its callers'
		// deadline, and a naive one's timeout, is then the longest.
		deadline := svc.Deadline
		for _, c := range tr.Calls {
			if c.Service != keys[i] {
				continue
			}
			if svc.Deadline == 0 {
				deadline = max(deadline, c.Deadline)
			}
			if svc.MaxTokens > 0 && c.MaxTokens == 0 && c.OutputTokens > svc.MaxTokens {
				return nil, nil, fmt.Errorf("--service-max-tokens: service %q: %d, but its call at %v recorded an answer of %d tokens: an answer is never longer than its max_tokens",
					svc.Name, svc.MaxTokens, c.At, c.OutputTokens)
			}
		}
		if deadline > scenario.MaxDuration {
			how := "its calls' deadline_ms run to"
			if svc.Deadline > 0 {
				how = "got"
			}
			return nil, nil, fmt.Errorf("--deadline: service %q: want at most %v, %s %v", svc.Name, scenario.MaxDuration, how, deadline)
		}
		client := cmp.Or(f.client, scenario.ClientNaive)
		sc.Traffic = append(sc.Traffic, scenario.Source{
			Name:           svc.Name,
			Class:          svc.Priority,
			Deadline:       deadline,
			Client:         client,
			MaxAttempts:    f.maxAttempts,
			AttemptTimeout: cmp.Or(f.attemptTimeout, deadline),
			MaxTokens:      int64(svc.MaxTokens),
		})
		if _, ok := classDeadline[svc.Priority]; !ok {
			sc.Classes = append(sc.Classes, scenario.Class{Name: svc.Priority})
		}
		classDeadline[svc.Priority] = max(classDeadline[svc.Priority], deadline)
	}
	for i := range sc.Classes {
		sc.Classes[i].Deadline = classDeadline[sc.Classes[i].Name]
	}
	if err := sc.Validate(); err != nil {
		return nil, nil, f.traceFlagError(err, sc)
	}
	// Policy sluice runs with the waiting room of `sluice serve --upstream
	// URL --concurrency N`, the gateway's default.
	if sc.Sluice.MaxQueue, err = gatewayMaxQueue(f.slots); err != nil {
		return nil, nil, fmt.Errorf("--slots: %v", err)
	}
	loads := f.loads
	if len(loads) == 0 {
		natural := naturalLoad(sc)
		if natural <= 0 {
			return nil, nil, fmt.Errorf("--trace: %s: %d calls over %v offer no rate to play: want at least two calls at different times", f.trace, len(tr.Calls), tr.Span())
		}
		l := f.traceSpeed * natural
		if l > scenario.MaxLoad {
			return nil, nil, fmt.Errorf("--speed: %g plays the trace at %.0f× the provider's capacity, more than the simulator's %g×", f.traceSpeed, l, scenario.MaxLoad)
		}
		loads = []float64{l}
	}
	return sc, loads, nil
}

// gatewayMaxQueue is the waiting room `sluice serve --upstream URL
// --concurrency slots` derives.
func gatewayMaxQueue(slots int) (int, error) {
	c, err := config.Parse(fmt.Appendf(nil, "upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: %d}\n", slots))
	if err != nil {
		return 0, err
	}
	n, _ := c.EffectiveMaxQueue()
	return n, nil
}

// traceFlagError names the flag behind a field of the scenario that
// traceScenario built; an error of another field passes through.
func (f *simFlags) traceFlagError(err error, sc *scenario.Scenario) error {
	var fe *scenario.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if i, key, ok := fieldIndex(fe.Field, "traffic"); ok && i < len(sc.Traffic) {
		byKey := map[string]string{
			"name": "--trace", "class": "--priority", "deadline": "--deadline", "max_tokens": "--service-max-tokens",
			"client": "--client", "max_attempts": "--max-attempts", "attempt_timeout": "--attempt-timeout",
		}
		if key == "attempt_timeout" && !f.given["attempt-timeout"] {
			byKey[key] = "--deadline" // the timeout is the deadline
		}
		if name, ok := byKey[key]; ok {
			return fmt.Errorf("%s: service %q: %s", name, sc.Traffic[i].Name, fe.Problem)
		}
	}
	if i, key, ok := fieldIndex(fe.Field, "classes"); ok && i < len(sc.Classes) {
		name := "--priority"
		if key == "deadline" {
			name = "--deadline"
		}
		return fmt.Errorf("%s: class %q: %s", name, sc.Classes[i].Name, fe.Problem)
	}
	if _, _, ok := fieldIndex(fe.Field, "policies"); ok {
		return fmt.Errorf("--policy: %s", fe.Problem)
	}
	byField := map[string]string{
		"upstream.concurrency":                     "--slots",
		"upstream.service.tokens":                  "--base, --per-prompt-token, --per-output-token",
		"upstream.service.tokens.base":             "--base",
		"upstream.service.tokens.per_prompt_token": "--per-prompt-token",
		"upstream.service.tokens.per_output_token": "--per-output-token",
		"upstream.service.tokens.sigma":            "--sigma",
		"trace_file":                               "--trace",
		"traffic":                                  "--trace",
	}
	if name, ok := byField[fe.Field]; ok {
		return fmt.Errorf("%s: %s", name, fe.Problem)
	}
	return err
}

// fieldIndex splits "traffic[3].deadline" into 3 and "deadline" when the
// field is an item of list.
func fieldIndex(field, list string) (int, string, bool) {
	rest, ok := strings.CutPrefix(field, list+"[")
	if !ok {
		return 0, "", false
	}
	n, key, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(n)
	if !ok || err != nil {
		return 0, "", false
	}
	return i, strings.TrimPrefix(key, "."), true
}

// naturalLoad is the load the scenario's trace offers its upstream as
// recorded (speed 1): the load factor sim.Run plays it at unsped.
func naturalLoad(sc *scenario.Scenario) float64 {
	tr, slots := sc.Trace, sc.Upstream.Concurrency
	if tk := sc.Upstream.Service.Tokens; tk != nil {
		return tr.Load(tk.Model(), slots)
	}
	span := tr.Span()
	if span <= 0 || len(tr.Calls) < 2 || slots <= 0 {
		return 0
	}
	rate := float64(len(tr.Calls)-1) / span.Seconds()
	return rate * sc.Upstream.Service.Mean().Seconds() / float64(slots)
}

// traceReport is what `sluice sim --trace` prints, and --json's shape:
// the trace, the provider, and a run per speed.
type traceReport struct {
	Scenario string `json:"scenario"`
	// Trace is the file; Calls its calls, Services by service, over
	// SpanSeconds as recorded.
	Trace       string              `json:"trace"`
	Calls       int                 `json:"calls"`
	Services    []traceServiceCalls `json:"services"`
	SpanSeconds float64             `json:"span_seconds"`
	// Slots and Provider describe the upstream; NaturalLoad is the load
	// the trace offers it as recorded (1: as much work as it does always
	// busy).
	Slots       int        `json:"slots"`
	Provider    string     `json:"provider"`
	NaturalLoad float64    `json:"natural_load"`
	Seed        uint64     `json:"seed"`
	Runs        []traceRun `json:"runs"`
}

// traceServiceCalls is one service of a trace and its calls.
type traceServiceCalls struct {
	Name  string `json:"name"`
	Calls int    `json:"calls"`
}

// traceRun is the trace at one speed: the bound and every policy, with
// on-time answers a second over the run's window (the trace's span at
// that speed), and each as a share of the bound's and of no gateway's.
type traceRun struct {
	Load              float64       `json:"load"`
	Speed             float64       `json:"speed"`
	WindowSeconds     float64       `json:"window_seconds"`
	CapacityPerSecond float64       `json:"capacity_per_second"`
	Bound             traceBound    `json:"bound"`
	Policies          []tracePolicy `json:"policies"`
}

// traceBound is sim.Bound's schedule of the run's calls.
type traceBound struct {
	*sim.BoundResult
	OnTimePerSecond float64 `json:"on_time_per_second"`
	// WastePct is the calls it started that ended past their deadline,
	// over the calls it started.
	WastePct  float64  `json:"waste_pct"`
	PctOfFIFO *float64 `json:"pct_of_fifo,omitempty"`
}

// tracePolicy is one policy's run (sim.Result's fields, and these).
type tracePolicy struct {
	*sim.Result
	OnTimePerSecond float64 `json:"on_time_per_second"`
	// PctOfBound is its on-time answers over the bound's, in per cent; it
	// can pass 100 by a little, since the bound starts a call only when
	// its service's p95 fits, where a policy may be lucky. PctOfFIFO is
	// over no gateway's (policy fifo): absent when fifo was not run or
	// answered nothing in time.
	PctOfBound float64  `json:"pct_of_bound"`
	PctOfFIFO  *float64 `json:"pct_of_fifo,omitempty"`
}

// newTraceReport computes the bound of each load of sw and sets every
// policy beside it.
func newTraceReport(sc *scenario.Scenario, file string, sw *sim.Sweep) (*traceReport, error) {
	tr := sc.Trace
	natural := naturalLoad(sc)
	rep := &traceReport{
		Scenario:    sc.Name,
		Trace:       file,
		Calls:       len(tr.Calls),
		SpanSeconds: tr.Span().Seconds(),
		Slots:       sc.Upstream.Concurrency,
		Provider:    providerText(sc.Upstream.Service),
		NaturalLoad: natural,
		Seed:        sc.Seed,
	}
	count := map[string]int{}
	for _, c := range tr.Calls {
		count[c.Service]++
	}
	for _, src := range sc.Traffic {
		// The sources' order, the tables'; a trace whose calls name no
		// service is its one source's.
		name := src.SourceName()
		n, ok := count[name]
		if !ok && len(sc.Traffic) == 1 {
			n = len(tr.Calls)
		}
		rep.Services = append(rep.Services, traceServiceCalls{Name: name, Calls: n})
	}
	for i, load := range sw.Loads {
		b, err := sim.Bound(sc, load)
		if err != nil {
			return nil, err
		}
		row := sw.Results[i]
		run := traceRun{Load: load, WindowSeconds: row[0].WindowSeconds, CapacityPerSecond: row[0].Capacity}
		if natural > 0 {
			run.Speed = load / natural
		}
		perSecond := func(n int) float64 {
			if run.WindowSeconds <= 0 {
				return 0
			}
			return float64(n) / run.WindowSeconds
		}
		pct := func(n, of int) float64 {
			if of == 0 {
				return 0
			}
			return 100 * float64(n) / float64(of)
		}
		fifo := slices.IndexFunc(row, func(r *sim.Result) bool { return r.Policy == scenario.PolicyFIFO })
		ofFIFO := func(n int) *float64 {
			if fifo < 0 || row[fifo].OnTime == 0 {
				return nil // no gateway not run, or nothing in time to compare with
			}
			p := pct(n, row[fifo].OnTime)
			return &p
		}
		run.Bound = traceBound{BoundResult: b, OnTimePerSecond: perSecond(b.OnTime), WastePct: pct(b.Started-b.OnTime, b.Started), PctOfFIFO: ofFIFO(b.OnTime)}
		for _, r := range row {
			run.Policies = append(run.Policies, tracePolicy{Result: r, OnTimePerSecond: perSecond(r.OnTime), PctOfBound: pct(r.OnTime, b.OnTime), PctOfFIFO: ofFIFO(r.OnTime)})
		}
		rep.Runs = append(rep.Runs, run)
	}
	return rep, nil
}

// providerText describes the upstream's service time.
func providerText(s scenario.Service) string {
	switch {
	case s.Tokens != nil:
		t := s.Tokens
		return fmt.Sprintf("%v + %v a prompt token + %v an answer token, σ %g", t.Base, t.PerPromptToken, t.PerOutputToken, t.Sigma)
	case s.Lognormal != nil:
		return fmt.Sprintf("lognormal, median %v, σ %g", s.Lognormal.Median, s.Lognormal.Sigma)
	}
	return fmt.Sprintf("%d observed times, mean %v", len(s.Empirical), s.Mean())
}

// tracePolicyLabel is a policy's row in the trace's tables: the three it
// runs by default say what they stand for.
func tracePolicyLabel(r *sim.Result) string {
	switch r.Policy {
	case scenario.PolicyFIFO:
		return "no gateway (unbounded FIFO)"
	case scenario.PolicySluice:
		return "sluice, told the concurrency"
	case scenario.PolicyLearned:
		return "sluice, learning it"
	}
	return r.Label
}

func (rep *traceReport) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.writeText(w)
}

// writeText prints the trace, the provider, and a table per speed: the
// bound's row, then a row per policy.
func (rep *traceReport) writeText(w io.Writer) error {
	var services []string
	for _, s := range rep.Services {
		services = append(services, fmt.Sprintf("%s %d", s.Name, s.Calls))
	}
	span := time.Duration(rep.SpanSeconds * float64(time.Second)).Round(time.Millisecond)
	fmt.Fprintf(w, "trace %s (%s): %d calls over %v (%s)\n", rep.Scenario, rep.Trace, rep.Calls, span, strings.Join(services, ", "))
	fmt.Fprintf(w, "provider: %d slots; a call takes %s; as recorded the trace offers %.2f× its capacity\n", rep.Slots, rep.Provider, rep.NaturalLoad)
	for _, run := range rep.Runs {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "at %.3g× speed: %.3g× capacity (capacity %.1f calls/s; %d calls over %.0fs simulated; seed %d)\n",
			run.Speed, run.Load, run.CapacityPerSecond, run.Bound.Requests, run.WindowSeconds, rep.Seed)
		fifo := slices.ContainsFunc(run.Policies, func(p tracePolicy) bool { return p.Policy == scenario.PolicyFIFO })
		head := []string{"policy", "on-time/s", "% of bound"}
		if fifo {
			head = append(head, "% of no gateway")
		}
		for _, s := range run.Bound.Sources {
			head = append(head, "success "+s.Name+" %")
		}
		head = append(head, "waste % billed", "attempts/req", "unanswered %", "refusal p99 ms")
		// The cell against no gateway: none without the column, a dash
		// when no gateway answered nothing in time.
		ofFIFOCell := func(p *float64) []string {
			switch {
			case !fifo:
				return nil
			case p == nil:
				return []string{"–"}
			}
			return []string{fmt.Sprintf("%.1f", *p)}
		}
		rows := [][]string{}
		b := run.Bound
		bound := append([]string{"offline bound (EDF)", fmt.Sprintf("%.1f", b.OnTimePerSecond), "100.0"}, ofFIFOCell(b.PctOfFIFO)...)
		for _, s := range b.Sources {
			bound = append(bound, fmt.Sprintf("%.1f", s.SuccessPct))
		}
		rows = append(rows, append(bound, fmt.Sprintf("%.2f", b.WastePct), "1.00", "–", "–"))
		for _, p := range run.Policies {
			r := p.Result
			c := append([]string{tracePolicyLabel(r), fmt.Sprintf("%.1f", p.OnTimePerSecond), fmt.Sprintf("%.1f", p.PctOfBound)}, ofFIFOCell(p.PctOfFIFO)...)
			for _, s := range r.Sources {
				c = append(c, fmt.Sprintf("%.1f", s.SuccessPct))
			}
			refusal := "–" // no refusals: a time of 0 ms would be a refusal at once
			if r.Refused > 0 {
				refusal = fmt.Sprintf("%.0f", r.RefusalP99Ms)
			}
			rows = append(rows, append(c, fmt.Sprintf("%.2f", r.WastePct), fmt.Sprintf("%.2f", r.AttemptsPerRequest), fmt.Sprintf("%.2f", r.UnansweredPct), refusal))
		}
		// Numbers align right; the policy column is padded to read left.
		width := 0
		for _, c := range append(rows, head) {
			width = max(width, len([]rune(c[0])))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, c := range append([][]string{head}, rows...) {
			c[0] += strings.Repeat(" ", width-len([]rune(c[0])))
			fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
