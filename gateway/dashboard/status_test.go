package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// TestDashboardStatus: the status line names the most urgent finding in
// plain words, and says all clear only when nothing was refused.
func TestDashboardStatus(t *testing.T) {
	top := map[string]bool{admission.ClassInteractive: true}
	budget := func(v float64) *float64 { return &v }
	downSince := time.Date(2026, 3, 4, 5, 4, 37, 0, time.UTC).UnixMilli()
	tests := []struct {
		name    string
		samples []Sample
		level   string
		text    string // prefix
		details int
	}{
		{"none", nil, "ok", "Starting", 0},
		{"quiet", []Sample{{}, {}}, "ok", "All clear: nothing shed in the last 5 minutes", 0},
		{"interactive shed", []Sample{{ShedClass: map[string]float64{"interactive": 2}}, {}},
			"crit", "Interactive work is being shed: capacity is missing (2 requests refused in the last 5 minutes)", 0},
		{"only batch shed", []Sample{{ShedClass: map[string]float64{"batch": 1}}},
			"warn", "Lower-priority work is being shed (batch: 1 request refused", 0},
		{"both", []Sample{{ShedClass: map[string]float64{"batch": 3, "interactive": 1}}},
			"crit", "Interactive work is being shed", 1},
		{"spend refusals are not capacity", []Sample{{RefusedReason: map[string]float64{"spend_ceiling": 4}, RefusedClass: map[string]float64{"interactive": 4}}},
			"warn", "Refused by the spend policy in the last 5 minutes (spend_ceiling: 4 requests)", 0},
		{"draining refusals are neither", []Sample{{RefusedReason: map[string]float64{"draining": 4}}},
			"ok", "All clear", 0},
		{"spend alert", []Sample{{Spend: &Spend{Stage: "normal", Alerting: true}}},
			"crit", "Spend rate over its alert level (global)", 0},
		{"tenant spend alert", []Sample{{Spend: &Spend{Stage: "normal", TenantsAlert: []string{"acme"}}}},
			"crit", "Spend rate over its alert level (tenant acme)", 0},
		{"ceiling stage", []Sample{{Spend: &Spend{Stage: "degrade"}}},
			"warn", "Spend ceiling in force: stage degrade", 0},
		{"retries refused", []Sample{{RefusedReason: map[string]float64{"retry_budget": 2}}}, "warn", "Retry budget exhausted: 2 retries refused in the last 5 minutes", 0},
		{"retry budget empty but idle", []Sample{{RetryBudget: budget(0)}}, "ok", "All clear", 0},
		{"draining", []Sample{{Draining: true}}, "warn", "Draining", 0},
		{"pool down", []Sample{{Pools: []Pool{{Name: "east/m", Down: true}, {Name: "west/m"}}}},
			"warn", "Deployment down, calls going elsewhere and one probe at a time: east/m", 0},
		{"pools up", []Sample{{Pools: []Pool{{Name: "east/m"}}}}, "ok", "All clear", 0},
		{"redis down", []Sample{{Time: downSince + 130_000, Store: &Store{State: "down", Since: downSince}}},
			"warn", "Redis unreachable since 05:04:37 UTC (for 2m10s): the replicas share nothing until it answers again, and Batch API calls get 503", 0},
		{"redis probing", []Sample{{Time: downSince + 500, Store: &Store{State: "probing", Since: downSince}}}, "warn", "Redis unreachable since 05:04:37 UTC (for 1s)", 0},
		{"redis up", []Sample{{Store: &Store{State: "up", Since: downSince}}}, "ok", "All clear", 0},
		{"redis down and interactive shed", []Sample{{Time: downSince, ShedClass: map[string]float64{"interactive": 1}, Store: &Store{State: "down", Since: downSince}}},
			"crit", "Interactive work is being shed", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var recent []*Sample
			for i := range tt.samples {
				recent = append(recent, &tt.samples[i])
			}
			st := status(recent, top)
			if st.Level != tt.level || !strings.HasPrefix(st.Text, tt.text) || len(st.Details) != tt.details {
				t.Errorf("got %s %q %q, want %s %q… with %d details", st.Level, st.Text, st.Details, tt.level, tt.text, tt.details)
			}
		})
	}
}
