package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

const minimalYAML = `
upstream:
  concurrency: 4
  service: {lognormal: {median: 1s, sigma: 0.5}}
classes:
  - {name: interactive, deadline: 10s}
traffic:
  - {class: interactive}
`

// TestRunRefusesBadOptions: the programmatic entry points check their
// arguments too.
func TestRunRefusesBadOptions(t *testing.T) {
	sc, err := scenario.Parse([]byte(minimalYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		policy string
		load   float64
		opt    Options
	}{
		{"nope", 1, Options{}},
		{"fifo", 0, Options{}},
		{"fifo", -1, Options{}},
		{"fifo", 1, Options{Requests: -5}},
		{"fifo", 1, Options{Client: "rude"}},
		{"fifo", 1, Options{Bucket: -1}},
	} {
		if _, err := Run(t.Context(), sc, c.policy, c.load, c.opt); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	bad := *sc
	bad.Upstream.Concurrency = -1
	if _, err := Run(t.Context(), &bad, "fifo", 1, Options{}); err == nil || !strings.Contains(err.Error(), "upstream.concurrency") {
		t.Errorf("invalid scenario: %v", err)
	}
}

// TestPoliciesAreTheScenarioNames: the ladder is keyed by the names a
// scenario may give, in their order, and the policies the schema lets run
// only with a spend section or a pool per model are the ones that run the
// spend limiter and the route stage.
func TestPoliciesAreTheScenarioNames(t *testing.T) {
	var names []string
	for _, p := range Policies() {
		names = append(names, p.Name)
		if p.gate.spend != (p.Name == scenario.PolicySpend) || p.gate.pools != (p.Name == scenario.PolicyPools) {
			t.Errorf("policy %s: spend %v, pools %v, against the schema's rules", p.Name, p.gate.spend, p.gate.pools)
		}
	}
	if want := scenario.PolicyNames(); !slices.Equal(names, want) {
		t.Errorf("policies %v, want scenario.PolicyNames %v", names, want)
	}
	for _, n := range scenario.ClientNames() {
		if _, ok := clientKinds[n]; !ok {
			t.Errorf("client %q has no behaviour", n)
		}
	}
	if len(clientKinds) != len(scenario.ClientNames()) {
		t.Errorf("clients %v, want scenario.ClientNames %v", clientKinds, scenario.ClientNames())
	}
}
