package simreport

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

func loadScenario(t *testing.T, file string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Load("../../../../scenarios/" + file + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func smallSweep(t *testing.T, file string) *sweep {
	t.Helper()
	sw, err := sim.RunSweep(t.Context(), loadScenario(t, file), sim.SweepOptions{Options: sim.Options{Requests: 3000}, Loads: []float64{1, 5}})
	if err != nil {
		t.Fatal(err)
	}
	return &sweep{Sweep: sw}
}

// markdown renders a sweep's table as results.md does.
func markdown(t *testing.T, sw *sim.Sweep) string {
	t.Helper()
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, "table", sweepTable(sw)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTablesHaveARowPerPolicyAndLoad(t *testing.T) {
	sw := smallSweep(t, "mixed-deadlines")
	var text bytes.Buffer
	if err := WriteText(&text, sw.Sweep); err != nil {
		t.Fatal(err)
	}
	md := markdown(t, sw.Sweep)
	for _, want := range []string{"goodput % cap", "success interactive %", "success batch %", "waste % billed", "p99 s", "attempts/req", "sluice (+ retry budget)", "unbounded FIFO"} {
		if !strings.Contains(text.String(), want) || !strings.Contains(md, want) {
			t.Errorf("tables lack %q", want)
		}
	}
	// What callers felt is in the terminal's table, not yet in results.md.
	for _, col := range []string{"unanswered %", "refusal p50/p99 ms"} {
		if !strings.Contains(text.String(), col) || strings.Contains(md, col) {
			t.Errorf("want %q in the text table only", col)
		}
	}
	if got, want := strings.Count(md, "\n"), 2+2*len(sw.Scenario.PolicyNames()); got != want {
		t.Errorf("markdown has %d lines, want %d:\n%s", got, want, md)
	}
	if !strings.Contains(md, "|---:|---|---:|") {
		t.Errorf("markdown: want the policy column aligned left, the others right:\n%s", md)
	}
	if strings.Contains(text.String(), "recovery") {
		t.Error("a recovery column without an upstream step")
	}
	if step := smallSweep(t, "service-step"); !strings.Contains(header(step.Sweep, true)[len(header(step.Sweep, true))-1], "recovery") {
		t.Error("no recovery column for the step scenario")
	}
}

func TestPlotsArePNGs(t *testing.T) {
	sw := smallSweep(t, "retry-storm")
	var b bytes.Buffer
	if err := sw.writeGoodputPlot(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("goodput plot: %v", err)
	}
	sc := loadScenario(t, "service-step")
	var results []*sim.Result
	for _, p := range []string{"fifo", "sluice"} {
		r, err := sim.Run(t.Context(), sc, p, 1, sim.Options{Requests: 3000, Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if s := r.Series; s == nil || len(s.Depth) != len(s.Goodput) || len(s.LatencyP50) != len(s.Goodput) {
			t.Fatalf("%s: series %+v", p, s)
		}
		results = append(results, r)
	}
	if results[0].Series.EstimatedWait != nil || results[1].Series.EstimatedWait == nil {
		t.Error("only sluice policies estimate a wait")
	}
	b.Reset()
	if err := writeTimeseriesPlot(&b, "step", results, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("time-series plot: %v", err)
	}
	untraced, _ := sim.Run(t.Context(), sc, "fifo", 1, sim.Options{Requests: 1000})
	if err := writeTimeseriesPlot(&b, "x", []*sim.Result{untraced}, 0, time.Minute); err == nil {
		t.Error("plotting a result without a series: no error")
	}
}

func TestWrite(t *testing.T) {
	var scenarios []*scenario.Scenario
	for _, f := range []string{"retry-storm", "service-step"} {
		scenarios = append(scenarios, loadScenario(t, f))
	}
	dir := t.TempDir()
	err := Write(t.Context(), Options{
		Dir:       dir,
		Scenarios: scenarios,
		Sweep:     sim.SweepOptions{Options: sim.Options{Requests: 2000}},
		Speed:     2000,
	})
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## For the README", DefaultCommand, "## Headlines", "## Scenario: retry-storm", "## Scenario: service-step",
		"plots/retry-storm-goodput.png", "plots/service-step-timeseries.png", "## Calibration against reality", "Not run", "## Speed"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	for _, f := range []string{"retry-storm-goodput.png", "service-step-goodput.png", "service-step-timeseries.png"} {
		if _, err := os.Stat(filepath.Join(dir, "plots", f)); err != nil {
			t.Error(err)
		}
	}
	if err := Write(t.Context(), Options{Scenarios: scenarios}); err == nil {
		t.Error("no Dir: no error")
	}
}

// TestWriteRunawayTenant: a scenario with a spend section and a runaway
// gets the spend limiter's tables, with the normal day beside them.
func TestWriteRunawayTenant(t *testing.T) {
	sc := loadScenario(t, "runaway-tenant")
	dir := t.TempDir()
	err := Write(t.Context(), Options{Dir: dir, Scenarios: []*scenario.Scenario{sc},
		Sweep: sim.SweepOptions{Options: sim.Options{Requests: 30_000}, Loads: []float64{1, 5}}})
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Scenario: runaway-tenant", "| + spend limiter |", "### The spend limiter", "(without the runaway)",
		"tenant loopy alert ($120/h)", "**Runaway tenant at 5× (100× its normal rate):**", "**Load shedding protects tenants, not budgets; the spend limiter does both.**"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if bytes.Contains(md, []byte("pending")) {
		t.Error("results.md still calls the spend limiter pending")
	}
}

// TestGoodputPlotOneLoad: a sweep of a single load (sluice sim --all
// --load 1) draws its plot; gonum's log scale panicked on it.
func TestGoodputPlotOneLoad(t *testing.T) {
	for _, load := range []float64{0.5, 1, 5} {
		sw, err := sim.RunSweep(t.Context(), loadScenario(t, "mixed-deadlines"), sim.SweepOptions{Options: sim.Options{Requests: 300}, Loads: []float64{load}, Policies: []string{"fifo", "sluice"}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := (&sweep{Sweep: sw}).writeGoodputPlot(&b); err != nil {
			t.Fatalf("%g×: %v", load, err)
		}
		if _, err := png.Decode(&b); err != nil {
			t.Fatalf("%g×: %v", load, err)
		}
	}
}
