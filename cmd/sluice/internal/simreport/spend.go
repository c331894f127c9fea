package simreport

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// The spend limiter's part of results.md: for a scenario with a spend
// section whose traffic changes rate mid-run (a runaway), what the bill
// did with and without the limiter, what the sources that kept their rate
// lost against a normal day, and how soon the alerts fired.

// runSteady runs the spend policy at every load of the sweep on the
// scenario's normal day (every source kept at its starting rate), when the
// scenario has a spend section, a source whose rate changes, and the spend
// policy in the sweep.
func (sw *sweep) runSteady(ctx context.Context, opt sim.SweepOptions) error {
	sc := sw.Scenario
	if sc.Spend == nil || !slices.ContainsFunc(sc.Traffic, func(s scenario.Source) bool { return s.Changes() }) ||
		!slices.ContainsFunc(sw.Policies, func(p sim.Policy) bool { return p.SpendLimiter() }) {
		return nil
	}
	opt.Loads, opt.Policies = sw.Loads, []string{"spend"}
	st, err := sim.RunSweep(ctx, sc.Steady(), opt)
	if err != nil {
		return fmt.Errorf("without the rate changes: %w", err)
	}
	sw.steady = make([]*sim.Result, len(sw.Loads))
	for i := range sw.Loads {
		sw.steady[i] = st.Results[i][0]
	}
	return nil
}

// runaway is a sweep's runaway at one load: the spend policy's run, full
// sluice's (without the limiter), and the spend policy's on the normal day.
type runaway struct {
	Load                  float64
	With, Without, Steady *sim.Result
	// Tenants are the tenants of the sources whose rate changes.
	Tenants []string
	// Others are the sources whose rate does not change, by index.
	Others []int
	// Change is how many times its starting rate a runaway source sends
	// at the end of the arrival window ("100×").
	Change string
}

func (sw *sweep) runaway(i int) *runaway {
	if sw.steady == nil {
		return nil
	}
	ra := &runaway{Load: sw.Loads[i], With: sw.Result(sw.Loads[i], "spend"), Without: sw.Result(sw.Loads[i], "sluice"), Steady: sw.steady[i]}
	if ra.With == nil || ra.Steady == nil {
		return nil
	}
	for k, src := range sw.Scenario.Traffic {
		if !src.Changes() {
			ra.Others = append(ra.Others, k)
			continue
		}
		name := src.Tenant
		if name == "" {
			name = contract.AnonymousTenant
		}
		if !slices.Contains(ra.Tenants, name) {
			ra.Tenants = append(ra.Tenants, name)
		}
	}
	ra.Change = change(sw.Scenario, ra.With)
	return ra
}

// other is a source whose rate does not change: its success beside the
// runaway and on the normal day.
type other struct {
	Name                  string
	SuccessPct, NormalPct float64
}

// OtherSources are the sources whose rate does not change.
func (ra *runaway) OtherSources() []other {
	var out []other
	for _, k := range ra.Others {
		out = append(out, other{ra.With.Sources[k].Name, ra.With.Sources[k].SuccessPct, ra.Steady.Sources[k].SuccessPct})
	}
	return out
}

// SourceOf is the first source whose rate does not change, in r.
func (ra *runaway) SourceOf(r *sim.Result) sim.ClassResult { return r.Sources[ra.Others[0]] }

// KeptPct is the lowest share, over the sources whose rate does not
// change, of their normal day's success that they kept beside the
// runaway, in percent.
func (ra *runaway) KeptPct() float64 {
	kept, found := 1.0, false
	for _, k := range ra.Others {
		w, n := ra.With.Sources[k].SuccessPct, ra.Steady.Sources[k].SuccessPct
		if f := w / n; n > 0 && (!found || f < kept) {
			kept, found = f, true
		}
	}
	return 100 * kept
}

// Alert is the first of the runaway's tenants' alerts that fired, or nil.
func (ra *runaway) Alert() *sim.AlertResult {
	for _, t := range ra.Tenants {
		if a, ok := ra.With.Spend.Limiter.Alert("tenant", t); ok && a.Fired {
			return &a
		}
	}
	return nil
}

// Global is the global alert when it fired, or nil.
func (ra *runaway) Global() *sim.AlertResult {
	if g, ok := ra.With.Spend.Limiter.Alert("global", ""); ok && g.Fired {
		return &g
	}
	return nil
}

// PeakPct is the bill's peak with the limiter as a share of the ceiling,
// in percent.
func (ra *runaway) PeakPct() float64 {
	return 100 * ra.With.Spend.PeakPerHour / ra.With.Spend.CeilingPerHour
}

// Tenant is the spend of the first runaway tenant.
func (ra *runaway) Tenant() sim.TenantSpend {
	t, _ := ra.With.Spend.Tenant(ra.Tenants[0])
	return t
}

