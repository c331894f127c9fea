package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// The spend limiter's part of results.md: for a scenario with a spend
// section whose traffic changes rate mid-run (a runaway), what the bill
// did with and without the limiter, what the sources that kept their rate
// lost against a normal day, and how soon the alerts fired.

// runSteady runs the spend policy at every load of the sweep on the
// scenario's normal day (every source kept at its starting rate), when the
// scenario has a spend section, a source whose rate changes, and the spend
// policy in the sweep.
func (sw *Sweep) runSteady(ctx context.Context, opt SweepOptions) error {
	sc := sw.Scenario
	if sc.Spend == nil || !slices.ContainsFunc(sc.Traffic, func(s Source) bool { return s.changes() }) ||
		!slices.ContainsFunc(sw.Policies, func(p Policy) bool { return p.gate.spend }) {
		return nil
	}
	opt.Loads, opt.Policies = sw.Loads, []string{"spend"}
	st, err := RunSweep(ctx, sc.steady(), opt)
	if err != nil {
		return fmt.Errorf("without the rate changes: %w", err)
	}
	sw.steady = make([]*Result, len(sw.Loads))
	for i := range sw.Loads {
		sw.steady[i] = st.Results[i][0]
	}
	return nil
}

// runaway is a sweep's runaway at one load: the spend policy's run, full
// sluice's (without the limiter), and the spend policy's on the normal day.
type runaway struct {
	load                  float64
	with, without, steady *Result
	tenants               []string // the tenants of the sources whose rate changes
	others                []int    // the sources whose rate does not change
}

func (sw *Sweep) runaway(i int) *runaway {
	if sw.steady == nil {
		return nil
	}
	ra := &runaway{load: sw.Loads[i], with: sw.Result(sw.Loads[i], "spend"), without: sw.Result(sw.Loads[i], "sluice"), steady: sw.steady[i]}
	if ra.with == nil || ra.steady == nil {
		return nil
	}
	for k, src := range sw.Scenario.Traffic {
		if !src.changes() {
			ra.others = append(ra.others, k)
			continue
		}
		name := src.Tenant
		if name == "" {
			name = contract.AnonymousTenant
		}
		if !slices.Contains(ra.tenants, name) {
			ra.tenants = append(ra.tenants, name)
		}
	}
	return ra
}

// othersKept is the lowest share, over the sources whose rate does not
// change, of their normal day's success that they kept beside the
// runaway, and that source's two success rates.
func (ra *runaway) othersKept() (kept, with, normal float64, name string) {
	kept = 1
	for _, k := range ra.others {
		w, n := ra.with.Sources[k].SuccessPct, ra.steady.Sources[k].SuccessPct
		if f := w / n; n > 0 && (name == "" || f < kept) {
			kept, with, normal, name = f, w, n, ra.with.Sources[k].Name
		}
	}
	return
}

// alert is the first of the runaway's tenants' alerts that fired.
func (ra *runaway) alert() (AlertResult, bool) {
	for _, t := range ra.tenants {
		if a, ok := ra.with.Spend.Limiter.Alert("tenant", t); ok && a.Fired {
			return a, true
		}
	}
	return AlertResult{}, false
}

func delayText(a AlertResult) string {
	d, ok := a.Delay()
	if !ok {
		return "never"
	}
	return fmt.Sprintf("%v", d)
}

// runawaySentence is the headline of a runaway at load, or "".
func runawaySentence(sw *Sweep, load float64) string {
	i := slices.Index(sw.Loads, load)
	if i < 0 {
		return ""
	}
	ra := sw.runaway(i)
	if ra == nil || ra.without == nil || len(ra.others) == 0 {
		return ""
	}
	sp := ra.with.Spend
	var others []string
	for _, k := range ra.others {
		others = append(others, fmt.Sprintf("%s %.2f%% (%.2f%%)", ra.with.Sources[k].Name, ra.with.Sources[k].SuccessPct, ra.steady.Sources[k].SuccessPct))
	}
	text := fmt.Sprintf("with the spend limiter the bill peaks at $%.0f/h against a $%.0f/h ceiling (%.0f%% of it; full sluice without the limiter: $%.0f/h); the other tenants' success beside the runaway (without it): %s",
		sp.PeakPerHour, sp.CeilingPerHour, 100*sp.PeakPerHour/sp.CeilingPerHour, ra.without.Spend.PeakPerHour, strings.Join(others, ", "))
	if a, ok := ra.alert(); ok {
		text += fmt.Sprintf("; %s's alert fires %s after its spend rate crossed $%.0f/h", a.Tenant, delayText(a), a.ThresholdPerHour)
	}
	if g, ok := sp.Limiter.Alert("global", ""); ok && g.Fired {
		text += fmt.Sprintf(", the global one %s after $%.0f/h", delayText(g), g.ThresholdPerHour)
	}
	return text
}

