package sim

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func smallSweep(t *testing.T, file string) *Sweep {
	t.Helper()
	sc, err := LoadScenario("../scenarios/" + file + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	sw, err := RunSweep(t.Context(), sc, SweepOptions{Options: Options{Requests: 3000}, Loads: []float64{1, 5}})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func TestTablesHaveARowPerPolicyAndLoad(t *testing.T) {
	sw := smallSweep(t, "mixed-deadlines")
	var text, md bytes.Buffer
	if err := sw.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := sw.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"goodput % cap", "success interactive %", "success batch %", "waste % billed", "p99 s", "attempts/req", "sluice (+ retry budget)", "unbounded FIFO"} {
		if !strings.Contains(text.String(), want) || !strings.Contains(md.String(), want) {
			t.Errorf("tables lack %q", want)
		}
	}
	if got, want := strings.Count(md.String(), "\n"), 2+2*len(sw.Scenario.PolicyNames()); got != want {
		t.Errorf("markdown has %d lines, want %d:\n%s", got, want, md.String())
	}
	if strings.Contains(text.String(), "recovery") {
		t.Error("a recovery column without an upstream step")
	}
	if step := smallSweep(t, "service-step"); !strings.Contains(step.header(true)[len(step.header(true))-1], "recovery") {
		t.Error("no recovery column for the step scenario")
	}
}

func TestPlotsArePNGs(t *testing.T) {
	sw := smallSweep(t, "retry-storm")
	var b bytes.Buffer
	if err := sw.WriteGoodputPlot(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("goodput plot: %v", err)
	}
	sc, err := LoadScenario("../scenarios/service-step.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var results []*Result
	for _, p := range []string{"fifo", "sluice"} {
		r, err := Run(t.Context(), sc, p, 1, Options{Requests: 3000, Trace: true})
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
	if err := WriteTimeseriesPlot(&b, "step", results, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("time-series plot: %v", err)
	}
	untraced, _ := Run(t.Context(), sc, "fifo", 1, Options{Requests: 1000})
	if err := WriteTimeseriesPlot(&b, "x", []*Result{untraced}, 0, time.Minute); err == nil {
		t.Error("plotting a result without a series: no error")
	}
}

func TestWriteResults(t *testing.T) {
	var scenarios []*Scenario
	for _, f := range []string{"retry-storm", "service-step"} {
		sc, err := LoadScenario("../scenarios/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		scenarios = append(scenarios, sc)
	}
	dir := t.TempDir()
	err := WriteResults(t.Context(), ResultsOptions{
		Dir:       dir,
		Scenarios: scenarios,
		Sweep:     SweepOptions{Options: Options{Requests: 2000}},
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
	if err := WriteResults(t.Context(), ResultsOptions{Scenarios: scenarios}); err == nil {
		t.Error("no Dir: no error")
	}
}

// TestWriteResultsRunawayTenant: a scenario with a spend section and a
// runaway gets the spend limiter's tables, with the normal day beside them.
func TestWriteResultsRunawayTenant(t *testing.T) {
	sc, err := LoadScenario("../scenarios/runaway-tenant.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	err = WriteResults(t.Context(), ResultsOptions{Dir: dir, Scenarios: []*Scenario{sc},
		Sweep: SweepOptions{Options: Options{Requests: 30_000}, Loads: []float64{1, 5}}})
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
