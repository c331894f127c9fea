package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
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
