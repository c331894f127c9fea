package calibrate

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Slots: -1},
		{Median: time.Microsecond},
		{Sigma: 3},
		{Deadline: time.Millisecond},
		{Duration: time.Millisecond},
		{Loads: []float64{0}},
		{Loads: []float64{50}},
	} {
		if _, err := Run(t.Context(), c, nil); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestRunIsComparable runs a tiny calibration for real on loopback — a
// second of arrivals through the gateway to the mock — and checks that both
// sides report the same measures for the same workload.
func TestRunIsComparable(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	rep, err := Run(t.Context(), Config{Slots: 4, Median: 100 * time.Millisecond, Deadline: 2 * time.Second,
		Loads: []float64{2}, Duration: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	row := rep.Rows[0]
	t.Logf("sim %+v\nreal %+v", row.Sim, row.Real)
	for name, f := range map[string]Figures{"sim": row.Sim, "real": row.Real} {
		// 2× of 4 slots / ~113ms is about 70 requests a second: light
		// enough for a race-instrumented run beside the rest of the suite.
		if f.Requests < 80 || f.Requests > 250 || f.AttemptsPerRequest < 1 || f.GoodputPct <= 10 || f.SuccessPct <= 10 {
			t.Errorf("%s: %+v", name, f)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !(row.SimLow.GoodputPct <= row.Sim.GoodputPct && row.Sim.GoodputPct <= row.SimHigh.GoodputPct && row.SimLow.Requests < row.SimHigh.Requests) {
		t.Errorf("simulated spread %+v – %+v does not hold the seed's run %+v", row.SimLow, row.SimHigh, row.Sim)
	}
	for _, want := range []string{"| 2× | simulated |", "| 2× | real |", "other seeds: range", "difference"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
