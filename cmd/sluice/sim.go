package main

import (
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

	"github.com/sluicehq/sluice/cmd/sluice/internal/calibrate"
	"github.com/sluicehq/sluice/cmd/sluice/internal/simreport"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

func init() {
	register("sim", "simulate admission policies in virtual time and print goodput, waste and latency tables", runSim)
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
	speed     int
}

func parseSimFlags(args []string, stderr io.Writer) (*simFlags, error) {
	f := &simFlags{}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice sim --scenario FILE [--load 5] [--requests N] [flags]")
		fmt.Fprintln(stderr, "       sluice sim --all --out docs/ [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Simulates a scenario (a YAML file: upstream, callers, deadlines) in virtual time")
		fmt.Fprintln(stderr, "under every admission policy, from an unbounded FIFO to full sluice — the real")
		fmt.Fprintln(stderr, "admission code — and prints goodput as a percentage of capacity, success per")
		fmt.Fprintln(stderr, "traffic source, wasted upstream calls, latency and attempts per request. A")
		fmt.Fprintln(stderr, "scenario with a spend section also runs policy spend (the real spend limiter)")
		fmt.Fprintln(stderr, "and prints the bill's peak rate, refusals, degradations and alert times.")
		fmt.Fprintln(stderr, "--all regenerates results.md and plots/ under --out from every scenario in")
		fmt.Fprintln(stderr, "--scenarios, and, unless --calibrate=false, runs the calibration against the")
		fmt.Fprintln(stderr, "real gateway and mock on loopback (about a minute and a half of real time).")
		fmt.Fprintln(stderr)
		fmt.Fprintf(stderr, "policies: %s\n", strings.Join(scenario.PolicyNames(), ", "))
		fmt.Fprintf(stderr, "clients:  %s\n\n", strings.Join(scenario.ClientNames(), ", "))
		fs.PrintDefaults()
	}
	fs.StringVar(&f.scenario, "scenario", "", "scenario `file` (YAML)")
	fs.BoolVar(&f.all, "all", false, "run every scenario in --scenarios and write results.md and plots/ to --out")
	fs.StringVar(&f.dir, "scenarios", "scenarios", "`directory` of scenario files, for --all")
	fs.StringVar(&f.out, "out", "", "`directory` for results.md and plots/, with --all (e.g. docs/)")
	fs.Func("load", "load `factors`, comma-separated (default: the scenario's, else 0.8,1,2,5,10)", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			l, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(l) || !(l > 0) || l > 1000 {
				return fmt.Errorf("want load factors in (0, 1000], got %q", s)
			}
			f.loads = append(f.loads, l)
		}
		return nil
	})
	fs.IntVar(&f.requests, "requests", 0, "logical requests per run, about (default: the scenario's, else 100000)")
	fs.Func("policy", "`policies` to run, comma-separated (default: all)", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			f.policies = append(f.policies, strings.TrimSpace(s))
		}
		return nil
	})
	fs.StringVar(&f.client, "client", "", "make every caller `kind` naive, polite or client (default: as the scenario says)")
	fs.Func("seed", "override the scenario's `seed`", func(v string) error {
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
	fs.IntVar(&f.speed, "speed", 1_000_000, "with --all, time one run of this many requests for the speed section; 0 skips it")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	// Zero means "the default" for these inside package sim; on the command
	// line the default is to leave the flag out, so an explicit 0 is a
	// mistake to report.
	var zero error
	fs.Visit(func(fl *flag.Flag) {
		if (fl.Name == "requests" && f.requests == 0) || (fl.Name == "workers" && f.workers == 0) {
			zero = fmt.Errorf("--%s: want ≥ 1, got 0 (leave the flag out for the default)", fl.Name)
		}
	})
	if zero != nil {
		return nil, zero
	}
	switch {
	case f.all && f.scenario != "":
		return nil, errors.New("--scenario and --all: give one of them")
	case !f.all && f.scenario == "":
		return nil, errors.New("--scenario FILE is required (or --all --out DIR)")
	case f.all && f.out == "":
		return nil, errors.New("--out: required with --all (e.g. --out docs/)")
	case !f.all && f.out != "":
		return nil, errors.New("--out: only with --all")
	case f.requests < 0:
		return nil, fmt.Errorf("--requests: want ≥ 1, got %d", f.requests)
	case f.workers < 0:
		return nil, fmt.Errorf("--workers: want ≥ 1, got %d", f.workers)
	case f.speed < 0:
		return nil, fmt.Errorf("--speed: want ≥ 0, got %d", f.speed)
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
	sc, err := f.load(f.scenario)
	if err != nil {
		return err
	}
	sw, err := sim.RunSweep(ctx, sc, f.sweepOptions())
	if err != nil {
		return err
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
