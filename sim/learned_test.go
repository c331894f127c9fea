package sim

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

// TestLearnedConcurrencyFindsTheProvider runs scenarios/learned-concurrency
// at 5× capacity: a provider of 16 slots that the policy learned is not
// told, whose every call takes twice as long from the middle of the run.
// Seeds 1 to 3, each against the floors the controller is held to
// (docs/learned-concurrency.md), issue 23's: 90% of capacity within
// 20 s, at least 95% after, the provider's queue at most 4 calls at p99,
// and back within 10% of the halved capacity within 15 s.
func TestLearnedConcurrencyFindsTheProvider(t *testing.T) {
	sc, err := scenario.Load("../scenarios/learned-concurrency.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range []uint64{1, 2, 3} {
		sc.Seed = seed
		r, err := Run(t.Context(), sc, scenario.PolicyLearned, 5, Options{})
		if err != nil {
			t.Fatal(err)
		}
		l := r.Learned
		if l == nil {
			t.Fatal("no Learned result for the policy learned")
		}
		t.Logf("seed %d: reach %.0fs, goodput %.1f%% after %.0fs, provider queue p99 %d (max %d), recovered in %.1fs (%.1f%%)",
			seed, l.ReachSeconds, l.GoodputPct, l.WarmupSeconds, l.ProviderQueueP99, l.ProviderQueueMax, r.Recovery.Seconds, r.Recovery.GoodputPct)
		if l.ReachSeconds < 0 || l.ReachSeconds > 15 {
			t.Errorf("seed %d: 90%% of capacity reached at %vs, want within 20s (a 5s stretch starting by 15s)", seed, l.ReachSeconds)
		}
		if l.GoodputPct < 95 {
			t.Errorf("seed %d: goodput after the warm-up %.1f%%, want ≥ 95%%", seed, l.GoodputPct)
		}
		if l.ProviderQueueP99 > 4 {
			t.Errorf("seed %d: provider queue p99 %d, want ≤ 4", seed, l.ProviderQueueP99)
		}
		if rec := r.Recovery; rec == nil || !rec.Recovered || rec.Seconds > 15 {
			t.Errorf("seed %d: recovery after the slowdown %+v, want within 15s", seed, rec)
		}
	}
}

// TestLearnedPolicyNeedsItsSection: the policy learned is run only with
// sluice.learn, and a scenario naming it without one is refused, naming
// the field.
func TestLearnedPolicyNeedsItsSection(t *testing.T) {
	sc, err := scenario.Load("../scenarios/service-step.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sc.PolicyNames() {
		if p == scenario.PolicyLearned {
			t.Errorf("a scenario without sluice.learn runs %q by default", p)
		}
	}
	sc.Policies = []string{scenario.PolicyLearned}
	if err := sc.Validate(); err == nil {
		t.Error("policies: [learned] without sluice.learn validated")
	} else if want := "policies[0]"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}
