package promise

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// MedianOf is the result of several runs of one cell, figure by figure: the
// median of each (the upper one of an even count), except the declared
// calls taken for retries, whose worst run counts — one is one too many.
func MedianOf(runs []*Result) *Result {
	if len(runs) == 0 {
		return nil
	}
	if len(runs) == 1 {
		return runs[0]
	}
	first := runs[0]
	med := func(f func(*Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	out := &Result{
		Scenario: first.Scenario, Variant: first.Variant, Way: first.Way, Declared: first.Declared, Learnt: first.Learnt,
		GoodputPct:    med(func(r *Result) float64 { return r.GoodputPct }),
		WastePct:      med(func(r *Result) float64 { return r.WastePct }),
		UnansweredPct: med(func(r *Result) float64 { return r.UnansweredPct }),
		RefusalP99Ms:  med(func(r *Result) float64 { return r.RefusalP99Ms }),
		Refusals:      int(med(func(r *Result) float64 { return float64(r.Refusals) })),
		PeakInFlight:  int(med(func(r *Result) float64 { return float64(r.PeakInFlight) })),
		Seconds:       med(func(r *Result) float64 { return r.Seconds }),
		Success:       map[string]float64{},
	}
	for _, r := range runs {
		out.Recognised = max(out.Recognised, r.Recognised)
	}
	for name := range first.Success {
		out.Success[name] = med(func(r *Result) float64 { return r.Success[name] })
	}
	return out
}

// Row is one line of the table: a cell's result and its floors.
type Row struct {
	Scenario Scenario
	Result   *Result
}

// WriteTable prints rows as a table, with the worst success of the sources
// the scenario promises a success to (of every source when it promises
// none) and every floor the row falls below; it returns how many rows
// did.
func WriteTable(w io.Writer, rows []Row) (failed int, err error) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tcallers\tway\tgoodput %\twaste %\tunanswered %\trefusal p99 ms\tworst success %\tpeak\tfloors\t")
	for _, row := range rows {
		r := row.Result
		worst, worstName := 101.0, ""
		var names []string
		for _, f := range row.Scenario.Floors {
			if _, ok := r.Success[f.Source]; ok && f.Source != "" {
				names = append(names, f.Source)
			}
		}
		if len(names) == 0 {
			for name := range r.Success {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if r.Success[name] < worst {
				worst, worstName = r.Success[name], name
			}
		}
		peak := "–"
		if r.PeakInFlight >= 0 {
			peak = fmt.Sprint(r.PeakInFlight)
		}
		refusal := "–"
		if r.Refusals > 0 {
			refusal = fmt.Sprintf("%.0f", r.RefusalP99Ms)
		}
		floors := "ok"
		if f := Failed(row.Scenario, r); len(f) > 0 {
			floors = "FAILED: " + strings.Join(f, "; ")
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.2f\t%.2f\t%s\t%.1f (%s)\t%s\t%s\t\n", r.Scenario, r.Variant, r.Way,
			r.GoodputPct, r.WastePct, r.UnansweredPct, refusal, worst, worstName, peak, floors)
	}
	return failed, tw.Flush()
}
