package promise

import (
	"flag"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/store/redistest"
)

var full = flag.Bool("promise.full", false, "over HTTP, run every scenario in all four variants (by default: see quick)")

// quick is the HTTP suite of every change, under ten minutes: the 5×
// storm in all four variants, every other storm scenario once, with one
// prompt for every caller — where recognition can err — declaring its
// attempts or not, in turn, each told the slots and told nothing; and the
// production-shaped scenario once, as `sluice serve --upstream U` runs it
// (told nothing), its callers declaring nothing: a minute and a half for
// the gateway and as long for its no-gateway baseline. The simulator runs
// every cell, told and learnt.
func quick(i int, sc Scenario, v Variant, conc int) bool {
	switch {
	case sc.Production != nil:
		return v.Undeclared && conc == 0
	case sc.Name == "storm-5x":
		return true
	}
	return v.SamePrompt && v.Undeclared == (i%2 == 1)
}

// TestSuiteInTheSimulator runs the whole table — every scenario, every
// variant — in virtual time, through the chain the gateway ships, and
// fails on any floor it falls below.
func TestSuiteInTheSimulator(t *testing.T) {
	seconds := 60.0
	if testkit.Race {
		seconds = 40 // the race detector slows the simulator tenfold
	}
	for _, sc := range Suite() {
		for _, v := range Variants() {
			if !sc.Runs(v) {
				continue
			}
			t.Run(sc.Name+"/"+v.String(), func(t *testing.T) {
				r, err := RunSim(t.Context(), sc, v, SimOptions{Seed: 1, Seconds: seconds})
				if err != nil {
					t.Fatal(err)
				}
				report(t, sc, r)
			})
			if sc.Production == nil || v.Undeclared {
				continue
			}
			// A production scenario also as the default gateway runs it,
			// learning the provider's slots from answers of many sizes.
			t.Run(sc.Name+"/"+v.String()+"/learnt", func(t *testing.T) {
				r, err := RunSim(t.Context(), sc, v, SimOptions{Seed: 1, Seconds: seconds, Learn: true})
				if err != nil {
					t.Fatal(err)
				}
				report(t, sc, r)
			})
		}
	}
}

