package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestPromiseFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "nope"}, "--scenario"},
		{[]string{"--variant", "sometimes"}, "--variant"},
		{[]string{"--runs", "0"}, "--runs"},
		{[]string{"--window", "10ms", "--http"}, "--window"},
		{[]string{"--sim=false"}, "nothing to run"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		err := runPromise(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestPromiseRunsTheSuiteInTheSimulator: one cell, in the simulator: a
// table row with its figures and "ok", and with --json every run's
// result, one per seed.
func TestPromiseRunsTheSuiteInTheSimulator(t *testing.T) {
	var out bytes.Buffer
	args := []string{"--scenario", "storm-5x", "--variant", "one-prompt/declared"}
	if err := runPromise(t.Context(), args, &out, io.Discard); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "storm-5x") || !strings.Contains(lines[1], "one-prompt/declared") || !strings.HasSuffix(strings.TrimSpace(lines[1]), "ok") {
		t.Fatalf("want a header and one passing row:\n%s", out.String())
	}
	out.Reset()
	if err := runPromise(t.Context(), append(args, "--json", "--runs", "2"), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var results []struct {
		Scenario, Variant, Way string
		GoodputPct             float64
	}
	if err := json.Unmarshal(out.Bytes(), &results); err != nil || len(results) != 2 || results[0].Way != "sim" || results[0].GoodputPct < 95 {
		t.Fatalf("--json --runs 2: %v %+v", err, results)
	}
}
