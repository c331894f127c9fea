package simreport

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// The table columns: goodput as a percentage of
// capacity, success per class (per traffic source when tenants share a
// class), wasted upstream work as a percentage of billed calls, p50/p99
// latency of successes, attempts per logical request; then the bill per hour
// of the arrival window when calls are priced, its peak over the spend
// section's rate window when there is one, time to recover when the
// upstream steps, and, when callers retry without a header, the share of
// their retries recognised and the share of upstream calls that were
// retries.

func header(sw *sim.Sweep, withLoad bool) []string {
	var h []string
	if withLoad {
		h = append(h, "load")
	}
	h = append(h, "policy", "goodput % cap")
	for _, src := range sourceNames(sw) {
		h = append(h, "success "+src+" %")
	}
	h = append(h, "waste % billed", "p50 s", "p99 s", "attempts/req")
	if perSource(sw) {
		for _, src := range sourceNames(sw) {
			h = append(h, "goodput "+src+" /s", "p99 "+src+" s")
		}
	}
	if hasCost(sw) {
		h = append(h, "billed $/h")
	}
	if sw.Scenario.Spend != nil {
		h = append(h, "peak $/h")
	}
	if hasRecovery(sw) {
		h = append(h, "recovery")
	}
	if headerless(sw) {
		h = append(h, "retries recognised %", "retries % billed")
	}
	return h
}

// perSource says whether the table shows each source's goodput and p99:
// when the upstream's models have slots of their own, whose sources fare
// apart.
func perSource(sw *sim.Sweep) bool {
	for _, m := range sw.Scenario.Upstream.Models {
		if m.Concurrency > 0 {
			return true
		}
	}
	return false
}

// headerless says whether some of the scenario's callers retry without a
// header: the table then shows how many of their retries the chain
// recognised, and what share of upstream calls retries were.
func headerless(sw *sim.Sweep) bool {
	return slices.ContainsFunc(sw.Scenario.Traffic, func(s scenario.Source) bool { return s.Headers == "none" })
}

func sourceNames(sw *sim.Sweep) []string {
	for _, row := range sw.Results {
		for _, r := range row {
			names := make([]string, len(r.Sources))
			for i, s := range r.Sources {
				names[i] = s.Name
			}
			return names
		}
	}
	return nil
}

func hasCost(sw *sim.Sweep) bool {
	for _, row := range sw.Results {
		for _, r := range row {
			if r.BilledCost > 0 {
				return true
			}
		}
	}
	return false
}

func hasRecovery(sw *sim.Sweep) bool {
	for _, row := range sw.Results {
		for _, r := range row {
			if r.Recovery != nil {
				return true
			}
		}
	}
	return false
}

func row(sw *sim.Sweep, r *sim.Result, withLoad bool) []string {
	var c []string
	if withLoad {
		c = append(c, fmt.Sprintf("%g×", r.Load))
	}
	c = append(c, r.Label, fmt.Sprintf("%.1f", r.GoodputPct))
	for _, s := range r.Sources {
		c = append(c, fmt.Sprintf("%.1f", s.SuccessPct))
	}
	c = append(c, fmt.Sprintf("%.2f", r.WastePct), seconds(r.P50Ms), seconds(r.P99Ms), fmt.Sprintf("%.2f", r.AttemptsPerRequest))
	if perSource(sw) {
		for _, s := range r.Sources {
			c = append(c, fmt.Sprintf("%.1f", s.GoodputPerSecond), seconds(s.P99Ms))
		}
	}
	if hasCost(sw) {
		c = append(c, fmt.Sprintf("%.0f", r.BilledCost/(r.WindowSeconds/3600)))
	}
	if sw.Scenario.Spend != nil {
		peak := "–"
		if r.Spend != nil {
			peak = fmt.Sprintf("%.0f", r.Spend.PeakPerHour)
		}
		c = append(c, peak)
	}
	if hasRecovery(sw) {
		c = append(c, recoveryText(r.Recovery))
	}
	if headerless(sw) {
		seen := "–"
		if r.UndeclaredRetries > 0 {
			seen = fmt.Sprintf("%.1f", 100*float64(r.RetriesRecognised)/float64(r.UndeclaredRetries))
		}
		billed := "–"
		if r.Billed > 0 {
			billed = fmt.Sprintf("%.1f", 100*float64(r.BilledRetries)/float64(r.Billed))
		}
		c = append(c, seen, billed)
	}
	return c
}

// The terminal's table adds what callers felt when they got no answer:
// the share of attempts that went unanswered until the caller's own
// timeout, and how long a refusal took from send, p50/p99 in milliseconds.
// results.md does not show them (yet): its tables and the text around them
// are regenerated together.

func feltHeader() []string { return []string{"unanswered %", "refusal p50/p99 ms"} }

