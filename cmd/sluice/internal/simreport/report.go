package simreport

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// Options configure Write.
type Options struct {
	// Dir receives results.md and plots/. Required.
	Dir string
	// Scenarios are tabled in this order. At least one.
	Scenarios []*scenario.Scenario
	// Sweep tunes every sweep (Requests, Workers, ...).
	Sweep sim.SweepOptions
	// Command is the command line that regenerates the file, quoted at its
	// top. Empty means DefaultCommand.
	Command string
	// Calibration writes the calibration section's body (a table), or is
	// nil when calibration was not run.
	Calibration func(w io.Writer) error
	// Speed, when positive, times one run of this many requests (the first
	// scenario, full sluice, 5×) for the speed section. Zero skips it.
	Speed int
	// Progress receives a line per step. Nil means none.
	Progress io.Writer
}

// DefaultCommand regenerates docs/results.md and docs/plots.
const DefaultCommand = "go run ./cmd/sluice sim --all --out docs/"

// headlineLoad is the load of the headline claims, which
// sim/headline_test.go asserts at the same load.
const headlineLoad = 5

// sweep is a scenario's sweep and, when its traffic runs away, the spend
// policy on its normal day.
type sweep struct {
	*sim.Sweep
	// steady[i] is the spend policy at load i on the scenario's normal day
	// (every source at its starting rate), or steady is nil (see
	// runSteady).
	steady []*sim.Result
}

// Write runs every scenario over its loads and policies and writes
// Dir/results.md with its tables, and Dir/plots/*.png.
func Write(ctx context.Context, opt Options) error {
	if opt.Dir == "" {
		return fmt.Errorf("results: Dir is required")
	}
	if len(opt.Scenarios) == 0 {
		return fmt.Errorf("results: no scenarios")
	}
	if opt.Command == "" {
		opt.Command = DefaultCommand
	}
	progress := opt.Progress
	if progress == nil {
		progress = io.Discard
	}
	plots := filepath.Join(opt.Dir, "plots")
	if err := os.MkdirAll(plots, 0o755); err != nil {
		return err
	}
	start := time.Now()
	var sweeps []*sweep
	for _, sc := range opt.Scenarios {
		fmt.Fprintf(progress, "sim: %s...\n", sc.Name)
		s, err := sim.RunSweep(ctx, sc, opt.Sweep)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		sw := &sweep{Sweep: s}
		if err := sw.runSteady(ctx, opt.Sweep); err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
		sweeps = append(sweeps, sw)
		if err := writeFile(filepath.Join(plots, sc.Name+"-goodput.png"), sw.writeGoodputPlot); err != nil {
			return err
		}
		if ts := sc.Timeseries; ts != nil {
			if err := writeTimeseries(ctx, sc, opt.Sweep.Options, plots); err != nil {
				return fmt.Errorf("%s: %w", sc.Name, err)
			}
		}
	}
	simTook := time.Since(start)

	var speed *sim.Result
	var speedTook time.Duration
	if opt.Speed > 0 {
		fmt.Fprintf(progress, "sim: timing %d requests...\n", opt.Speed)
		t0 := time.Now()
		r, err := sim.Run(ctx, opt.Scenarios[0], "sluice", headlineLoad, sim.Options{Requests: opt.Speed})
		if err != nil {
			return err
		}
		speed, speedTook = r, time.Since(t0)
	}

	rep := &report{
		Command:   opt.Command,
		Machine:   machine(),
		Readme:    newReadme(sweeps),
		Headlines: newHeadlines(sweeps),
		Findings:  newFindings(sweeps),
	}
	for _, sw := range sweeps {
		rep.Scenarios = append(rep.Scenarios, newScenarioSection(sw))
	}
	if opt.Calibration != nil {
		var b bytes.Buffer
		if err := opt.Calibration(&b); err != nil {
			return err
		}
		rep.Calibrated, rep.Calibration = true, b.String()
	}
	if speed != nil {
		rep.Speed = &speedSection{Result: speed, Took: speedTook, SimTook: simTook, Workers: max(1, workersOf(opt.Sweep))}
	}
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, "results.md.tmpl", rep); err != nil {
		return fmt.Errorf("results.md: %w", err)
	}
	return os.WriteFile(filepath.Join(opt.Dir, "results.md"), b.Bytes(), 0o644)
}

// report is what templates/results.md.tmpl renders.
type report struct {
	// Command regenerates the file; Machine says what it ran on.
	Command, Machine string
	// Readme is the README's proposed section, or nil without the retry
	// storm at the headline load.
	Readme    *readme
	Headlines headlines
	Findings  findings
	Scenarios []*scenarioSection
	// Calibration is the calibration's table, when Calibrated.
	Calibrated  bool
	Calibration string
	// Speed is nil when not timed.
	Speed *speedSection
}

// speedSection is one run timed on the wall clock, and the whole sweep.
type speedSection struct {
	*sim.Result
	Took, SimTook time.Duration
	Workers       int
}

// EventsPerSecond is the timed run's speed.
func (s *speedSection) EventsPerSecond() float64 { return float64(s.Events) / s.Took.Seconds() }

func workersOf(o sim.SweepOptions) int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

func writeFile(path string, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func writeTimeseries(ctx context.Context, sc *scenario.Scenario, o sim.Options, dir string) error {
	ts := sc.Timeseries
	load := ts.Load
	if load == 0 {
		load = 1
	}
	names := ts.Policies
	if len(names) == 0 {
		names = []string{"fifo", "depth-threshold", "queue-timeout", "sluice"}
	}
	o.Trace = true
	var results []*sim.Result
	for _, n := range names {
		r, err := sim.Run(ctx, sc, n, load, o)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	// The interesting stretch is around the first step; without a step,
	// the first ten minutes.
	from, to := time.Duration(0), min(10*time.Minute, time.Duration(results[0].WindowSeconds*float64(time.Second)))
	if rec := results[0].Recovery; rec != nil {
		at := time.Duration(rec.StepAtSeconds * float64(time.Second))
		from, to = max(0, at-time.Minute), at+4*time.Minute
	}
	title := fmt.Sprintf("%s at %g×", sc.Name, load)
	return writeFile(filepath.Join(dir, sc.Name+"-timeseries.png"), func(w io.Writer) error {
		return writeTimeseriesPlot(w, title, results, from, to)
	})
}

func machine() string {
	cpu := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if cpu == "" {
		cpu = "unknown CPU"
	}
	return fmt.Sprintf("%d cores (%s), %s/%s, %s — a shared, noisy machine", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// find is the sweep of a scenario, or nil.
func find(sweeps []*sweep, name string) *sweep {
	for _, sw := range sweeps {
		if sw.Scenario.Name == name {
			return sw
		}
	}
	return nil
}
