package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

const testScenario = "../../scenarios/retry-storm.yaml"

func TestSimFlagErrorsNameTheFlag(t *testing.T) {
	sc := []string{"--scenario", testScenario}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--scenario FILE is required"},
		{append(sc, "--all", "--out", "x"), "--scenario and --all"},
		{[]string{"--all"}, "--out: required with --all"},
		{append(sc, "--out", "x"), "--out: only with --all"},
		{append(sc, "--load", "0"), "-load"},
		{append(sc, "--load", "1,fast"), "-load"},
		{append(sc, "--load", "5000"), "-load"},
		{append(sc, "--requests", "-1"), "--requests:"},
		{append(sc, "--requests", "0"), "--requests: want ≥ 1"},
		{append(sc, "--workers", "0"), "--workers: want ≥ 1"},
		{append(sc, "--policy", "fifo,magic"), "--policy: unknown policy \"magic\""},
		{append(sc, "--client", "rude"), "--client: unknown client \"rude\""},
		{append(sc, "--seed", "-1"), "-seed"},
		{append(sc, "--speed", "-1"), "--speed:"},
		{append(sc, "extra"), "unexpected argument \"extra\""},
	} {
		_, err := parseSimFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice sim %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestSimScenarioErrorNamesFileAndField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("upstream: {concurrency: 4, service: {lognormal: {median: 1s}}}\nclasses: [{name: interactive, deadline: 1s}]\ntraffic: [{class: interactive, clinet: naive}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim", "--scenario", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, path) || !strings.Contains(msg, "traffic[0].clinet") {
		t.Errorf("error %q should name the file and traffic[0].clinet", msg)
	}
	if code := run([]string{"sim", "--scenario", filepath.Join(t.TempDir(), "missing.yaml")}, &stdout, &stderr); code != 1 {
		t.Errorf("missing file: exit %d", code)
	}
}

