package spend

import (
	"cmp"
	"slices"
	"time"
)

// Alerts watch the spend rate, not the total: a total tells after the fact,
// a rate within minutes. An alert fires once when a scope's rate reaches its
// threshold and resolves once when the rate falls below resolveFraction of
// it. The gap is hysteresis: a rate hovering at the threshold would
// otherwise fire and resolve on every evaluation.
const resolveFraction = 0.9

// topN is how many tenants and models an alert names.
const topN = 5

// alertState is one scope's alert. Guarded by Limiter.mu.
type alertState struct {
	firing bool
	since  time.Time
}

// Alert event states.
const (
	AlertFired    = "fired"
	AlertResolved = "resolved"
)

// AlertEvent is a crossing of a scope's alert threshold. Its JSON is the
// webhook's body.
type AlertEvent struct {
	// Scope is "global" or "tenant"; Tenant names the tenant.
	Scope  string `json:"scope"`
	Tenant string `json:"tenant,omitempty"`
	// State is "fired" or "resolved".
	State string `json:"state"`
	// RatePerHour is the scope's spend rate when evaluated, in USD per
	// hour; ThresholdPerHour the alert's threshold.
	RatePerHour      float64 `json:"rate_per_hour"`
	ThresholdPerHour float64 `json:"threshold_per_hour"`
	// At is the evaluation time; Since, for a resolved event, when the
	// alert fired.
	At    time.Time  `json:"at"`
	Since *time.Time `json:"since,omitempty"`
	// TopTenants and TopModels are the highest spend rates right now,
	// across all traffic: who is spending.
	TopTenants []Share `json:"top_tenants"`
	TopModels  []Share `json:"top_models"`
}

// Share is one tenant's or model's spend rate.
type Share struct {
	Name        string  `json:"name"`
	RatePerHour float64 `json:"rate_per_hour"`
}

// EvaluateAlerts checks the global rate and each configured tenant's rate
// against their alert thresholds at time now, and returns the crossings
// since the last evaluation: at most one "fired" per crossing up, one
// "resolved" per crossing down. Call it at least every few seconds (the
// Alerter does, every alert_interval).
func (l *Limiter) EvaluateAlerts(now time.Time) []AlertEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var events []AlertEvent
	check := func(st *scopeStats, scope, tenant string) {
		if st.alertPerHour <= 0 {
			return
		}
		rate := l.rateLocked(st.scope, now)
		ev := AlertEvent{Scope: scope, Tenant: tenant, RatePerHour: rate, ThresholdPerHour: st.alertPerHour, At: now}
		switch {
		case !st.alert.firing && rate >= st.alertPerHour:
			st.alert = alertState{firing: true, since: now}
			ev.State = AlertFired
			l.mu.alertEvents[0]++
		case st.alert.firing && rate < st.alertPerHour*resolveFraction:
			since := st.alert.since
			ev.State, ev.Since = AlertResolved, &since
			st.alert = alertState{}
			l.mu.alertEvents[1]++
		default:
			return
		}
		events = append(events, ev)
	}
	check(&l.mu.global, "global", "")
	for _, t := range l.mu.tenants.list {
		if t.budget != nil {
			check(t, "tenant", t.name)
		}
	}
	if len(events) > 0 {
		tenants := l.topLocked(l.mu.tenants.list, now)
		models := l.topLocked(l.mu.models.list, now)
		for i := range events {
			events[i].TopTenants, events[i].TopModels = tenants, models
		}
	}
	return events
}

// topLocked returns the topN highest non-zero rates among list.
func (l *Limiter) topLocked(list []*scopeStats, now time.Time) []Share {
	out := make([]Share, 0, len(list))
	for _, st := range list {
		if r := l.rateLocked(st.scope, now); r > 0 {
			out = append(out, Share{Name: st.name, RatePerHour: r})
		}
	}
	slices.SortFunc(out, func(a, b Share) int {
		return cmp.Or(cmp.Compare(b.RatePerHour, a.RatePerHour), cmp.Compare(a.Name, b.Name))
	})
	return out[:min(len(out), topN)]
}
