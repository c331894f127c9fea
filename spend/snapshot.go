package spend

import (
	"cmp"
	"slices"
	"time"
)

// Snapshot is the Limiter's state at one time, for the gateway's JSON state
// dump. Amounts are USD; rates are USD per hour over the rate window.
type Snapshot struct {
	At                time.Time       `json:"at"`
	RateWindowSeconds float64         `json:"rate_window_seconds"`
	Global            ScopeSnapshot   `json:"global"`
	Tenants           []ScopeSnapshot `json:"tenants"` // highest rate first
	Models            []ScopeSnapshot `json:"models"`  // highest rate first
	// ReservedUSD is the estimated cost of the calls in flight, and
	// Reservations their number: reserved but neither reconciled nor
	// cancelled. A number that only grows is a leak in the caller.
	ReservedUSD  float64 `json:"reserved_usd"`
	Reservations int64   `json:"reservations"`
	// LedgerErrors counts failed ledger reads and writes.
	LedgerErrors int64 `json:"ledger_errors"`
}

// ScopeSnapshot is the state of the global scope, one tenant or one model.
type ScopeSnapshot struct {
	Name string `json:"name"`
	// RatePerHour is the rate that drives the policy: the spend of the
	// last rate window (reservations in flight included) per hour.
	RatePerHour float64 `json:"rate_per_hour"`
	// LastHourUSD and LastDayUSD are the spend of the last hour and day.
	LastHourUSD float64 `json:"last_hour_usd"`
	LastDayUSD  float64 `json:"last_day_usd"`
	// LimitPerHour is the global ceiling or the tenant's hourly budget,
	// LimitPerDay the tenant's daily budget; zero when none.
	LimitPerHour float64 `json:"limit_per_hour,omitempty"`
	LimitPerDay  float64 `json:"limit_per_day,omitempty"`
	// Stage is the scope's stage (global and tenants with a budget).
	Stage Stage `json:"stage"`
	// AlertPerHour is the alert threshold (zero: none); Alerting says the
	// alert is firing.
	AlertPerHour float64 `json:"alert_per_hour,omitempty"`
	Alerting     bool    `json:"alerting"`
	// SpentUSD is the settled spend since start: ActualUSD from reported
	// usage plus EstimatedUSD kept at the estimate for lack of usage, over
	// KnownCalls and EstimatedCalls calls.
	SpentUSD       float64 `json:"spent_usd"`
	ActualUSD      float64 `json:"actual_usd"`
	EstimatedUSD   float64 `json:"estimated_usd"`
	KnownCalls     int64   `json:"known_calls"`
	EstimatedCalls int64   `json:"estimated_calls"`
	// WastedUSD is spend on answers nobody received; SavedUSD the spend
	// avoided by cancelling calls early.
	WastedUSD float64 `json:"wasted_usd"`
	SavedUSD  float64 `json:"saved_usd"`
	// Degraded counts requests moved down a ladder; RefusedCeiling and
	// RefusedBudget requests refused by the ceiling and by the tenant's
	// budget.
	Degraded       int64 `json:"degraded"`
	RefusedCeiling int64 `json:"refused_ceiling"`
	RefusedBudget  int64 `json:"refused_budget"`
	// OverShare counts a tenant's requests the ceiling refused, or marked
	// over quota, because it was under pressure and the tenant spent more
	// than its fair share of it.
	OverShare int64 `json:"over_share"`
	// ObservedOutputTokens is a model's mean output, used to estimate calls
	// without max_tokens (zero until one is observed).
	ObservedOutputTokens float64 `json:"observed_output_tokens,omitempty"`
}

// Snapshot returns the state at time now.
func (l *Limiter) Snapshot(now time.Time) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{
		At:                now,
		RateWindowSeconds: l.cfg().rateWindow.Seconds(),
		Global:            l.scopeSnapshotLocked(&l.mu.global, now),
		ReservedUSD:       toUSD(l.mu.reserved),
		Reservations:      l.mu.outstanding,
	}
	if l.cfg().ceiling > 0 {
		s.Global.Stage = l.cfg().stageOf(s.Global.RatePerHour / l.cfg().ceiling)
	}
	for _, t := range l.mu.tenants.list {
		ts := l.scopeSnapshotLocked(t, now)
		if t.budget != nil {
			ts.Stage = l.cfg().stageOf(l.tenantFracLocked(t, now))
		}
		s.Tenants = append(s.Tenants, ts)
	}
	for _, m := range l.mu.models.list {
		ms := l.scopeSnapshotLocked(m, now)
		ms.ObservedOutputTokens = m.outMean
		s.Models = append(s.Models, ms)
	}
	byRate := func(a, b ScopeSnapshot) int {
		return cmp.Or(cmp.Compare(b.RatePerHour, a.RatePerHour), cmp.Compare(a.Name, b.Name))
	}
	slices.SortFunc(s.Tenants, byRate)
	slices.SortFunc(s.Models, byRate)
	s.LedgerErrors = l.mu.ledgerErrors // last: the reads above may add to it
	return s
}

func (l *Limiter) scopeSnapshotLocked(st *scopeStats, now time.Time) ScopeSnapshot {
	// Each read reuses the scratch buffer: use it before the next.
	lastHour := windowSpend(l.windowLocked(st.scope, now, 60), phaseOf(now)) / nanoPerUSD
	return ScopeSnapshot{
		Name:           st.name,
		RatePerHour:    l.rateLocked(st.scope, now),
		LastHourUSD:    lastHour,
		LastDayUSD:     l.daySpendLocked(st.scope, now),
		LimitPerHour:   st.limitHour,
		LimitPerDay:    st.limitDay,
		AlertPerHour:   st.alertPerHour,
		Alerting:       st.alert.firing,
		SpentUSD:       toUSD(st.actual + st.estimated),
		ActualUSD:      toUSD(st.actual),
		EstimatedUSD:   toUSD(st.estimated),
		KnownCalls:     st.known,
		EstimatedCalls: st.unknown,
		WastedUSD:      toUSD(st.wasted),
		SavedUSD:       toUSD(st.saved),
		Degraded:       st.degraded,
		RefusedCeiling: st.refusedCeiling,
		OverShare:      st.overShare,
		RefusedBudget:  st.refusedBudget,
	}
}