// TestSimPrintsOneTable is the simulator's basic command: one scenario, one
// load, a number of requests, one table with a row per policy.
func TestSimPrintsOneTable(t *testing.T) {
	var stdout bytes.Buffer
	err := runSim(context.Background(), []string{"--scenario", testScenario, "--load", "5", "--requests", "3000"}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if strings.Count(out, "scenario retry-storm at 5×") != 1 {
		t.Fatalf("want one table at 5×:\n%s", out)
	}
	for _, want := range []string{"goodput % cap", "waste % billed", "unbounded FIFO", "sluice (+ retry budget)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	sc, err := scenario.Load(testScenario)
	if err != nil {
		t.Fatal(err)
	}
	if lines, policies := strings.Count(out, "\n"), len(sc.PolicyNames()); lines != 2+policies {
		t.Errorf("%d lines, want a title, a header and %d policies:\n%s", lines, policies, out)
	}
}

func TestSimJSONHonoursPolicyLoadSeedAndClient(t *testing.T) {
	var stdout bytes.Buffer
	err := runSim(context.Background(), []string{"--scenario", testScenario, "--load", "1,2", "--requests", "2000",
		"--policy", "fifo,sluice", "--seed", "7", "--client", "polite", "--json"}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var results []struct {
		Policy             string
		Load               float64
		Seed               uint64
		AttemptsPerRequest float64  `json:"attempts_per_request"`
		UnansweredPct      *float64 `json:"unanswered_pct"`
		RefusalP99Ms       *float64 `json:"refusal_p99_ms"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 || results[0].Policy != "fifo" || results[1].Policy != "sluice" || results[2].Load != 2 || results[0].Seed != 7 {
		t.Fatalf("results %+v", results)
	}
	if r := results[0]; r.UnansweredPct == nil || r.RefusalP99Ms == nil {
		t.Error("the JSON lacks unanswered_pct or refusal_p99_ms")
	}
}

// TestSimAllWritesResults regenerates results.md and its plots into a
// temporary directory, from two scenarios, without the real-time
// calibration.
func TestSimAllWritesResults(t *testing.T) {
	scen := t.TempDir()
	for _, f := range []string{"retry-storm", "speculative-flood"} {
		data, err := os.ReadFile("../../scenarios/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scen, f+".yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	err := runSim(context.Background(), []string{"--all", "--scenarios", scen, "--out", out, "--requests", "2000",
		"--calibrate=false", "--speed", "0"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if i, j := bytes.Index(md, []byte("Scenario: retry-storm")), bytes.Index(md, []byte("Scenario: speculative-flood")); i < 0 || j < i {
		t.Error("scenarios missing or out of scenarioOrder's order")
	}
	for _, f := range []string{"retry-storm-goodput.png", "speculative-flood-goodput.png"} {
		if _, err := os.Stat(filepath.Join(out, "plots", f)); err != nil {
			t.Error(err)
		}
	}
	if err := runSim(context.Background(), []string{"--all", "--scenarios", t.TempDir(), "--out", out}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--scenarios: no *.yaml") {
		t.Errorf("empty scenario directory: %v", err)
	}
}

// TestSimRunawayTenantShowsTheSpendLimiter: a scenario with a spend section
// runs the spend limiter's policy too, and the table says what it did; a
// scenario without one refuses the policy.
func TestSimRunawayTenantShowsTheSpendLimiter(t *testing.T) {
	var stdout bytes.Buffer
	err := runSim(context.Background(), []string{"--scenario", "../../scenarios/runaway-tenant.yaml", "--load", "5", "--requests", "30000", "--policy", "sluice,spend"}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{"+ spend limiter", "peak $/h", "success loopy %", "ceiling $300/h", "refused", "tenant loopy ($120/h) crossed at"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	err = runSim(context.Background(), []string{"--scenario", testScenario, "--policy", "spend", "--requests", "100"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "spend section") {
		t.Errorf("--policy spend without a spend section: %v", err)
	}
}

// smallTrace is a trace of two services, chat (two calls in three: long
// answers, callers who wait 10 s) and code (short answers, 3 s), a call
// every 100 ms for 30 s, with no deadlines or max_tokens of its own: a few
// hundred calls, which --trace runs in a blink.
func smallTrace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("timestamp,context_tokens,generated_tokens,service\n")
	for i := range 300 {
		if i%3 == 2 {
			fmt.Fprintf(&b, "%.3f,%d,%d,code\n", float64(i)*0.1, 1200+37*(i%11), 5+(i*7)%40)
		} else {
			fmt.Fprintf(&b, "%.3f,%d,%d,chat\n", float64(i)*0.1, 800+53*(i%13), 40+(i*31)%400)
		}
	}
	return writeTrace(t, b.String())
}

// traceArgs are the flags a run of smallTrace needs: each service's
// deadline, and its max_tokens.
func traceArgs(path string, more ...string) []string {
	return append([]string{"--trace", path, "--deadline", "chat=10s,code=3s", "--service-max-tokens", "chat=1024,code=256"}, more...)
}

// sluice sim --trace prints the trace, the provider, and a table with the
// bound's row and one per policy — no gateway, sluice told the
// concurrency, sluice learning it — with success per service.
func TestSimTracePrintsTheBoundAndThePolicies(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"sim"}, traceArgs(smallTrace(t), "--load", "2")...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"300 calls over 29.9s (chat 200, code 100)",
		"provider: 16 slots; a call takes 50ms + 20µs a prompt token + 2ms an answer token, σ 0.2",
		"× speed: 2× capacity",
		"on-time/s", "% of bound", "% of no gateway", "success chat %", "success code %", "waste % billed", "unanswered %", "refusal p99 ms",
		"offline bound (EDF)", "no gateway (unbounded FIFO)", "sluice, told the concurrency", "sluice, learning it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 2+1+1+1+4 {
		t.Errorf("%d lines, want the trace, the provider, a blank line, a title, a header, the bound and 3 policies:\n%s", lines, out)
	}
}

// traceJSON is the part of --trace's JSON the tests read.
type traceJSON struct {
	Calls       int     `json:"calls"`
	NaturalLoad float64 `json:"natural_load"`
	Seed        uint64  `json:"seed"`
	Runs        []struct {
		Load  float64 `json:"load"`
		Speed float64 `json:"speed"`
		Bound struct {
			Requests        int     `json:"requests"`
			OnTime          int     `json:"on_time"`
			OnTimePerSecond float64 `json:"on_time_per_second"`
			Sources         []struct {
				Name string `json:"name"`
			} `json:"sources"`
		} `json:"bound"`
		Policies []struct {
			Policy          string   `json:"policy"`
			Requests        int      `json:"requests"`
			OnTime          int      `json:"on_time"`
			OnTimePerSecond float64  `json:"on_time_per_second"`
			PctOfBound      float64  `json:"pct_of_bound"`
			PctOfFIFO       *float64 `json:"pct_of_fifo"`
			WastePct        float64  `json:"waste_pct"`
			Sources         []struct {
				Name       string  `json:"name"`
				SuccessPct float64 `json:"success_pct"`
			} `json:"sources"`
		} `json:"policies"`
	} `json:"runs"`
}

func simTraceJSON(t *testing.T, args ...string) traceJSON {
	t.Helper()
	var stdout bytes.Buffer
	if err := runSim(context.Background(), append(args, "--json"), &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep traceJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	return rep
}

// The JSON holds what the table shows: every policy's on-time answers
// beside the bound's and no gateway's, over the same calls. On a provider
// of 2 slots the trace at 3× its capacity is an overload long enough for
// callers who retry at once to sink no gateway, wasting most of what it
// bills, while sluice serves most of what the bound does.
func TestSimTraceJSONAgainstTheBound(t *testing.T) {
	rep := simTraceJSON(t, traceArgs(smallTrace(t), "--slots", "2", "--load", "1,3")...)
	if rep.Calls != 300 || len(rep.Runs) != 2 || rep.Seed != 1 {
		t.Fatalf("calls %d, runs %d, seed %d: want 300 calls, a run per load, seed 1", rep.Calls, len(rep.Runs), rep.Seed)
	}
	for _, run := range rep.Runs {
		if math.Abs(run.Speed*rep.NaturalLoad-run.Load) > 1e-9 {
			t.Errorf("load %v: speed %v × natural load %v is not the load", run.Load, run.Speed, rep.NaturalLoad)
		}
		b := run.Bound
		if b.Requests != 300 || len(b.Sources) != 2 || b.Sources[0].Name != "chat" || b.Sources[1].Name != "code" {
			t.Errorf("load %v: bound %+v, want the 300 calls of chat and code", run.Load, b)
		}
		var names []string
		for _, p := range run.Policies {
			names = append(names, p.Policy)
			if p.Requests != 300 || len(p.Sources) != 2 {
				t.Errorf("load %v, %s: %d requests, %d sources; want 300 of 2", run.Load, p.Policy, p.Requests, len(p.Sources))
			}
			if want := 100 * float64(p.OnTime) / float64(b.OnTime); math.Abs(p.PctOfBound-want) > 1e-9 {
				t.Errorf("load %v, %s: %% of bound %v, want %v", run.Load, p.Policy, p.PctOfBound, want)
			}
			if p.PctOfFIFO == nil {
				t.Errorf("load %v, %s: no %% of no gateway", run.Load, p.Policy)
			}
			if ratio := p.OnTimePerSecond / b.OnTimePerSecond; math.Abs(ratio-p.PctOfBound/100) > 1e-9 {
				t.Errorf("load %v, %s: on-time/s %v against the bound's %v, want the same window", run.Load, p.Policy, p.OnTimePerSecond, b.OnTimePerSecond)
			}
		}
		if !slices.Equal(names, []string{"fifo", "sluice", "learned"}) {
			t.Errorf("load %v: policies %v, want fifo, sluice, learned", run.Load, names)
		}
	}
	for _, p := range rep.Runs[0].Policies {
		if p.PctOfBound < 95 {
			t.Errorf("at 1×: %s serves %.1f%% of the bound, want about all of it", p.Policy, p.PctOfBound)
		}
	}
	over := rep.Runs[1].Policies
	fifo, told := over[0], over[1]
	if *fifo.PctOfFIFO != 100 || fifo.WastePct < 50 || told.PctOfBound < 60 || told.OnTime <= fifo.OnTime {
		t.Errorf("at 3×: no gateway %.1f%% of the bound wasting %.1f%%, sluice %.1f%%: want no gateway wasting most, sluice near the bound and above no gateway",
			fifo.PctOfBound, fifo.WastePct, told.PctOfBound)
	}
	// --speed plays the trace that many times faster: its load is the
	// natural load times the speed.
	sped := simTraceJSON(t, traceArgs(smallTrace(t), "--speed", "2", "--policy", "fifo")...)
	if r := sped.Runs[0]; r.Speed != 2 || math.Abs(r.Load-2*sped.NaturalLoad) > 1e-9 || len(r.Policies) != 1 {
		t.Errorf("--speed 2: speed %v, load %v (natural %v), %d policies", r.Speed, r.Load, sped.NaturalLoad, len(r.Policies))
	}
}

// A trace as Azure publishes it — dates, no service column — is one
// service, named trace; a run without fifo has no column against it.
func TestSimTraceWithoutServices(t *testing.T) {
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	for i := range 200 {
		fmt.Fprintf(&b, "2023-11-16 18:%02d:%02d.%07d,%d,%d\n", 15+i/600, (i/10)%60, (i%10)*1_000_000, 400+i%300, 20+i%150)
	}
	path := writeTrace(t, b.String())
	var stdout bytes.Buffer
	if err := runSim(context.Background(), []string{"--trace", path, "--deadline", "trace=2s", "--policy", "sluice", "--speed", "4"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{"200 calls over 19.9s (trace 200)", "at 4× speed", "success trace %", "offline bound (EDF)", "sluice, told the concurrency"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no gateway") {
		t.Errorf("a run without fifo compares with no gateway:\n%s", out)
	}
}

// A scenario may name its trace (trace_file:, relative to the file): it is
// reported as --trace reports.
func TestSimScenarioWithATraceFile(t *testing.T) {
	trace := smallTrace(t)
	path := filepath.Join(filepath.Dir(trace), "replay.yaml")
	yaml := `policies: [fifo, sluice]
upstream:
  concurrency: 16
  service: {tokens: {base: 50ms, per_prompt_token: 20us, per_output_token: 2ms, sigma: 0.2}}
classes: [{name: interactive, deadline: 10s}]
traffic:
  - {name: chat, class: interactive, attempt_timeout: 10s}
  - {name: code, class: interactive, deadline: 3s, attempt_timeout: 3s}
trace_file: trace.csv
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := runSim(context.Background(), []string{"--scenario", path, "--load", "2"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{"trace replay (trace.csv): 300 calls", "2× capacity", "offline bound (EDF)", "no gateway (unbounded FIFO)", "success code %"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The example of docs/commands.md runs on the trace shipped beside the
// scenarios.
func TestSimTraceExample(t *testing.T) {
	var stdout bytes.Buffer
	err := runSim(context.Background(), []string{"--trace", "../../scenarios/production.csv", "--deadline", "chat=10s,code=3s",
		"--service-max-tokens", "chat=1024,code=256", "--speed", "3"}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.Contains(out, "at 3× speed") || !strings.Contains(out, "sluice, learning it") {
		t.Errorf("output:\n%s", out)
	}
}

func TestSimTraceFlagErrorsNameTheFlag(t *testing.T) {
	trace := smallTrace(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", trace}, `--deadline: service "chat" has none, and its calls in`},
		{[]string{"--trace", trace, "--deadline", "chat=10s"}, `--deadline: service "code" has none`},
		{traceArgs(trace, "--deadline", "chat=10s,code=3s,search=1s"), `--deadline: service "search" is not in the trace (services: chat, code)`},
		{traceArgs(trace, "--speed", "2", "--load", "3"), "--speed and --load: give one of them"},
		{traceArgs(trace, "--speed", "0"), "--speed: want a positive factor"},
		{traceArgs(trace, "--speed", "1e6"), "--speed: 1e+06 plays the trace at"},
		{traceArgs(writeTrace(t, "timestamp,context_tokens,generated_tokens\n0,1,2\n1,-3,2\n")), "--trace: "},
		{traceArgs(writeTrace(t, "timestamp,context_tokens,generated_tokens\n0,1,2\n1,-3,2\n")), "line 3: column context_tokens"},
		{traceArgs(filepath.Join(t.TempDir(), "missing.csv")), "--trace: open"},
		{traceArgs(writeTrace(t, "timestamp,context_tokens,generated_tokens,service\n0,1,2,chat\n0,1,2,code\n")), "calls over 0s offer no rate to play"},
		{traceArgs(trace, "--slots", "0"), "--slots: want 1 to"},
		{traceArgs(trace, "--sigma", "5"), "--sigma: 5, want 0 to 3"},
		{traceArgs(trace, "--base", "-1s"), "--base: -1s"},
		{traceArgs(trace, "--base", "0", "--per-prompt-token", "0", "--per-output-token", "0"), "--base, --per-prompt-token, --per-output-token: all zero"},
		{traceArgs(trace, "--priority", "chat=urgent"), `--priority: service "chat": want one of interactive, batch, speculative`},
		{traceArgs(trace, "--service-max-tokens", "chat=10,code=256"), `--service-max-tokens: service "chat": 10, but its call at`},
		{traceArgs(trace, "--service-max-tokens", "chat=ten"), "--service-max-tokens: chat:"},
		{traceArgs(trace, "--max-attempts", "0"), "--max-attempts: want ≥ 1"},
		{traceArgs(trace, "--max-attempts", "99"), `--max-attempts: service "chat"`},
		{traceArgs(trace, "--attempt-timeout", "-1s"), "--attempt-timeout: want a positive duration"},
		{traceArgs(trace, "--deadline", "chat=10s,code=48h"), `--deadline: service "code": want at most 24h0m0s`},
		{traceArgs(trace, "--policy", "spend"), "--policy: policy \"spend\" runs the spend limiter"},
		{traceArgs(trace, "--policies", "magic"), "--policy: unknown policy \"magic\""},
		{traceArgs(trace, "--client", "rude"), "--client: unknown client"},
		{traceArgs(trace, "--requests", "100"), "--requests: not with --trace"},
		{traceArgs(trace, "--scenario", testScenario), "--trace and --scenario: give one of them"},
		{traceArgs(trace, "--all", "--out", "x"), "--trace and --all: give one of them"},
		{[]string{"--scenario", testScenario, "--slots", "4"}, "--slots: only with --trace"},
		{[]string{"--scenario", testScenario, "--deadline", "interactive=1s"}, "--deadline: only with --trace"},
		{[]string{"--scenario", testScenario, "--speed", "2"}, "--speed: only with --trace"},
	} {
		err := runSim(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice sim %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
