package spend_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// gather scrapes l's collector into name → "label=value,…" → value.
func gather(t *testing.T, l *spend.Limiter) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(l.Collector()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range families {
		m := map[string]float64{}
		for _, metric := range f.GetMetric() {
			m[labelKey(metric)] = value(metric)
		}
		out[f.GetName()] = m
	}
	return out
}

func labelKey(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func webhookFailures(t *testing.T, l *spend.Limiter) float64 {
	return gather(t, l)["sluice_spend_alert_webhook_failures_total"][""]
}

func TestCollector(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{Now: func() time.Time { return now }})
	spendUSD(t, l, now, "acme", 0.95)  // acme at 0.95 of its budget: reject stage
	spendUSD(t, l, now, "loader", 8.3) // global at 0.925: degrade stage
	d := admit(t, l, now, spend.Request{Tenant: "plenty", Model: "big", Rank: 4, EstimatedInputTokens: 1000})
	if !d.Degraded {
		t.Fatal("not degraded")
	}
	if _, err := l.Reconcile(now, d.Reservation, contract.Usage{}, false); err != nil {
		t.Fatal(err)
	}
	admit(t, l, now, spend.Request{Tenant: "acme", Model: "unit", Rank: 1})                                // refused: tenant budget
	admit(t, l, now, spend.Request{Tenant: "x", Model: "unit", Rank: 0})                                   // refused: ceiling
	open := admit(t, l, now, spend.Request{Tenant: "x", Model: "unit", Rank: 5, EstimatedInputTokens: 10}) // in flight
	_ = l.RecordWasted(now, "acme", "unit", 0.5)
	_ = l.RecordSaved(now, "acme", "unit", 0.25)
	l.EvaluateAlerts(now)

	m := gather(t, l)
	est := (1000*0.15 + 1024*0.6) / 1e6 // no max_tokens: default_output_tokens at small's price
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"sluice_spend_usd_total", "kind=actual", 9.25},
		{"sluice_spend_usd_total", "kind=estimated", est},
		{"sluice_spend_tenant_usd_total", "kind=actual,tenant=acme", 0.95},
		{"sluice_spend_tenant_usd_total", "kind=estimated,tenant=plenty", est},
		{"sluice_spend_model_usd_total", "kind=estimated,model=small", est},
		{"sluice_spend_rate_usd_per_hour", "name=,scope=global", (9.25 + est + 0.01) * 12},
		{"sluice_spend_rate_usd_per_hour", "name=acme,scope=tenant", 0.95 * 12},
		{"sluice_spend_rate_usd_per_hour", "name=unit,scope=model", (9.25 + 0.01) * 12},
		{"sluice_spend_stage", "name=,scope=global", 2},
		{"sluice_spend_stage", "name=acme,scope=tenant", 3},
		{"sluice_spend_stage", "name=plenty,scope=tenant", 0},
		{"sluice_spend_limit_usd", "name=,period=hour,scope=global", 120},
		{"sluice_spend_limit_usd", "name=daily,period=day,scope=tenant", 2},
		{"sluice_spend_degraded_total", "model=big,tenant=plenty", 1},
		{"sluice_spend_refused_total", "reason=tenant_budget,tenant=acme", 1},
		{"sluice_spend_refused_total", "reason=spend_ceiling,tenant=x", 1},
		{"sluice_spend_wasted_usd_total", "tenant=acme", 0.5},
		{"sluice_spend_saved_usd_total", "tenant=acme", 0.25},
		{"sluice_spend_reserved_usd", "", 0.01},
		{"sluice_spend_reservations", "", 1},
		{"sluice_spend_alert_firing", "name=,scope=global", 1},
		{"sluice_spend_alert_firing", "name=acme,scope=tenant", 1},
		{"sluice_spend_alert_events_total", "state=fired", 2},
		{"sluice_spend_ledger_errors_total", "", 0},
	} {
		got, ok := m[c.name][c.labels]
		if !ok || !near(got, c.want, 1e-9) {
			t.Errorf("%s{%s} = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// The state dump is JSON with stages by name.
	dump, err := json.Marshal(l.Snapshot(now))
	if err != nil || !strings.Contains(string(dump), `"stage":"degrade"`) || !strings.Contains(string(dump), `"reservations":1`) {
		t.Errorf("state dump: %s %v", dump, err)
	}
	l.Cancel(now, open.Reservation)
	if problems, err := testutil.CollectAndLint(l.Collector()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
