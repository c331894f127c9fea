package sim

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/spend"
)

// pricedYAML is small enough to follow by hand: every call takes exactly 1s
// (big) or 0.5s (small, its rung), reports one output token and asks for
// at most two. A token of big costs $1 and one of small $0.10, so a call
// reserves $2 (or $0.20) and costs $1 (or $0.10). With a one-minute rate
// window the rate is the spend of the last minute × 60: $600/h is $10 in
// the minute.
const pricedYAML = `
requests: 30
upstream:
  concurrency: 4
  service: {lognormal: {median: 1s}}
  models: {big: {service_factor: 1}, small: {service_factor: 0.5}}
classes:
  - {name: interactive, deadline: 10s}
traffic:
  - {class: interactive, tenant: a, client: naive, max_attempts: 1, attempt_timeout: 10s,
     model: big, output_tokens: 1, max_tokens: 2}
#MORE
spend:
  prices:
    big: {input_per_mtok: 0, output_per_mtok: 1000000}
    small: {input_per_mtok: 0, output_per_mtok: 100000}
  ladder: {big: small}
  rate_window: 1m
#LIMIT
`

func parse(t *testing.T, yaml string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func every(step, until int) []int {
	var ms []int
	for m := 0; m < until; m += step {
		ms = append(ms, m)
	}
	return ms
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestSpendLimiterStages drives the stages of a $600/h limit with one call
// every 2s, each settled before the next arrives, so the minute's spend
// before call k is k dollars at $1 a call. Calls 0–8 (spend $0–8, below
// degrade_at 0.9) go to big; from $9 they are degraded to small, which
// takes 0.5s and costs $0.10; from $9.90, past the interactive rank's
// refusal point (0.9875 of the limit), they are refused, until the minute
// ends. The same holds for a tenant budget (429 tenant_budget) and for the
// global ceiling (503 spend_ceiling).
func TestSpendLimiterStages(t *testing.T) {
	for _, c := range []struct {
		limit, reason string
	}{
		{"  tenants: {a: {per_hour: 600}}\n", "tenant_budget"},
		{"  ceiling_per_hour: 600\n", "spend_ceiling"},
	} {
		t.Run(c.reason, func(t *testing.T) {
			sc := parse(t, strings.Replace(pricedYAML, "#LIMIT\n", c.limit, 1))
			r := runScripted(t, sc, "spend", every(2000, 60_000))
			check(t, r, want{onTime: 18, billed: 18, attempts: 30, refusals: map[string]int{c.reason: 12}})
			if got := r.Sources[0].Degraded; got != 9 {
				t.Errorf("%d answers degraded, want 9", got)
			}
			if !near(r.BilledCost, 9*1+9*0.1) {
				t.Errorf("billed $%v, want $9.90: degraded calls cost the rung's price", r.BilledCost)
			}
			// Nine calls of 1s and nine of 0.5s: the rung's latency.
			if r.P50Ms < 495 || r.P50Ms > 505 || r.P99Ms < 995 || r.P99Ms > 1005 {
				t.Errorf("latency p50 %vms p99 %vms, want 500 and 1000", r.P50Ms, r.P99Ms)
			}
			l := r.Spend.Limiter
			if l.Degraded != 9 || l.RefusedBudget+l.RefusedCeiling != 12 || !near(l.SpentUSD, r.BilledCost) || l.WastedUSD != 0 {
				t.Errorf("limiter %+v, want 9 degraded, 12 refused, $9.90 spent, nothing wasted", l)
			}
			// The alert is at 0.8 of the limit ($8 in the minute): crossed
			// around call 7, fired at the next evaluation (every 10s).
			name, scope := "a", "tenant"
			if c.reason == "spend_ceiling" {
				name, scope = "", "global"
			}
			a, ok := l.Alert(scope, name)
			d, fired := a.Delay()
			if !ok || !fired || d < 0 || d >= 10*time.Second || math.Mod(a.FiredSeconds, 10) != 0 || a.CrossedSeconds < 10 || a.CrossedSeconds > 16 {
				t.Errorf("alert %+v: want crossed at about 14s and fired at the next 10s evaluation", a)
			}
			if tenant, _ := r.Spend.Tenant("a"); !near(tenant.SpentUSD, 9.9) {
				t.Errorf("tenant a spent $%v, want $9.90", tenant.SpentUSD)
			}
		})
	}
}

// TestSpendOverQuotaDropsRankInTheGate: one slot. Tenant a's first call
// reserves $2, which at a $145/h budget over a one-minute window puts a
// over quota (0.83 of it) before its second call: that call drops to the
// over-quota rank in the gate, so b's later call is served first. Without
// the budget, a's call, queued first at the same rank, goes first.
func TestSpendOverQuotaDropsRankInTheGate(t *testing.T) {
	base := strings.NewReplacer(
		"concurrency: 4", "concurrency: 1",
		"#MORE\n", "  - {class: interactive, tenant: b, client: naive, max_attempts: 1, attempt_timeout: 10s, model: big, output_tokens: 1, max_tokens: 2}\n",
		"#LIMIT\n", "  tenants: {a: {per_hour: BUDGET}}\n",
	).Replace(pricedYAML)
	for _, c := range []struct {
		budget string
		bMs    float64 // b's latency: arrived at 0.2s
	}{
		{"145", 1800},    // served at 1s, after a's first call
		{"100000", 2800}, // served at 2s, after a's second
	} {
		sc := parse(t, strings.Replace(base, "BUDGET", c.budget, 1))
		r := runScripted(t, sc, "spend", []int{0, 100}, []int{200})
		check(t, r, want{onTime: 3, billed: 3, attempts: 3})
		if got := r.Sources[1].P50Ms; math.Abs(got-c.bMs) > 0.01*c.bMs {
			t.Errorf("budget $%s/h: b answered in %vms, want %vms", c.budget, got, c.bMs)
		}
	}
}

// TestSpendSettlesEveryReservation: halfway through, calls become three
// times slower than the gate has learnt to expect, so every path runs —
// refused at arrival, queued then refused (expired at dequeue, or told at
// once that it can no longer start in time: the gate refuses early, so a
// queued call is given back through its refusal before its caller leaves
// rather than withdrawn), answered, abandoned while running — and the run
// ends (it fails if any reservation is left unsettled). A call whose
// caller left is settled at its estimate ($2, the gateway sees no usage)
// and counted wasted; an answered one at its cost ($1).
func TestSpendSettlesEveryReservation(t *testing.T) {
	yaml := strings.Replace(pricedYAML, "service: {lognormal: {median: 1s}}", "service: {lognormal: {median: 1s, sigma: 0.5}}\n  steps: [{at: 50%, factor: 3}]", 1)
	yaml = strings.Replace(yaml, "attempt_timeout: 10s", "attempt_timeout: 5s", 1)
	sc := parse(t, strings.Replace(yaml, "#LIMIT\n", "  ceiling_per_hour: 1000000\n", 1))
	r, err := Run(t.Context(), sc, "spend", 3, Options{Requests: 3000})
	if err != nil {
		t.Fatal(err)
	}
	for _, why := range []string{"queue_wait", "expired", "timeout"} {
		if r.Refusals[why] == 0 {
			t.Errorf("no %s: %v", why, r.Refusals)
		}
	}
	if r.Wasted == 0 || r.OnTime == 0 {
		t.Fatalf("wasted %d, on time %d: want every path", r.Wasted, r.OnTime)
	}
	// One attempt each and an attempt timeout inside the deadline: every
	// wasted call is one whose caller left while it ran.
	l := r.Spend.Limiter
	if want := 2 * float64(r.Wasted); !near(l.WastedUSD, want) {
		t.Errorf("the limiter counts $%v wasted, want $%v for %d abandoned calls", l.WastedUSD, want, r.Wasted)
	}
	if want := float64(r.Billed-r.Wasted) + 2*float64(r.Wasted); !near(l.SpentUSD, want) {
		t.Errorf("the limiter's books hold $%v, want $%v", l.SpentUSD, want)
	}
	if !near(r.BilledCost, float64(r.Billed)) || !near(r.WastedCost, float64(r.Wasted)) {
		t.Errorf("billed $%v for %d calls, wasted $%v for %d: the provider bills the usage", r.BilledCost, r.Billed, r.WastedCost, r.Wasted)
	}
}

// TestSpendPolicyNeedsASpendSection: the spend policy is only run, and only
// accepted, where there are prices.
func TestSpendPolicyNeedsASpendSection(t *testing.T) {
	sc := storm(t)
	if slices.Contains(sc.PolicyNames(), "spend") {
		t.Error("a scenario without a spend section lists the spend policy")
	}
	if _, err := Run(t.Context(), sc, "spend", 1, Options{Requests: 100}); err == nil || !strings.Contains(err.Error(), "spend section") {
		t.Errorf("Run: %v", err)
	}
	if _, err := RunSweep(t.Context(), sc, SweepOptions{Policies: []string{"spend"}}); err == nil || !strings.Contains(err.Error(), "spend section") {
		t.Errorf("RunSweep: %v", err)
	}
	// Every policy but pools, which needs a concurrency on every model,
	// and learned, which needs sluice.learn.
	if got := parse(t, pricedYAML).PolicyNames(); got[len(got)-1] != "spend" || len(got) != len(scenario.PolicyNames())-2 || slices.Contains(got, "pools") {
		t.Errorf("with a spend section: %v", got)
	}
}

// TestSpendSectionDecodesAsTheGatewayDoes: the scenario's spend section is
// the gateway's spend.Config, field for field.
func TestSpendSectionDecodesAsTheGatewayDoes(t *testing.T) {
	section := `
prices:
  big: {input_per_mtok: 2.5, output_per_mtok: 10, cached_input_per_mtok: 1.25}
  small: {input_per_mtok: 0.15, output_per_mtok: 0.6}
default_price: {input_per_mtok: 1, output_per_mtok: 2}
unknown_model: default
ladder: {big: small}
ceiling_per_hour: 300
stages: {shed_speculative_at: 0.7, degrade_at: 0.8, reject_at: 0.9, top_rank: 5, over_quota_rank: 2}
rate_window: 2m
default_output_tokens: 512
tenants:
  a: {per_hour: 150, per_day: 2000, alert_per_hour: 100}
alert_per_hour: 220
alert_webhook: https://example.com/hook
alert_interval: 5s
alert_timeout: 2s
`
	want, err := spend.ParseConfig([]byte(section))
	if err != nil {
		t.Fatal(err)
	}
	indented := "spend:\n  " + strings.ReplaceAll(strings.TrimSpace(section), "\n", "\n  ") + "\n"
	sc := parse(t, strings.Split(pricedYAML, "spend:")[0]+indented)
	if !reflect.DeepEqual(*sc.Spend, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", *sc.Spend, want)
	}
}

// TestSpendScenarioErrorsNameTheField: the spend section and what goes
// with it are checked like the rest of the scenario.
func TestSpendScenarioErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		name, from, to, field string
	}{
		{"unknown key", "rate_window: 1m", "rate_windo: 1m", "spend.rate_windo"},
		{"unknown nested key", "small: {input_per_mtok: 0,", "small: {input_per_mtok: 0, outptu: 1,", "spend.prices.small.outptu"},
		{"not a number", "output_per_mtok: 100000}", "output_per_mtok: cheap}", "spend.prices.small.output_per_mtok"},
		{"bare number for a duration", "rate_window: 1m", "rate_window: 60", "spend.rate_window"},
		{"a list for a mapping", "ladder: {big: small}", "ladder: [big, small]", "spend.ladder"},
		{"key given twice", "rate_window: 1m", "rate_window: 1m\n  rate_window: 2m", "spend.rate_window"},
		{"budget of no tenant", "rate_window: 1m", "rate_window: 1m\n  tenants: {zed: {per_hour: 1}}", "spend.tenants.zed"},
		{"top rank unlike the gate's", "rate_window: 1m", "rate_window: 1m\n  stages: {top_rank: 4}", "spend.stages.top_rank"},
		{"over-quota rank unlike the gate's", "rate_window: 1m", "rate_window: 1m\n  stages: {over_quota_rank: 1}", "spend.stages.over_quota_rank"},
		{"cost per call with prices", "concurrency: 4", "concurrency: 4\n  cost_per_call: 0.01", "upstream.cost_per_call"},
		{"source cost per call with prices", "max_tokens: 2}", "max_tokens: 2, cost_per_call: 1}", "traffic[0].cost_per_call"},
		{"unpriced model", "model: big", "model: huge", "traffic[0].model"},
		{"bad service factor", "small: {service_factor: 0.5}", "small: {service_factor: 0}", "upstream.models.small.service_factor"},
		{"unknown model key", "small: {service_factor: 0.5}", "small: {service_factr: 0.5}", "upstream.models.small.service_factr"},
		{"longer answer than max_tokens", "output_tokens: 1,", "output_tokens: 3,", "traffic[0].output_tokens"},
		{"negative tokens", "output_tokens: 1,", "output_tokens: 1, input_tokens: -1,", "traffic[0].input_tokens"},
		{"spend policy without a section", "", "", "policies[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := strings.Replace(pricedYAML, c.from, c.to, 1)
			if c.from == "" {
				in = strings.Split(pricedYAML, "spend:")[0] + "policies: [spend]\n"
			}
			if in == pricedYAML {
				t.Fatalf("%q is not in the scenario", c.from)
			}
			_, err := scenario.Parse([]byte(in))
			var fe *scenario.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("error %v, want a *FieldError naming %s", err, c.field)
			}
		})
	}
	// The spend package's own checks name the field under spend. as well.
	_, err := scenario.Parse([]byte(strings.Replace(pricedYAML, "ladder: {big: small}", "ladder: {small: big}", 1)))
	if err == nil || !strings.Contains(err.Error(), "spend.ladder.small") {
		t.Errorf("a dearer rung: %v", err)
	}
	// A rung that is priced but has no service time.
	in := strings.Replace(pricedYAML, "small: {service_factor: 0.5}", "medium: {service_factor: 0.7}", 1)
	var fe *scenario.FieldError
	if _, err := scenario.Parse([]byte(in)); !errors.As(err, &fe) || fe.Field != "spend.ladder.big" {
		t.Errorf("a rung not in upstream.models: %v", err)
	}
}
