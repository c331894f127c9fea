package simreport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

func render(t *testing.T, name string, data any) string {
	t.Helper()
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestList(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"\n\n  \n\n", ""},
		{"one\ntwo", "- one two\n"},
		{"\n  first\n  wrapped \n\n\n\nsecond\n\n \n", "- first wrapped\n- second\n"},
	} {
		if got := list(c.in); got != c.want {
			t.Errorf("list(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestQuote(t *testing.T) {
	text := strings.Repeat("word ", 40)
	got := quote(text)
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if !strings.HasPrefix(l, "> ") || len(l) > 78 {
			t.Errorf("quote line %q: want \"> \" and at most 78 columns", l)
		}
	}
	if line(strings.ReplaceAll(got, ">", "")) != line(text) {
		t.Errorf("quote lost words:\n%s", got)
	}
}

// TestKept: the other tenants' share of their normal success is worded
// by its value.
func TestKept(t *testing.T) {
	if got := render(t, "kept", 100.0); got != "lose none of their normal success" {
		t.Errorf("kept 100%%: %q", got)
	}
	if got := render(t, "kept", 97.34); got != "keep at least 97.3% of their normal success" {
		t.Errorf("kept 97.34%%: %q", got)
	}
}

// TestFindingsPremises: a finding is stated only when its premise holds,
// and without findings there is no section.
func TestFindingsPremises(t *testing.T) {
	if got := render(t, "findings", findings{Load: 5}); got != "" {
		t.Errorf("no figures: want no section, got %q", got)
	}
	depth := func(recovered bool) findings {
		return findings{Load: 5, Depth: &depthFinding{
			Depth: 500, Before: 18e9, After: 71e9, Deadline: 30e9,
			Threshold: &sim.Result{WastePct: 17.4, Recovery: &sim.Recovery{Recovered: recovered, Seconds: 40}},
			Sluice:    &sim.Result{Recovery: &sim.Recovery{Recovered: true, Seconds: 3}},
		}}
	}
	got := render(t, "findings", depth(false))
	want := "## Findings\n\n- **Depth is the wrong signal.** In the service-step scenario at 1×, the depth threshold of 500 is 18s of work before the step, inside the 30s deadline, and 71s after it: it never recovers, and 17.4% of its billed calls are wasted over the run, against 0.00% for sluice, which recovers in 3 s.\n\n"
	if got != want {
		t.Errorf("depth threshold that never recovers:\ngot  %q\nwant %q", got, want)
	}
	if got := render(t, "findings", depth(true)); got != "" {
		t.Errorf("depth threshold that recovers: want no finding, got %q", got)
	}

	prio := func(lifoInteractive, lifoBatch float64) string {
		src := func(i, b float64) []sim.ClassResult {
			return []sim.ClassResult{{Name: "interactive", SuccessPct: i}, {Name: "batch", SuccessPct: b}}
		}
		return render(t, "findings", findings{Load: 5,
			PrioritySluice: &sim.Result{Sources: src(41.1, 12.1)},
			PriorityLIFO:   &sim.Result{Sources: src(lifoInteractive, lifoBatch)}})
	}
	if got := prio(2.9, 47.9); !strings.Contains(got, "12.1% of batch ones. Without priority shedding the wait-based gate favours batch instead (2.9% and 47.9%)") {
		t.Errorf("LIFO favouring batch: %q", got)
	}
	if got := prio(47.9, 2.9); !strings.Contains(got, "12.1% of batch ones.\n") || strings.Contains(got, "favours batch") {
		t.Errorf("LIFO not favouring batch: %q", got)
	}
}

// TestStepHeadline: the depth threshold's recovery is worded by whether it
// recovered.
func TestStepHeadline(t *testing.T) {
	h := func(rec *sim.Recovery) string {
		return render(t, "headlines", headlines{Load: 5, Step: &stepHeadline{
			Sluice: []loadRecovery{{1, &sim.Recovery{Recovered: true, Seconds: 1}}, {5, &sim.Recovery{Recovered: true, Seconds: 2}}},
			Depth:  500, DepthRecovery: rec,
		}})
	}
	want := "- **Service time ×4 mid-run:** sluice recovers in 1×: 1 s, 5×: 2 s (simulated time, by load); the depth threshold of 500 never recovers at 1×.\n"
	if got := h(&sim.Recovery{}); !strings.Contains(got, want) {
		t.Errorf("never recovers:\ngot  %q\nwant %q", got, want)
	}
	if got := h(&sim.Recovery{Recovered: true, Seconds: 12}); !strings.Contains(got, "the depth threshold of 500 recovers in 12 s at 1×.\n") {
		t.Errorf("recovers: %q", got)
	}
}

// TestWriteCalibration: the calibration's table goes into its section
// with the paragraph on how to judge it, and its error stops the write.
func TestWriteCalibration(t *testing.T) {
	opt := Options{
		Dir:       t.TempDir(),
		Scenarios: []*scenario.Scenario{loadScenario(t, "mixed-deadlines")},
		Sweep:     sim.SweepOptions{Options: sim.Options{Requests: 500}, Loads: []float64{1}},
		Calibration: func(w io.Writer) error {
			_, err := io.WriteString(w, "| load | run |\n|---:|---|\n| 1× | real |\n")
			return err
		},
	}
	if err := Write(t.Context(), opt); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(opt.Dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "over the nominal capacity.\n\n| load | run |\n|---:|---|\n| 1× | real |\n\nJudge each difference"; !bytes.Contains(md, []byte(want)) {
		t.Errorf("results.md lacks the calibration table and its paragraph (%q):\n%s", want, md)
	}
	if bytes.Contains(md, []byte("Not run")) || bytes.Contains(md, []byte("## Speed")) {
		t.Errorf("results.md says calibration was not run, or has a speed section nobody asked for")
	}
	boom := errors.New("boom")
	opt.Calibration = func(io.Writer) error { return boom }
	if err := Write(t.Context(), opt); !errors.Is(err, boom) {
		t.Errorf("calibration failing: Write returned %v, want it", err)
	}
}
