package sim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/sim/scenario"
)

// twoModels loads scenarios/two-models.yaml, bounded to n requests.
func twoModels(t *testing.T, n int) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Load("../scenarios/two-models.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Requests = n
	return sc
}

// fastSource is the figures of the scenario's fast model.
func fastSource(t *testing.T, r *Result) ClassResult {
	t.Helper()
	for _, s := range r.Sources {
		if s.Name == "fast" {
			return s
		}
	}
	t.Fatalf("%s: no source fast in %v", r.Policy, r.Sources)
	return ClassResult{}
}

// TestPoolsKeepTheFastModelWhenTheSlowOneSlows is issue 14's "two models
// on one deployment, one of them slowed ×4 mid-run", at 0.9 of capacity:
// with a pool per model the fast model's goodput and p99 stay within 10%
// of a run where nothing slows; with one gate of both models' slots the
// fast model's p99 is markedly worse. (The one gate's loss is there
// without the step too: it lets one model's calls past that model's slots
// at the provider, where they queue; the test logs its unslowed figures.)
func TestPoolsKeepTheFastModelWhenTheSlowOneSlows(t *testing.T) {
	const load = 0.9
	sc := twoModels(t, 20_000)
	calm := *sc
	calm.Upstream.Steps = nil
	run := func(sc *scenario.Scenario, policy string) ClassResult {
		r, err := Run(context.Background(), sc, policy, load, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return fastSource(t, r)
	}
	base := run(&calm, "pools")
	pools := run(sc, "pools")
	gate := run(sc, "sluice")
	gateCalm := run(&calm, "sluice")
	t.Logf("fast model: unslowed %.2f/s p99 %.0fms; pools %.2f/s p99 %.0fms; one gate %.2f/s p99 %.0fms (unslowed %.2f/s p99 %.0fms)",
		base.GoodputPerSecond, base.P99Ms, pools.GoodputPerSecond, pools.P99Ms, gate.GoodputPerSecond, gate.P99Ms,
		gateCalm.GoodputPerSecond, gateCalm.P99Ms)
	if pools.GoodputPerSecond < 0.9*base.GoodputPerSecond {
		t.Errorf("pools: fast goodput %.2f/s, under 90%% of the unslowed %.2f/s", pools.GoodputPerSecond, base.GoodputPerSecond)
	}
	if pools.P99Ms > 1.1*base.P99Ms {
		t.Errorf("pools: fast p99 %.0fms, over 110%% of the unslowed %.0fms", pools.P99Ms, base.P99Ms)
	}
	if gate.P99Ms < 1.3*base.P99Ms {
		t.Errorf("one gate: fast p99 %.0fms, not markedly worse than the unslowed %.0fms", gate.P99Ms, base.P99Ms)
	}
}

// paced is one model whose provider allows fewer tokens per minute than
// its slots could serve: 2000 tokens a call (input plus max_tokens), a tpm
// of 300 calls a minute (5/s) against 16 slots of 1s calls offered 12/s.
func paced() *scenario.Scenario {
	return &scenario.Scenario{
		Name:     "paced",
		Seed:     3,
		Requests: 3000,
		Upstream: scenario.Upstream{Concurrency: 16, Service: scenario.Service{Lognormal: &scenario.Lognormal{Median: time.Second}},
			Models: map[string]scenario.Model{"m": {ServiceFactor: 1, Concurrency: 16, TPM: 300 * 2000}}},
		Classes: []scenario.Class{{Name: "interactive", Deadline: 10 * time.Second}},
		Traffic: []scenario.Source{{Class: "interactive", Client: "polite", MaxAttempts: 1, Model: "m",
			InputTokens: 1000, OutputTokens: 500, MaxTokens: 1000}},
	}
}

// TestPoolsPaceOnTokensPerMinuteAndLoseNothing: calls the pool's tpm holds
// back wait (Request.NotBefore), are woken by the engine and served; every
// attempt ends served, refused or withdrawn, and every request answered,
// refused or timed out. The tokens served stay within the tpm.
func TestPoolsPaceOnTokensPerMinuteAndLoseNothing(t *testing.T) {
	sc := paced()
	r, err := Run(context.Background(), sc, "pools", 0.75, Options{})
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for why, n := range r.Refusals {
		if why != refTimeout.String() {
			refused += n
		}
	}
	t.Logf("%d requests: paced %d, on time %d, late %d, billed %d, refusals %v, withdrawn %d, window %.0fs",
		r.Requests, r.Paced, r.OnTime, r.Late, r.Billed, r.Refusals, r.Withdrawn, r.WindowSeconds)
	if r.Paced < r.Requests/10 {
		t.Errorf("paced %d of %d: the tpm should hold many back", r.Paced, r.Requests)
	}
	if r.OnTime < r.Requests/2 {
		t.Errorf("on time %d of %d: paced calls must be served", r.OnTime, r.Requests)
	}
	// A call is paced only when its tokens come before its deadline (the
	// route stage refuses the others at once): woken at its NotBefore,
	// none is left to time out in the pacing.
	if n := r.Refusals[refTimeout.String()]; n > 0 || r.Withdrawn > 0 {
		t.Errorf("%d timed out, %d withdrawn: paced calls must reach their gate in time", n, r.Withdrawn)
	}
	if got := r.Billed + refused + r.Withdrawn; got != r.Attempts {
		t.Errorf("billed %d + refused %d + withdrawn %d = %d, want every one of %d attempts", r.Billed, refused, r.Withdrawn, got, r.Attempts)
	}
	if got := r.OnTime + r.Late + refused + r.Refusals[refTimeout.String()]; got != r.Requests {
		t.Errorf("answered %d + late %d + refused %d + timed out %d = %d, want every one of %d requests",
			r.OnTime, r.Late, refused, r.Refusals[refTimeout.String()], got, r.Requests)
	}
	// 300 calls a minute, plus the bucket's first minute, until the last
	// caller left.
	if most := 300 * ((r.WindowSeconds+10)/60 + 1); float64(r.Billed) > most {
		t.Errorf("billed %d calls in %.0fs, more than the tpm allows (%.0f)", r.Billed, r.WindowSeconds, most)
	}
	// Without pools nothing paces: the gate serves the same traffic past
	// the tpm.
	one, err := Run(context.Background(), sc, "sluice", 0.75, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if one.Paced != 0 || one.Billed <= r.Billed {
		t.Errorf("one gate: paced %d, billed %d; want none paced and more billed than the pools' %d", one.Paced, one.Billed, r.Billed)
	}
}

// TestPoolsDegradeUnderLoad: batch calls to a model whose pool cannot
// serve them in time go one rung down (sluice.degrade), to the rung's pool,
// and take the rung's service time at the rung's provider slots; many more
// are served than without the ladder.
func TestPoolsDegradeUnderLoad(t *testing.T) {
	sc := &scenario.Scenario{
		Name:     "degrade",
		Seed:     5,
		Requests: 3000,
		Upstream: scenario.Upstream{Concurrency: 16, Service: scenario.Service{Lognormal: &scenario.Lognormal{Median: time.Second, Sigma: 0.3}},
			Models: map[string]scenario.Model{"big": {ServiceFactor: 2, Concurrency: 8}, "small": {ServiceFactor: 0.5, Concurrency: 8}}},
		Classes: []scenario.Class{{Name: "batch", Deadline: 20 * time.Second}},
		Traffic: []scenario.Source{{Class: "batch", Client: "polite", MaxAttempts: 1, Model: "big"}},
		Sluice:  scenario.SluiceConfig{Degrade: &chain.DegradeConfig{Ladder: map[string]string{"big": "small"}, Classes: []string{"batch"}}},
	}
	// 3× the big model's capacity.
	r, err := Run(context.Background(), sc, "pools", 0.75, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := r.Sources[0]
	t.Logf("on time %d of %d, degraded %d (by load %d), refusals %v, withdrawn %d, wasted %d, p99 %.0fms", r.OnTime, r.Requests, src.Degraded, r.DegradedByLoad, r.Refusals, r.Withdrawn, r.Wasted, r.P99Ms)
	if r.DegradedByLoad == 0 || src.Degraded == 0 {
		t.Fatalf("degraded %d by load, %d answered: 3× the big model's capacity must degrade", r.DegradedByLoad, src.Degraded)
	}
	// The bar: batch success ≥ 95% with the cheap model idle. A call
	// left behind in the big model's newest-first queue is degraded
	// instead (chain/route.go, late): without that, 74% here.
	if r.SuccessPct < 95 {
		t.Errorf("batch success %.1f%%, want ≥ 95%%", r.SuccessPct)
	}
	sc.Sluice.Degrade = nil
	nd, err := Run(context.Background(), sc, "pools", 0.75, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without sluice.degrade: on time %d of %d, refusals %v", nd.OnTime, nd.Requests, nd.Refusals)
	if nd.DegradedByLoad != 0 || nd.SuccessPct+20 > r.SuccessPct {
		t.Errorf("without sluice.degrade: degraded %d, success %.1f%%; want none, and markedly less than %.1f%%", nd.DegradedByLoad, nd.SuccessPct, r.SuccessPct)
	}
}

// TestModelStepSlowsOnlyItsModel: a step with a model slows that model's
// calls alone.
func TestModelStepSlowsOnlyItsModel(t *testing.T) {
	m := &modelInfo{name: "slow", factor: 1, steps: []resolvedStep{{at: time.Minute, factor: 4}}}
	other := &modelInfo{name: "fast", factor: 1}
	if f := m.factorFor(0); f != 1 {
		t.Errorf("before the step: factor %v, want 1", f)
	}
	if f := m.factorFor(2 * time.Minute); f != 4 {
		t.Errorf("after the step: factor %v, want 4", f)
	}
	if f := other.factorFor(2 * time.Minute); f != 1 {
		t.Errorf("another model after the step: factor %v, want 1", f)
	}
}

// TestProviderSlotsPerModelQueueAtTheProvider: a model with two slots of
// its own at the provider serves a third call sent at once only when one
// of the first two ends, and the caller sees that wait as service time.
func TestProviderSlotsPerModelQueueAtTheProvider(t *testing.T) {
	sc := exact(10 * time.Second)
	sc.Upstream.Concurrency = 4
	sc.Upstream.Models = map[string]scenario.Model{"m": {ServiceFactor: 1, Concurrency: 2}}
	sc.Traffic[0].Model = "m"
	var answered []time.Duration
	s, err := newSetup(sc, "fifo", 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.sources[0].script = []time.Duration{0, 0, 0}
	s.window, s.end = time.Minute, 2*time.Minute
	e, err := s.newEngine()
	if err != nil {
		t.Fatal(err)
	}
	e.heard = func(a *attempt, ok bool, _ refusal) {
		if ok {
			answered = append(answered, e.now)
		}
	}
	at, _ := s.sources[0].next()
	e.q.push(event{at: at, kind: evArrive})
	if _, err := e.loop(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Second, time.Second, 2 * time.Second}
	if len(answered) != 3 || answered[0] != want[0] || answered[1] != want[1] || answered[2] != want[2] {
		t.Errorf("answers at %v, want %v: two slots at the provider", answered, want)
	}
}

func TestPoolsScenarioErrorsNameTheField(t *testing.T) {
	base := `
upstream:
  concurrency: 8
  service: {lognormal: {median: 1s}}
  models:
    a: {service_factor: 1, concurrency: 4}
    b: {service_factor: 1, concurrency: 4}
classes: [{name: interactive, deadline: 5s}]
traffic: [{class: interactive, model: a}]
`
	for _, tc := range []struct{ extra, field string }{
		{"upstream:\n  models:\n    a: {service_factor: 1, concurrency: -1}", "upstream.models.a.concurrency"},
		{"upstream:\n  models:\n    a: {service_factor: 1, tpm: -5}", "upstream.models.a.tpm"},
		{"upstream:\n  models:\n    a: {service_factor: 1, rpm: -5}", "upstream.models.a.rpm"},
		{"upstream:\n  steps: [{at: 50%, factor: 4, model: c}]", "upstream.steps[0].model"},
		{"sluice:\n  degrade: {ladder: {a: c}, classes: [interactive]}", "sluice.degrade.ladder.a"},
		{"sluice:\n  degrade: {ladder: {a: b, b: a}, classes: [interactive]}", "sluice.degrade.ladder.b"}, // the entry that closes the loop, as the gateway names it
		{"sluice:\n  degrade: {ladder: {a: b}, classes: [batch]}", "sluice.degrade.classes[0]"},
		{"sluice:\n  degrade: {ladder: {a: b}}", "sluice.degrade.classes"},
		{"policies: [pools]\nupstream:\n  models:\n    a: {service_factor: 1}", "policies[0]"},
	} {
		doc := merge(base, tc.extra)
		_, err := scenario.Parse([]byte(doc))
		var fe *scenario.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want an error naming %s", tc.extra, err, tc.field)
		}
	}
	sc, err := scenario.Parse([]byte(merge(base, "upstream:\n  steps: [{at: 50%, factor: 4, model: b}]\nsluice:\n  degrade: {ladder: {a: b}, classes: [interactive]}")))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Upstream.Steps[0].Model != "b" || sc.Upstream.Models["a"].Concurrency != 4 || sc.Sluice.Degrade.Ladder["a"] != "b" {
		t.Errorf("decoded %+v %+v", sc.Upstream, sc.Sluice.Degrade)
	}
	if got := strings.Join(sc.PolicyNames(), ","); !strings.HasSuffix(got, ",pools") {
		t.Errorf("policies %s: want pools with a concurrency on every model", got)
	}
}

// merge overrides base's top-level sections (and upstream's keys) with
// extra's, by text: enough for the cases above.
func merge(base, extra string) string {
	lines := strings.Split(strings.TrimSpace(base), "\n")
	var out []string
	ex := strings.Split(extra, "\n")
	// Sections of extra: key line and its indented lines.
	sections := map[string][]string{}
	var order []string
	for i := 0; i < len(ex); i++ {
		key := ex[i]
		j := i + 1
		for j < len(ex) && strings.HasPrefix(ex[j], "  ") {
			j++
		}
		sections[key] = ex[i+1 : j]
		order = append(order, key)
		i = j - 1
	}
	used := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		out = append(out, l)
		if body, ok := sections[l]; ok && l == "upstream:" {
			used[l] = true
			// Replace upstream keys named in body.
			names := map[string]bool{}
			for _, b := range body {
				if k, _, ok := strings.Cut(strings.TrimSpace(b), ":"); ok && strings.HasPrefix(b, "  ") && !strings.HasPrefix(b, "    ") {
					names[k] = true
				}
			}
			j := i + 1
			for j < len(lines) && strings.HasPrefix(lines[j], "  ") {
				k, _, _ := strings.Cut(strings.TrimSpace(lines[j]), ":")
				if names[k] && !strings.HasPrefix(lines[j], "    ") {
					j++
					for j < len(lines) && strings.HasPrefix(lines[j], "    ") {
						j++
					}
					continue
				}
				out = append(out, lines[j])
				j++
			}
			out = append(out, body...)
			i = j - 1
		}
	}
	for _, k := range order {
		if !used[k] {
			if strings.HasPrefix(k, "policies:") || !strings.HasSuffix(k, ":") {
				out = append(out, k)
			} else {
				out = append(out, k)
			}
			out = append(out, sections[k]...)
		}
	}
	return strings.Join(out, "\n") + "\n"
}
