package sim

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// The spend limiter in the simulator is the real spend.Limiter, as the
// spend stage of the admission chain the gateway runs (package chain): the
// simulator builds it, hands it to the chain, and reads it. Alerts are
// evaluated every alert_interval, as the Alerter does; the limiter's rates
// are sampled every second to see when each crossed its alert threshold.
// Nothing of the policy is modelled here.

// SpendResult is the money side of a run of a scenario with a spend
// section. Rates are USD per hour over the section's rate window.
type SpendResult struct {
	CeilingPerHour    float64 `json:"ceiling_per_hour"`
	RateWindowSeconds float64 `json:"rate_window_seconds"`
	// PeakPerHour is the highest actual spend rate of the run: the cost of
	// the calls started within a rate window, at the usage they report,
	// projected to an hour, for windows ending at each whole second. It is
	// the provider's bill as the simulator counts it, for every policy,
	// not the limiter's own view.
	PeakPerHour float64 `json:"peak_per_hour"`
	// Tenants break the spend down per tenant, in traffic order.
	Tenants []TenantSpend `json:"tenants"`
	// Limiter is set for the policy that runs the spend limiter.
	Limiter *LimiterResult `json:"limiter,omitempty"`
}

// TenantSpend is one tenant's spend in a run.
type TenantSpend struct {
	Name string `json:"name"`
	// BudgetPerHour is the tenant's hourly budget (zero: none).
	BudgetPerHour float64 `json:"budget_per_hour,omitempty"`
	// PeakPerHour is its highest actual spend rate, as for the global one.
	PeakPerHour float64 `json:"peak_per_hour"`
	// SpentUSD is the cost of all its calls.
	SpentUSD float64 `json:"spent_usd"`
}

// LimiterResult is what the spend limiter did in a run.
type LimiterResult struct {
	// PeakPerHour is the highest global rate the limiter itself saw
	// (reservations in flight at their estimates), sampled every second.
	PeakPerHour float64 `json:"peak_per_hour"`
	// Degraded counts attempts moved down the ladder; RefusedBudget and
	// RefusedCeiling the attempts refused by a tenant's budget and by the
	// global ceiling.
	Degraded       int `json:"degraded"`
	RefusedBudget  int `json:"refused_budget"`
	RefusedCeiling int `json:"refused_ceiling"`
	// SpentUSD is the spend settled in the limiter's books: the reported
	// cost of the calls that ended, and the estimate of those whose caller
	// left first (the gateway hangs up and sees no usage). WastedUSD is the
	// part it counted as wasted (RecordWasted): those abandoned calls.
	SpentUSD  float64 `json:"spent_usd"`
	WastedUSD float64 `json:"wasted_usd"`
	// Alerts are the global alert, then each tenant's, by name: every
	// scope with an alert threshold.
	Alerts []AlertResult `json:"alerts"`
	// AlertEvents counts the events EvaluateAlerts returned, fired and
	// resolved.
	AlertEvents int `json:"alert_events"`
}

// AlertResult is one scope's alert in a run. Times are simulated seconds
// from the start of the run.
type AlertResult struct {
	// Scope is "global" or "tenant"; Tenant names the tenant.
	Scope  string `json:"scope"`
	Tenant string `json:"tenant,omitempty"`
	// ThresholdPerHour is the alert's threshold.
	ThresholdPerHour float64 `json:"threshold_per_hour"`
	// Crossed says the limiter's rate reached the threshold, first at
	// CrossedSeconds. The rate is sampled every whole second, so the
	// crossing itself lies in the second before.
	Crossed        bool    `json:"crossed"`
	CrossedSeconds float64 `json:"crossed_seconds"`
	// Fired says the alert fired, first at FiredSeconds.
	Fired        bool    `json:"fired"`
	FiredSeconds float64 `json:"fired_seconds"`
}

// Name is "global" or "tenant <name>".
func (a AlertResult) Name() string {
	if a.Tenant == "" {
		return a.Scope
	}
	return a.Scope + " " + a.Tenant
}

// Delay is how long after the sampled crossing the alert first fired, and
// false unless both happened.
func (a AlertResult) Delay() (time.Duration, bool) {
	if !a.Crossed || !a.Fired {
		return 0, false
	}
	return time.Duration((a.FiredSeconds - a.CrossedSeconds) * float64(time.Second)), true
}

// Alert returns the alert of a scope ("global", or "tenant" and a name),
// or false.
func (r *LimiterResult) Alert(scope, tenant string) (AlertResult, bool) {
	for _, a := range r.Alerts {
		if a.Scope == scope && a.Tenant == tenant {
			return a, true
		}
	}
	return AlertResult{}, false
}

// Tenant returns a tenant's spend, or false.
func (r *SpendResult) Tenant(name string) (TenantSpend, bool) {
	for _, t := range r.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return TenantSpend{}, false
}

// spendShell holds the spend limiter of one run of the spend policy, and
// what the run saw of it. Its methods do nothing on a nil shell, so the
// gate calls them unguarded.
type spendShell struct {
	e          *engine
	l          *spend.Limiter
	interval   time.Duration // between alert evaluations
	nextSample time.Duration
	nextAlert  time.Duration
	peak       float64
	alerts     map[string]*AlertResult // by scope key
	events     int
	final      spend.Snapshot
}

// sampleEvery is how often the limiter's rates are read for the crossings.
const sampleEvery = time.Second