// writeSpend writes the spend limiter's tables of a sweep with a runaway.
func writeSpend(w io.Writer, sw *Sweep) {
	if sw.steady == nil {
		return
	}
	var ras []*runaway
	for i := range sw.Loads {
		if ra := sw.runaway(i); ra != nil {
			ras = append(ras, ra)
		}
	}
	if len(ras) == 0 {
		return
	}
	sp0 := ras[0].with.Spend
	window := time.Duration(sp0.RateWindowSeconds * float64(time.Second))
	fmt.Fprintf(w, "### The spend limiter\n\n")
	var budgets []string
	for _, t := range sp0.Tenants {
		if t.BudgetPerHour > 0 {
			budgets = append(budgets, fmt.Sprintf("%s $%.0f/h", t.Name, t.BudgetPerHour))
		}
	}
	fmt.Fprintf(w, "The policy *%s* is full sluice with the scenario's spend section: a ceiling of $%.0f/h on the spend rate over %s windows", policyLabel("spend"), sp0.CeilingPerHour, durationText(window))
	if len(budgets) > 0 {
		fmt.Fprintf(w, ", budgets of %s", strings.Join(budgets, ", "))
	}
	fmt.Fprintf(w, ". The bill's peak is the highest cost of the calls started in any %s window, at the usage they report, per hour — counted by the simulator, not read from the limiter, whose own view (calls in flight at their reserved estimate, minute buckets) is shown beside it. ", durationText(window))
	fmt.Fprintf(w, "*Without the runaway* is the same policy on a normal day: every source kept at the rate it starts with, so that %s never runs away.\n\n", strings.Join(ras[0].tenants, ", "))

	h := []string{"load", "bill peak $/h, " + policyLabel("sluice"), "bill peak $/h, " + policyLabel("spend"), "limiter's view"}
	for _, t := range ras[0].tenants {
		h = append(h, t+" peak $/h")
	}
	h = append(h, "refused tenant_budget", "refused spend_ceiling", "degraded")
	table(w, h, func(emit func(...string)) {
		for _, ra := range ras {
			sp := ra.with.Spend
			c := []string{fmt.Sprintf("%g×", ra.load), "–", fmt.Sprintf("%.0f", sp.PeakPerHour), fmt.Sprintf("%.0f", sp.Limiter.PeakPerHour)}
			if ra.without != nil {
				c[1] = fmt.Sprintf("%.0f", ra.without.Spend.PeakPerHour)
			}
			for _, name := range ra.tenants {
				t, _ := sp.Tenant(name)
				c = append(c, fmt.Sprintf("%.0f", t.PeakPerHour))
			}
			l := sp.Limiter
			emit(append(c, fmt.Sprint(l.RefusedBudget), fmt.Sprint(l.RefusedCeiling), fmt.Sprint(l.Degraded))...)
		}
	})
	fmt.Fprintln(w)

	h = []string{"load"}
	for _, k := range ras[0].others {
		h = append(h, fmt.Sprintf("success %s %% (without the runaway)", ras[0].with.Sources[k].Name))
	}
	// One column per alert that crossed or fired at some load.
	var alerts []AlertResult
	for _, ra := range ras {
		for _, a := range ra.with.Spend.Limiter.Alerts {
			if (a.Crossed || a.Fired) && !slices.ContainsFunc(alerts, func(b AlertResult) bool { return b.Name() == a.Name() }) {
				alerts = append(alerts, a)
			}
		}
	}
	for _, a := range alerts {
		h = append(h, fmt.Sprintf("%s alert ($%.0f/h): crossed → fired, s", a.Name(), a.ThresholdPerHour))
	}
	h = append(h, "alerts without the runaway")
	table(w, h, func(emit func(...string)) {
		for _, ra := range ras {
			c := []string{fmt.Sprintf("%g×", ra.load)}
			for _, k := range ra.others {
				c = append(c, fmt.Sprintf("%.2f (%.2f)", ra.with.Sources[k].SuccessPct, ra.steady.Sources[k].SuccessPct))
			}
			for _, a := range alerts {
				b, _ := ra.with.Spend.Limiter.Alert(a.Scope, a.Tenant)
				c = append(c, alertCell(b))
			}
			fired := 0
			for _, a := range ra.steady.Spend.Limiter.Alerts {
				if a.Fired {
					fired++
				}
			}
			quiet := "none fired"
			if fired > 0 {
				quiet = fmt.Sprintf("%d fired", fired)
			}
			emit(append(c, quiet)...)
		}
	})
	fmt.Fprintln(w)

	// What the tables say, computed.
	var notes []string
	worst, worstAt := 0.0, 0.0
	var tenantOver []string
	for _, ra := range ras {
		sp := ra.with.Spend
		if f := sp.PeakPerHour / sp.CeilingPerHour; f > worst {
			worst, worstAt = f, ra.load
		}
		for _, name := range ra.tenants {
			if t, _ := sp.Tenant(name); t.BudgetPerHour > 0 && t.PeakPerHour > t.BudgetPerHour {
				tenantOver = append(tenantOver, fmt.Sprintf("%g×: $%.0f/h (+%.0f%%)", ra.load, t.PeakPerHour, 100*(t.PeakPerHour/t.BudgetPerHour-1)))
			}
		}
	}
	notes = append(notes, fmt.Sprintf("With the limiter, the bill's peak is at most %.0f%% of the ceiling (at %g×); without it, full sluice bills what the upstream's capacity costs.", 100*worst, worstAt))
	if len(tenantOver) > 0 {
		notes = append(notes, fmt.Sprintf("The runaway's own peak passes its budget by a few percent (%s). The limiter reads the rate from minute buckets and counts the oldest minute of its window as if that minute's spend had been spread evenly over it; a runaway's need not be — a burst that comes late in a minute is still wholly inside an exact window while the limiter already counts part of it as gone. The bill's peak is measured on exact windows.",
			strings.Join(tenantOver, "; ")))
	}
	var gp []string
	for _, ra := range ras {
		if ra.with.GoodputPct > 100 {
			gp = append(gp, fmt.Sprintf("%g×: %.0f%%", ra.load, ra.with.GoodputPct))
		}
	}
	if len(gp) > 0 {
		notes = append(notes, fmt.Sprintf("Goodput counts answers against the calls the upstream completes at its usual service time; calls degraded to a faster model take less of it, so with the limiter goodput passes 100%% of capacity (%s).", strings.Join(gp, ", ")))
	}
	for _, n := range notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
}

