package spend_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// TestAlertsFireOncePerCrossing walks the global rate up through its alert
// threshold, holds it there, lets it sag within the hysteresis band, drops
// it below, and crosses again: one fired, one resolved, one fired.
func TestAlertsFireOncePerCrossing(t *testing.T) {
	cfg := testConfig()
	cfg.AlertPerHour = 60 // $5 in the 5-minute window
	l := newLimiter(t, cfg, spend.Options{})
	type step struct {
		at    time.Duration
		spend float64 // spent by "x" just before evaluating
		want  string  // "", fired or resolved
	}
	steps := []step{
		{10 * time.Second, 4, ""},               // $48/h
		{20 * time.Second, 1, spend.AlertFired}, // $60/h: at the threshold
		{30 * time.Second, 1, ""},               // still above: no repeat
		{40 * time.Second, 0, ""},
		// Minute t0 ($6) leaves the window during t0+5m: the rate sags.
		{5*time.Minute + 6*time.Second, 0, ""},                   // $6 × 0.9 × 12 = $64.8/h
		{5*time.Minute + 14*time.Second, 0, ""},                  // $55.2/h: below 60, not below 54 (hysteresis)
		{5*time.Minute + 16*time.Second, 0, spend.AlertResolved}, // $52.8/h < $54/h
		{5*time.Minute + 30*time.Second, 0, ""},
		{5*time.Minute + 40*time.Second, 5, spend.AlertFired}, // a new crossing
	}
	firing := false
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.spend > 0 {
			spendUSD(t, l, now, "x", s.spend)
		}
		evs := l.EvaluateAlerts(now)
		var got string
		if len(evs) > 1 {
			t.Fatalf("at t0+%v: %d events: %+v", s.at, len(evs), evs)
		}
		if len(evs) == 1 {
			got = evs[0].State
			ev := evs[0]
			if ev.Scope != "global" || ev.ThresholdPerHour != 60 || !ev.At.Equal(now) ||
				len(ev.TopTenants) != 1 || ev.TopTenants[0].Name != "x" || len(ev.TopModels) != 1 || ev.TopModels[0].Name != "unit" {
				t.Errorf("at t0+%v: event %+v", s.at, ev)
			}
			firing = got == spend.AlertFired
			if firing {
				if ev.RatePerHour < 60 || ev.Since != nil {
					t.Errorf("fired event %+v", ev)
				}
			} else if ev.Since == nil || !ev.Since.Equal(t0.Add(20*time.Second)) || ev.RatePerHour >= 54 {
				t.Errorf("resolved event %+v", ev)
			}
		}
		if got != s.want {
			t.Fatalf("at t0+%v (rate $%.2f/h): event %q, want %q", s.at, l.Snapshot(now).Global.RatePerHour, got, s.want)
		}
		if alerting := l.Snapshot(now).Global.Alerting; alerting != firing {
			t.Errorf("at t0+%v: Alerting = %v, want %v", s.at, alerting, firing)
		}
	}
}

// TestTenantAlert: a tenant's alert follows its own rate, and the global
// alert stays quiet.
func TestTenantAlert(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{}) // acme alerts at 0.8 × $12/h
	spendUSD(t, l, t0, "acme", 0.7)
	if evs := l.EvaluateAlerts(t0); len(evs) != 0 {
		t.Fatalf("at $8.4/h: %+v", evs)
	}
	spendUSD(t, l, t0.Add(time.Second), "acme", 0.2)
	evs := l.EvaluateAlerts(t0.Add(time.Second))
	if len(evs) != 1 || evs[0].Scope != "tenant" || evs[0].Tenant != "acme" || evs[0].State != spend.AlertFired ||
		!near(evs[0].RatePerHour, 10.8, 1e-9) || !near(evs[0].ThresholdPerHour, 9.6, 1e-9) {
		t.Fatalf("%+v", evs)
	}
	if evs := l.EvaluateAlerts(t0.Add(2 * time.Second)); len(evs) != 0 {
		t.Fatalf("repeated: %+v", evs)
	}
	evs = l.EvaluateAlerts(t0.Add(6 * time.Minute))
	if len(evs) != 1 || evs[0].State != spend.AlertResolved || evs[0].Tenant != "acme" {
		t.Fatalf("%+v", evs)
	}
}
