package sim

import (
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

// TestTenantWeightReachesTheGate: two tenants each sending twice the
// capacity; with sluice.tenants giving a weight 3, it gets three times the
// other's on-time answers, and without it they get the same.
func TestTenantWeightReachesTheGate(t *testing.T) {
	const base = `
seed: 1
requests: 20000
upstream:
  concurrency: 16
  service: {lognormal: {median: 1s, sigma: 0.3}}
classes:
  - {name: interactive, deadline: 10s}
traffic:
  - {name: a, class: interactive, tenant: a, client: naive, max_attempts: 1}
  - {name: b, class: interactive, tenant: b, client: naive, max_attempts: 1}
`
	ratio := func(yaml string) float64 {
		t.Helper()
		sc, err := scenario.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(t.Context(), sc, "sluice", 4, Options{})
		if err != nil {
			t.Fatal(err)
		}
		a, b := r.Sources[0], r.Sources[1]
		if a.Name != "a" || b.Name != "b" || b.OnTime == 0 {
			t.Fatalf("sources %+v", r.Sources)
		}
		return float64(a.OnTime) / float64(b.OnTime)
	}
	equal := ratio(base)
	weighted := ratio(base + "sluice: {tenants: {a: {weight: 3}}}\n")
	t.Logf("a's on-time answers over b's: %.2f at equal weights, %.2f at 3:1", equal, weighted)
	if equal < 0.9 || equal > 1.1 {
		t.Errorf("equal weights: ratio %.2f, want 1 ± 10%%", equal)
	}
	if weighted < 2.7 || weighted > 3.3 {
		t.Errorf("weights 3:1: ratio %.2f, want 3 ± 10%%", weighted)
	}
}
