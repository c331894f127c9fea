package spend

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/contract"
)

// Collector returns a Prometheus collector of the Limiter's spend: totals
// and rates per tenant and model, the stage of each scope, degraded and
// refused requests, wasted and saved spend, alerts. Register it on your own
// registry. Values are read at scrape time (rates at the shells' clock,
// Options.Now). Label values are bounded: configured tenants and priced
// models, plus at most 32 others of each, the rest under "(other)".
func (l *Limiter) Collector() prometheus.Collector { return collector{l} }

type collector struct{ l *Limiter }

var _ prometheus.Collector = collector{}

var (
	descSpent = prometheus.NewDesc("sluice_spend_usd_total",
		"Settled spend in USD, by kind: actual (from reported usage) or estimated (no usage reported; the estimate was kept).",
		[]string{"kind"}, nil)
	descTenantSpent = prometheus.NewDesc("sluice_spend_tenant_usd_total",
		"Settled spend in USD by tenant and kind (actual or estimated).", []string{"tenant", "kind"}, nil)
	descModelSpent = prometheus.NewDesc("sluice_spend_model_usd_total",
		"Settled spend in USD by model and kind (actual or estimated).", []string{"model", "kind"}, nil)
	descRate = prometheus.NewDesc("sluice_spend_rate_usd_per_hour",
		"Spend rate (spend of the rate window, reservations in flight included, projected to an hour), by scope (global, tenant, model) and name.",
		[]string{"scope", "name"}, nil)
	descLimit = prometheus.NewDesc("sluice_spend_limit_usd",
		"Configured limits: the global ceiling (period hour) and tenant budgets (period hour or day).",
		[]string{"scope", "name", "period"}, nil)
	descStage = prometheus.NewDesc("sluice_spend_stage",
		"Stage of each scope: 0 normal, 1 shed speculative (tenant: over quota), 2 degrade, 3 reject.",
		[]string{"scope", "name"}, nil)
	descDegraded = prometheus.NewDesc("sluice_spend_degraded_total",
		"Requests rewritten to a cheaper rung, by tenant and requested model.", []string{"tenant", "model"}, nil)
	descRefused = prometheus.NewDesc("sluice_spend_refused_total",
		"Requests refused by the spend policy, by tenant and reason (spend_ceiling, tenant_budget).", []string{"tenant", "reason"}, nil)
	descOverShare = prometheus.NewDesc("sluice_spend_over_share_total",
		"Requests of a tenant spending more than its max-min fair share of the ceiling's first stage, while the ceiling was past it (refused like speculative work), by tenant.", []string{"tenant"}, nil)
	descWasted = prometheus.NewDesc("sluice_spend_wasted_usd_total",
		"Spend on answers that arrived after the caller's deadline or after the caller left, by tenant.", []string{"tenant"}, nil)
	descSaved = prometheus.NewDesc("sluice_spend_saved_usd_total",
		"Spend avoided by cancelling upstream calls early, by tenant.", []string{"tenant"}, nil)
	descReserved = prometheus.NewDesc("sluice_spend_reserved_usd",
		"Estimated cost of the calls in flight (reserved, not yet settled).", nil, nil)
	descReservations = prometheus.NewDesc("sluice_spend_reservations",
		"Reservations not yet settled. Growing without bound means a caller leaks them.", nil, nil)
	descAlerting = prometheus.NewDesc("sluice_spend_alert_firing",
		"1 while the scope's spend-rate alert is firing.", []string{"scope", "name"}, nil)
	descAlertEvents = prometheus.NewDesc("sluice_spend_alert_events_total",
		"Alert events, by state (fired, resolved).", []string{"state"}, nil)
	descLedgerErrors = prometheus.NewDesc("sluice_spend_ledger_errors_total",
		"Failed ledger reads and writes (decisions then count the failed read as no spend).", nil, nil)
	descWebhookFailures = prometheus.NewDesc("sluice_spend_alert_webhook_failures_total",
		"Alert events the webhook did not accept (error, non-2xx, timeout or queue full).", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSpent, descTenantSpent, descModelSpent, descRate, descLimit, descStage,
		descDegraded, descRefused, descOverShare, descWasted, descSaved, descReserved, descReservations, descAlerting,
		descAlertEvents, descLedgerErrors, descWebhookFailures} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	snap := l.Snapshot(l.now())
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	bool01 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	counter(descSpent, snap.Global.ActualUSD, "actual")
	counter(descSpent, snap.Global.EstimatedUSD, "estimated")
	gauge(descRate, snap.Global.RatePerHour, "global", "")
	gauge(descStage, float64(snap.Global.Stage), "global", "")
	gauge(descAlerting, bool01(snap.Global.Alerting), "global", "")
	if snap.Global.LimitPerHour > 0 {
		gauge(descLimit, snap.Global.LimitPerHour, "global", "", "hour")
	}
	for _, t := range snap.Tenants {
		counter(descTenantSpent, t.ActualUSD, t.Name, "actual")
		counter(descTenantSpent, t.EstimatedUSD, t.Name, "estimated")
		gauge(descRate, t.RatePerHour, "tenant", t.Name)
		gauge(descStage, float64(t.Stage), "tenant", t.Name)
		counter(descRefused, float64(t.RefusedCeiling), t.Name, contract.ReasonSpendCeiling)
		counter(descRefused, float64(t.RefusedBudget), t.Name, contract.ReasonTenantBudget)
		counter(descOverShare, float64(t.OverShare), t.Name)
		counter(descWasted, t.WastedUSD, t.Name)
		counter(descSaved, t.SavedUSD, t.Name)
		if t.AlertPerHour > 0 {
			gauge(descAlerting, bool01(t.Alerting), "tenant", t.Name)
		}
		if t.LimitPerHour > 0 {
			gauge(descLimit, t.LimitPerHour, "tenant", t.Name, "hour")
		}
		if t.LimitPerDay > 0 {
			gauge(descLimit, t.LimitPerDay, "tenant", t.Name, "day")
		}
	}
	for _, m := range snap.Models {
		counter(descModelSpent, m.ActualUSD, m.Name, "actual")
		counter(descModelSpent, m.EstimatedUSD, m.Name, "estimated")
		gauge(descRate, m.RatePerHour, "model", m.Name)
	}
	gauge(descReserved, snap.ReservedUSD)
	gauge(descReservations, float64(snap.Reservations))

	// Copy under the lock, send after: a slow scrape must not hold up Admit.
	type degraded struct {
		tenant, model string
		n             int64
	}
	var deg []degraded
	l.mu.Lock()
	for _, t := range l.mu.tenants.list {
		for model, n := range t.degradedFrom {
			deg = append(deg, degraded{t.name, model, n})
		}
	}
	fired, resolved := l.mu.alertEvents[0], l.mu.alertEvents[1]
	ledgerErrors, webhookFails := l.mu.ledgerErrors, l.mu.webhookFails
	l.mu.Unlock()
	for _, d := range deg {
		counter(descDegraded, float64(d.n), d.tenant, d.model)
	}
	counter(descAlertEvents, float64(fired), "fired")
	counter(descAlertEvents, float64(resolved), "resolved")
	counter(descLedgerErrors, float64(ledgerErrors))
	counter(descWebhookFailures, float64(webhookFails))
}