func newSpendShell(e *engine) (*spendShell, error) {
	s := e.s
	l, err := spend.New(*s.spend, spend.Options{})
	if err != nil {
		return nil, err
	}
	sp := &spendShell{e: e, l: l, interval: s.spend.AlertInterval.D(), alerts: map[string]*AlertResult{}}
	if sp.interval == 0 {
		sp.interval = spend.DefaultAlertInterval
	}
	e.wake(0)
	return sp, nil
}

// tick samples the limiter's rates and, when due, evaluates its alerts.
func (sp *spendShell) tick(now time.Duration) {
	if sp == nil {
		return
	}
	t := sp.e.s.at(now)
	// Sampled first, at the same instant: an alert never fires before its
	// crossing is seen.
	sp.sample(now, t)
	if now >= sp.nextSample {
		sp.nextSample += sampleEvery
	}
	if now >= sp.nextAlert {
		for _, ev := range sp.l.EvaluateAlerts(t) {
			sp.events++
			if ev.State != spend.AlertFired {
				continue
			}
			if a := sp.alert(ev.Scope, ev.Tenant, ev.ThresholdPerHour); !a.Fired {
				a.Fired, a.FiredSeconds = true, now.Seconds()
			}
		}
		sp.nextAlert += sp.interval
	}
	if next := min(sp.nextSample, sp.nextAlert); next <= sp.e.s.end {
		sp.e.wake(next)
	}
}

func (sp *spendShell) sample(now time.Duration, t time.Time) {
	snap := sp.l.Snapshot(t)
	sp.peak = max(sp.peak, snap.Global.RatePerHour)
	watch := func(scope string, st spend.ScopeSnapshot) {
		if st.AlertPerHour <= 0 {
			return
		}
		name := st.Name
		if scope == "global" {
			name = ""
		}
		a := sp.alert(scope, name, st.AlertPerHour)
		if !a.Crossed && st.RatePerHour >= st.AlertPerHour {
			a.Crossed, a.CrossedSeconds = true, now.Seconds()
		}
	}
	watch("global", snap.Global)
	for _, ts := range snap.Tenants {
		watch("tenant", ts)
	}
}

func (sp *spendShell) alert(scope, tenant string, threshold float64) *AlertResult {
	key := scope + "\x00" + tenant
	a := sp.alerts[key]
	if a == nil {
		a = &AlertResult{Scope: scope, Tenant: tenant, ThresholdPerHour: threshold}
		sp.alerts[key] = a
	}
	return a
}

// end checks, once every caller has gone, that every reservation was
// settled: one left over is a path of the chain or of this shell that
// misses a settlement.
func (sp *spendShell) end(t time.Time) error {
	if sp == nil {
		return nil
	}
	sp.final = sp.l.Snapshot(t)
	if n := sp.final.Reservations; n != 0 {
		return fmt.Errorf("policy %s: %d spend reservations left unsettled at the end of the run", sp.e.s.policy.Name, n)
	}
	return nil
}

func (sp *spendShell) result() *LimiterResult {
	g := sp.final.Global
	r := &LimiterResult{
		PeakPerHour:    sp.peak,
		Degraded:       int(g.Degraded),
		RefusedBudget:  int(g.RefusedBudget),
		RefusedCeiling: int(g.RefusedCeiling),
		SpentUSD:       g.SpentUSD,
		WastedUSD:      g.WastedUSD,
		AlertEvents:    sp.events,
	}
	for _, key := range slices.SortedFunc(maps.Keys(sp.alerts), func(a, b string) int {
		// The global alert first, then the tenants' by name.
		x, y := sp.alerts[a], sp.alerts[b]
		return cmp.Or(cmp.Compare(x.Scope, y.Scope), cmp.Compare(x.Tenant, y.Tenant))
	}) {
		r.Alerts = append(r.Alerts, *sp.alerts[key])
	}
	return r
}

// spendResult is the run's SpendResult, nil without a spend section.
func (m *metrics) spendResult(e *engine) *SpendResult {
	s := m.s
	if s.spend == nil {
		return nil
	}
	w := int(s.rateWindow / time.Second)
	r := &SpendResult{CeilingPerHour: s.spend.CeilingPerHour, RateWindowSeconds: s.rateWindow.Seconds()}
	r.PeakPerHour, _ = peakRate(m.spent[0], w)
	for i, name := range s.tenants {
		if name == "" {
			name = contract.AnonymousTenant
		}
		ts := TenantSpend{Name: name, BudgetPerHour: s.spend.Tenants[name].PerHour}
		ts.PeakPerHour, ts.SpentUSD = peakRate(m.spent[1+i], w)
		r.Tenants = append(r.Tenants, ts)
	}
	if g, ok := e.srv.(*gateServer); ok && g.spend != nil {
		r.Limiter = g.spend.result()
	}
	return r
}

// peakRate is the highest sum of w consecutive seconds of spend, as USD per
// hour, and the total in USD.
func peakRate(perSecond []int64, w int) (perHour, total float64) {
	var sum, peak, all int64
	for i, v := range perSecond {
		sum += v
		all += v
		if i >= w {
			sum -= perSecond[i-w]
		}
		peak = max(peak, sum)
	}
	return float64(peak) / 1e9 * float64(time.Hour/time.Second) / float64(w), float64(all) / 1e9
}

func nanoDollars(usd float64) int64 { return int64(math.Round(usd * 1e9)) }