func feltRow(r *sim.Result) []string {
	refusal := "–" // no refusals: unlike a latency of 0, a time of 0 ms is a refusal at once
	if r.Refused > 0 {
		refusal = fmt.Sprintf("%.0f/%.0f", r.RefusalP50Ms, r.RefusalP99Ms)
	}
	return []string{fmt.Sprintf("%.2f", r.UnansweredPct), refusal}
}

func seconds(ms float64) string {
	if ms == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", ms/1000)
}

// WriteText prints a sweep as one aligned table per load, for a terminal
// (sluice sim --scenario).
func WriteText(w io.Writer, sw *sim.Sweep) error {
	sc := sw.Scenario
	for i, load := range sw.Loads {
		if i > 0 {
			fmt.Fprintln(w)
		}
		r0 := sw.Results[i][0]
		fmt.Fprintf(w, "scenario %s at %g× capacity (capacity %.1f calls/s; %d requests over %.0fs simulated; seed %d)\n",
			sc.Name, load, r0.Capacity, r0.Requests, r0.WindowSeconds, r0.Seed)
		// Numbers align right; the policy column is padded to read left.
		width := len("policy")
		for _, r := range sw.Results[i] {
			width = max(width, len([]rune(r.Label)))
		}
		pad := func(cells []string) string {
			cells[0] += strings.Repeat(" ", width-len([]rune(cells[0])))
			return strings.Join(cells, "\t") + "\t"
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, pad(append(header(sw, false), feltHeader()...)))
		for _, r := range sw.Results[i] {
			fmt.Fprintln(tw, pad(append(row(sw, r, false), feltRow(r)...)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, r := range sw.Results[i] {
			if r.Spend != nil && r.Spend.Limiter != nil {
				fmt.Fprintf(w, "%s: %s\n", r.Label, limiterText(r))
			}
		}
		for _, r := range sw.Results[i] {
			if p := r.Provider; p != nil {
				fmt.Fprintf(w, "%s: %d replicas on leases; the upstream's calls in flight: peak %d, mean %.1f of its %d slots, over them %.2f%% of the time\n",
					r.Label, p.Replicas, p.PeakInFlight, p.MeanInFlight, p.Concurrency, p.OverPct)
			}
		}
	}
	return nil
}

// limiterText sums up what the spend limiter did in a run.
func limiterText(r *sim.Result) string {
	sp := r.Spend
	l := sp.Limiter
	text := fmt.Sprintf("bill peaked at $%.0f/h over %s windows (ceiling $%.0f/h; the limiter saw $%.0f/h); refused %d attempts by a tenant budget and %d by the ceiling; degraded %d",
		sp.PeakPerHour, durationText(time.Duration(sp.RateWindowSeconds*float64(time.Second))), sp.CeilingPerHour, l.PeakPerHour, l.RefusedBudget, l.RefusedCeiling, l.Degraded)
	var alerts []string
	for _, a := range l.Alerts {
		if a.Crossed || a.Fired {
			alerts = append(alerts, alertText(a))
		}
	}
	if len(alerts) == 0 {
		return text + "; no alert"
	}
	return text + "; alerts: " + strings.Join(alerts, ", ")
}

// alertText says when an alert's rate crossed its threshold and when it
// fired.
func alertText(a sim.AlertResult) string {
	s := fmt.Sprintf("%s ($%.0f/h)", a.Name(), a.ThresholdPerHour)
	switch {
	case a.Crossed && a.Fired:
		d, _ := a.Delay()
		return s + fmt.Sprintf(" crossed at %.0f s, fired at %.0f s (+%v)", a.CrossedSeconds, a.FiredSeconds, d)
	case a.Crossed:
		return s + fmt.Sprintf(" crossed at %.0f s, never fired", a.CrossedSeconds)
	case a.Fired:
		return s + fmt.Sprintf(" fired at %.0f s without a crossing seen", a.FiredSeconds)
	}
	return s + " never crossed"
}

// table is a Markdown table for templates/table.md.tmpl: cells are
// written here, the layout there.
type table struct {
	Header []string
	// Align is each column's delimiter row cell: "---" or "---:".
	Align []string
	Rows  [][]string
}

// alignRight aligns every column right.
func (t *table) alignRight() {
	t.Align = make([]string, len(t.Header))
	for i := range t.Align {
		t.Align[i] = "---:"
	}
}

// sweepTable is a sweep's table with a row per load and policy: numbers
// to the right, the policy to the left.
func sweepTable(sw *sim.Sweep) table {
	t := table{Header: header(sw, true)}
	t.alignRight()
	t.Align[1] = "---"
	for i := range sw.Loads {
		for _, r := range sw.Results[i] {
			t.Rows = append(t.Rows, row(sw, r, true))
		}
	}
	return t
}
