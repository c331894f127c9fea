package sim

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

// TestReplicasShareTheUpstream runs scenarios/replicas.yaml: three
// replicas on leases, a speculative flood pinned to replica 0 and
// interactive callers on replicas 1 and 2. The upstream never has more
// calls at once than its 16 slots plus one per replica that joined while
// they were all held (two, at the start), is over its slots for a moment
// only, and the interactive callers on the other replicas are served
// (≥ 99%): the leases divide the slots by rank across replicas.
func TestReplicasShareTheUpstream(t *testing.T) {
	sc, err := scenario.Load("../scenarios/replicas.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(t.Context(), sc, "sluice", 5, Options{Requests: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Provider
	if p == nil {
		t.Fatal("no provider figures with replicas")
	}
	t.Logf("provider: %+v", *p)
	if p.Replicas != 3 || p.PeakInFlight > 16+2 || p.OverPct > 1 {
		t.Errorf("provider %+v: want 3 replicas, peak ≤ 18, over its slots < 1%% of the time", *p)
	}
	if p.MeanInFlight < 12 {
		t.Errorf("provider mean in flight %.1f: the leases left the slots idle", p.MeanInFlight)
	}
	for _, s := range r.Sources {
		if strings.HasPrefix(s.Name, "interactive") && s.SuccessPct < 99 {
			t.Errorf("%s: %.1f%% on time, want ≥ 99%%", s.Name, s.SuccessPct)
		}
	}
	// One gateway for the baselines: no provider figures.
	if r, err := Run(t.Context(), sc, "fifo", 5, Options{Requests: 2000}); err != nil || r.Provider != nil {
		t.Errorf("fifo with replicas: %v, provider %v", err, r.Provider)
	}
}

func TestReplicasErrorsNameTheField(t *testing.T) {
	with := minimalYAML + "replicas: {count: 3}\n"
	for _, c := range []struct{ yaml, field string }{
		{minimalYAML + "replicas: {count: 1}\n", "replicas.count"},
		{minimalYAML + "replicas: {count: 3, lease_interval: 1ms}\n", "replicas.lease_interval"},
		{minimalYAML + "replicas: {count: 3, leases: no}\n", "replicas.leases"},
		{strings.Replace(with, "{class: interactive}", "{class: interactive, replica: 3}", 1), "traffic[0].replica"},
		{strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, replica: 0}", 1), "traffic[0].replica"},
	} {
		_, err := scenario.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.yaml, err, c.field)
		}
	}
}