// change is how many times its starting rate a runaway tenant's source
// sends at the end of the arrival window ("100×").
func change(sc *scenario.Scenario, r *sim.Result) string {
	window := time.Duration(r.WindowSeconds * float64(time.Second))
	for _, src := range sc.Traffic {
		if !src.Changes() {
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

// spendSection is the spend limiter's subsection of a scenario with a
// runaway (templates/scenario.md.tmpl).
type spendSection struct {
	// Runaways are the runaway at each load.
	Runaways []*runaway
	// Window is the rate window; Ceiling the global ceiling per hour;
	// Budgets the tenants with a budget.
	Window  time.Duration
	Ceiling float64
	Budgets []sim.TenantSpend
	// Bill and Success are the two tables.
	Bill, Success table
	// Worst is the bill's highest peak over the loads as a share of the
	// ceiling, in percent, at WorstLoad.
	Worst, WorstLoad float64
	// TenantOver are the loads where the runaway's own peak passed its
	// budget; FastGoodput those where goodput with the limiter passed
	// 100% of capacity.
	TenantOver  []tenantOver
	FastGoodput []loadGoodput
}

type tenantOver struct {
	Load, PeakPerHour, OverPct float64
}

type loadGoodput struct {
	Load, GoodputPct float64
}

func newSpendSection(sw *sweep) *spendSection {
	if sw.steady == nil {
		return nil
	}
	s := &spendSection{}
	for i := range sw.Loads {
		if ra := sw.runaway(i); ra != nil {
			s.Runaways = append(s.Runaways, ra)
		}
	}
	if len(s.Runaways) == 0 {
		return nil
	}
	ras := s.Runaways
	sp0 := ras[0].With.Spend
	s.Window = time.Duration(sp0.RateWindowSeconds * float64(time.Second))
	s.Ceiling = sp0.CeilingPerHour
	for _, t := range sp0.Tenants {
		if t.BudgetPerHour > 0 {
			s.Budgets = append(s.Budgets, t)
		}
	}

	s.Bill.Header = []string{"load", "bill peak $/h, " + policyLabel("sluice"), "bill peak $/h, " + policyLabel("spend"), "limiter's view"}
	for _, t := range ras[0].Tenants {
		s.Bill.Header = append(s.Bill.Header, t+" peak $/h")
	}
	s.Bill.Header = append(s.Bill.Header, "refused tenant_budget", "refused spend_ceiling", "degraded")
	for _, ra := range ras {
		sp := ra.With.Spend
		c := []string{fmt.Sprintf("%g×", ra.Load), "–", fmt.Sprintf("%.0f", sp.PeakPerHour), fmt.Sprintf("%.0f", sp.Limiter.PeakPerHour)}
		if ra.Without != nil {
			c[1] = fmt.Sprintf("%.0f", ra.Without.Spend.PeakPerHour)
		}
		for _, name := range ra.Tenants {
			t, _ := sp.Tenant(name)
			c = append(c, fmt.Sprintf("%.0f", t.PeakPerHour))
		}
		l := sp.Limiter
		s.Bill.Rows = append(s.Bill.Rows, append(c, fmt.Sprint(l.RefusedBudget), fmt.Sprint(l.RefusedCeiling), fmt.Sprint(l.Degraded)))
	}
	s.Bill.alignRight()

	s.Success.Header = []string{"load"}
	for _, o := range ras[0].OtherSources() {
		s.Success.Header = append(s.Success.Header, fmt.Sprintf("success %s %% (without the runaway)", o.Name))
	}
	// One column per alert that crossed or fired at some load.
	var alerts []sim.AlertResult
	for _, ra := range ras {
		for _, a := range ra.With.Spend.Limiter.Alerts {
			if (a.Crossed || a.Fired) && !slices.ContainsFunc(alerts, func(b sim.AlertResult) bool { return b.Name() == a.Name() }) {
				alerts = append(alerts, a)
			}
		}
	}
	for _, a := range alerts {
		s.Success.Header = append(s.Success.Header, fmt.Sprintf("%s alert ($%.0f/h): crossed → fired, s", a.Name(), a.ThresholdPerHour))
	}
	s.Success.Header = append(s.Success.Header, "alerts without the runaway")
	for _, ra := range ras {
		c := []string{fmt.Sprintf("%g×", ra.Load)}
		for _, o := range ra.OtherSources() {
			c = append(c, fmt.Sprintf("%.2f (%.2f)", o.SuccessPct, o.NormalPct))
		}
		for _, a := range alerts {
			b, _ := ra.With.Spend.Limiter.Alert(a.Scope, a.Tenant)
			c = append(c, alertCell(b))
		}
		fired := 0
		for _, a := range ra.Steady.Spend.Limiter.Alerts {
			if a.Fired {
				fired++
			}
		}
		quiet := "none fired"
		if fired > 0 {
			quiet = fmt.Sprintf("%d fired", fired)
		}
		s.Success.Rows = append(s.Success.Rows, append(c, quiet))
	}
	s.Success.alignRight()

	for _, ra := range ras {
		sp := ra.With.Spend
		if f := sp.PeakPerHour / sp.CeilingPerHour; 100*f > s.Worst {
			s.Worst, s.WorstLoad = 100*f, ra.Load
		}
		for _, name := range ra.Tenants {
			if t, _ := sp.Tenant(name); t.BudgetPerHour > 0 && t.PeakPerHour > t.BudgetPerHour {
				s.TenantOver = append(s.TenantOver, tenantOver{ra.Load, t.PeakPerHour, 100 * (t.PeakPerHour/t.BudgetPerHour - 1)})
			}
		}
		if ra.With.GoodputPct > 100 {
			s.FastGoodput = append(s.FastGoodput, loadGoodput{ra.Load, ra.With.GoodputPct})
		}
	}
	return s
}

func alertCell(a sim.AlertResult) string {
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