func alertCell(a AlertResult) string {
	switch {
	case a.Crossed && a.Fired:
		d, _ := a.Delay()
		return fmt.Sprintf("%.0f → %.0f (+%v)", a.CrossedSeconds, a.FiredSeconds, d)
	case a.Crossed:
		return fmt.Sprintf("%.0f → never", a.CrossedSeconds)
	case a.Fired:
		return fmt.Sprintf("– → %.0f", a.FiredSeconds)
	}
	return "–"
}

func policyLabel(name string) string {
	p, _ := policyByName(name)
	return p.Label
}

// table writes a Markdown table: the header, then the rows emit gives.
func table(w io.Writer, header []string, rows func(emit func(...string))) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---:"
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	rows(func(cells ...string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) })
}

// change is how many times its starting rate a runaway tenant's source
// sends at the end of the arrival window ("100×").
func (ra *runaway) change(sw *Sweep) string {
	window := time.Duration(ra.with.WindowSeconds * float64(time.Second))
	for _, src := range sw.Scenario.Traffic {
		if !src.changes() {
			continue
		}
		at := func(t time.Duration) float64 {
			f, last := 1.0, time.Duration(-1)
			for _, st := range src.Steps {
				if p := st.At.Resolve(window); p <= t && p >= last {
					f, last = st.Factor, p
				}
			}
			return f
		}
		if start := at(0); start > 0 {
			return fmt.Sprintf("%g×", at(window-1)/start)
		}
	}
	return "many times"
}

// runawayFinding is the finding on the runaway tenant, or "".
func runawayFinding(sw *Sweep) string {
	i := slices.Index(sw.Loads, headlineLoad)
	if i < 0 {
		return ""
	}
	ra := sw.runaway(i)
	q := sw.Result(headlineLoad, "small-queue")
	if ra == nil || ra.without == nil || q == nil || len(ra.others) == 0 || len(ra.tenants) == 0 {
		return ""
	}
	k := ra.others[0]
	sp := ra.with.Spend
	l := sp.Limiter
	name := ra.tenants[0]
	t, _ := sp.Tenant(name)
	text := fmt.Sprintf("**Load shedding protects tenants, not budgets; the spend limiter does both.** With %s running away at %g×, full sluice without the limiter keeps %s's success at %.1f%% (a small bounded queue: %.1f%%), but bills what the upstream's capacity costs: a peak of $%.0f/h. With the limiter, %s's own budget stops it first — it is over quota in the gate, then degraded to the cheaper model, then refused (%d attempts, 429 tenant_budget) — so its spend peaks at $%.0f/h against a $%.0f/h budget and the bill at $%.0f/h against a $%.0f/h ceiling",
		name, float64(headlineLoad), ra.with.Sources[k].Name, ra.without.Sources[k].SuccessPct, q.Sources[k].SuccessPct, ra.without.Spend.PeakPerHour,
		name, l.RefusedBudget, t.PeakPerHour, t.BudgetPerHour, sp.PeakPerHour, sp.CeilingPerHour)
	if l.RefusedCeiling == 0 {
		text += ", which never had to refuse anyone"
	} else {
		text += fmt.Sprintf(", which refused %d attempts", l.RefusedCeiling)
	}
	kept, _, _, _ := ra.othersKept()
	return text + "; the other tenants " + keptText(kept) + "."
}

// keptText says how much of their normal success the other tenants kept,
// at least.
func keptText(kept float64) string {
	if kept >= 0.9995 {
		return "lose none of their normal success"
	}
	return fmt.Sprintf("keep at least %.1f%% of their normal success", 100*kept)
}

// durationText writes whole minutes as "5m", anything else as Go does.
func durationText(d time.Duration) string {
	if d > 0 && d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