// TestSimulatorLearnsWhenTold0: SimOptions.Learn runs the simulated gate
// as `sluice serve --upstream U` runs told nothing — its concurrency
// learnt from 4, a round trip at a time, not the slots — and keeps the
// replicas told (store.redis requires a configured concurrency).
func TestSimulatorLearnsWhenTold0(t *testing.T) {
	byName := map[string]Scenario{}
	for _, sc := range Suite() {
		byName[sc.Name] = sc
	}
	r, err := RunSim(t.Context(), byName["storm-5x"], Variant{}, SimOptions{Seed: 1, Seconds: 20, Learn: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Limits) != 1 || len(r.Limits[0]) < 10 || r.Limits[0][0] >= Slots {
		t.Fatalf("learnt limits %v, want one trace of a second a bucket, starting below the %d slots", r.Limits, Slots)
	}
	last := -1
	for _, l := range r.Limits[0] {
		if l > 0 {
			last = l
		}
	}
	if last < Slots-4 || last > 2*Slots {
		t.Errorf("learnt limit ended at %d, want near the %d slots; trace %v", last, Slots, r.Limits[0])
	}
	report(t, byName["storm-5x"], r)
	told, err := RunSim(t.Context(), byName["replicas-3"], Variant{}, SimOptions{Seed: 1, Seconds: 20, Learn: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(told.Limits) != 0 {
		t.Errorf("replicas learnt a limit (%v): they share a configured one", told.Limits)
	}
}

// TestSuiteOverHTTP runs the table over real HTTP on loopback: the sluice
// binary built from this tree as `sluice mock` and `sluice serve` (three
// of them on a real Redis for the replicas), driven by the load generator,
// each cell twice: the gateways told the provider's 16 slots, and told
// nothing, learning them. By default it runs the quick cells, in about
// eight minutes (-promise.full: all of them, in about twenty); .ci/run runs it
// without the race detector, which would measure itself.
func TestSuiteOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real load for minutes")
	}
	if testkit.Race {
		t.Skip("under -race the load measures the detector: .ci/run runs this test without it")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../..") // cmd/sluice
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	redis := redistest.Start(t)
	for i, sc := range Suite() {
		for _, v := range Variants() {
			if !sc.Runs(v) {
				continue
			}
			// Told the provider's concurrency, and told nothing — the
			// default of `sluice serve --upstream U`, which learns it
			// (replicas are told it either way: store.redis requires
			// it, so they run once).
			for _, conc := range []int{Slots, 0} {
				if conc == 0 && sc.Replicas > 1 || !*full && !quick(i, sc, v, conc) {
					continue
				}
				name := "told"
				if conc == 0 {
					name = "learnt"
				}
				t.Run(sc.Name+"/"+v.String()+"/"+name, func(t *testing.T) {
					r, err := RunHTTP(t.Context(), sc, v, HTTPOptions{Bin: bin, Seed: 1, Redis: redis.Addr, Concurrency: conc})
					if err != nil {
						t.Fatal(err)
					}
					report(t, sc, r)
				})
			}
		}
	}
}

// report logs r's figures and fails t on every floor r falls below.
func report(t *testing.T, sc Scenario, r *Result) {
	t.Helper()
	t.Logf("goodput %.1f%%, waste %.2f%%, unanswered %.2f%%, refusal p99 %.0f ms (%d), peak %d, %.1fs",
		r.GoodputPct, r.WastePct, r.UnansweredPct, r.RefusalP99Ms, r.Refusals, r.PeakInFlight, r.Seconds)
	if r.NoGateway != nil && r.Bound != nil {
		t.Logf("on time %d, no gateway %d, offline bound %d; success by source %v, no gateway %v, bound %v",
			r.OnTime, r.NoGateway.OnTime, r.Bound.OnTime, r.Success, r.NoGateway.Success, r.Bound.Success)
	}
	for _, c := range Checks(sc, r) {
		if !c.OK {
			t.Errorf("%s", c)
		}
	}
}

// TestChecksTellFloorsFromFigures: a figure on the wrong side of its
// floor fails it, one on the right side or exactly on it passes, and a
// figure the run did not measure (the simulator has no provider
// concurrency; a run without refusals has no refusal time) neither fails
// nor passes.
func TestChecksTellFloorsFromFigures(t *testing.T) {
	sc := Scenario{Name: "x", Floors: []Floor{goodput(95), waste(1), refusedEarly, peak(20)}}
	for _, tc := range []struct {
		r      Result
		failed int
	}{
		{Result{GoodputPct: 95, WastePct: 1, RefusalP99Ms: 200, Refusals: 1, PeakInFlight: 20}, 0},
		{Result{GoodputPct: 94.9, WastePct: 1.1, RefusalP99Ms: 201, Refusals: 1, PeakInFlight: 21}, 4},
		{Result{GoodputPct: 99, RefusalP99Ms: 5000, Refusals: 0, PeakInFlight: -1}, 0},
	} {
		if got := Failed(sc, &tc.r); len(got) != tc.failed {
			t.Errorf("%+v: failed %q, want %d floors failed", tc.r, got, tc.failed)
		}
	}
	for _, c := range Checks(sc, &Result{PeakInFlight: -1}) {
		if c.Floor.What == "provider calls at once" && (c.Has || !c.OK) {
			t.Errorf("an unmeasured figure: %+v, want not measured and not failed", c)
		}
	}
	// A floor's learnt bound applies to a learnt run only.
	sc = Scenario{Name: "y", Floors: []Floor{waste(2).learnt(4)}}
	for _, tc := range []struct {
		r      Result
		failed int
	}{
		{Result{WastePct: 3}, 1},
		{Result{WastePct: 3, Learnt: true}, 0},
		{Result{WastePct: 4.1, Learnt: true}, 1},
	} {
		if got := Failed(sc, &tc.r); len(got) != tc.failed {
			t.Errorf("%+v: failed %q, want %d floors failed", tc.r, got, tc.failed)
		}
	}
	// A floor's slack over HTTP applies to a run over HTTP only, learnt
	// or not, either way of bound.
	sc = Scenario{Name: "z", Floors: []Floor{goodput(92).learnt(85).overHTTP(4), waste(1).overHTTP(1)}}
	for _, tc := range []struct {
		r      Result
		failed int
	}{
		{Result{GoodputPct: 90, WastePct: 1.5, Way: "sim"}, 2},
		{Result{GoodputPct: 88, WastePct: 2, Way: "http"}, 0},
		{Result{GoodputPct: 87.9, WastePct: 2.1, Way: "http"}, 2},
		{Result{GoodputPct: 81, Way: "http", Learnt: true}, 0},
		{Result{GoodputPct: 81, Way: "sim", Learnt: true}, 1},
	} {
		if got := Failed(sc, &tc.r); len(got) != tc.failed {
			t.Errorf("%+v: failed %q, want %d floors failed", tc.r, got, tc.failed)
		}
	}
}

// TestSuiteNamesAreUnique: Lookup finds each scenario by its name and
// refuses a name that is not in the table, naming the ones that are.
func TestSuiteNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Suite() {
		if seen[sc.Name] {
			t.Errorf("two scenarios named %s", sc.Name)
		}
		seen[sc.Name] = true
		got, err := Lookup(sc.Name)
		if err != nil || len(got) != 1 || got[0].Name != sc.Name {
			t.Errorf("Lookup(%q): %v, %v", sc.Name, got, err)
		}
		var share float64
		for _, s := range sc.Sources {
			share += s.Share
		}
		if share < 0.999 || share > 1.001 {
			t.Errorf("%s: the sources' shares add up to %v, want 1", sc.Name, share)
		}
		if len(sc.Floors) == 0 {
			t.Errorf("%s promises nothing", sc.Name)
		}
	}
	if _, err := Lookup("storm-5x,nope"); err == nil || !strings.Contains(err.Error(), "storm-2x") {
		t.Errorf("Lookup of an unknown name: %v, want an error listing the scenarios", err)
	}
}

// TestMedianOfRuns: each figure is the median of the runs', except the
// declared calls taken for retries, where the worst run counts.
func TestMedianOfRuns(t *testing.T) {
	runs := []*Result{
		{GoodputPct: 90, WastePct: 3, Recognised: 0, PeakInFlight: 17, Success: map[string]float64{"a": 100}},
		{GoodputPct: 99, WastePct: 0, Recognised: 2, PeakInFlight: 16, Success: map[string]float64{"a": 97}},
		{GoodputPct: 96, WastePct: 1, Recognised: 0, PeakInFlight: 20, Success: map[string]float64{"a": 99}},
	}
	m := MedianOf(runs)
	if m.GoodputPct != 96 || m.WastePct != 1 || m.PeakInFlight != 17 || m.Success["a"] != 99 || m.Recognised != 2 {
		t.Errorf("median %+v: want goodput 96, waste 1, peak 17, success 99, recognised 2 (the worst)", m)
	}
	if MedianOf(runs[:1]) != runs[0] || MedianOf(nil) != nil {
		t.Error("the median of one run is that run, of none nothing")
	}
}
