package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/mockllm"
)

func TestMockFlagErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	badModels := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badModels, []byte("gpt-x: {latency_factor: 1, input_price: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	negModels := filepath.Join(dir, "neg.yaml")
	if err := os.WriteFile(negModels, []byte("gpt-x: {latency_factor: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--slots", "-1"}, "--slots: must be >= 0"},
		{[]string{"--slots", "many"}, "-slots"},
		{[]string{"--mode", "lifo"}, `--mode: must be "queue" or "429", got "lifo"`},
		{[]string{"--median", "-1s"}, "--median:"},
		{[]string{"--median", "1"}, "-median"},
		{[]string{"--per-prompt-token", "-1us"}, "--per-prompt-token: must be in [0, 1h]"},
		{[]string{"--per-prompt-token", "20"}, "-per-prompt-token"},
		{[]string{"--per-output-token", "2h"}, "--per-output-token: must be in [0, 1h], got 2h0m0s"},
		{[]string{"--sigma", "-0.5"}, "--sigma:"},
		{[]string{"--sigma", "NaN"}, "--sigma:"},
		{[]string{"--step-at", "-5s"}, "--step-at:"},
		{[]string{"--step-factor", "0"}, "--step-factor: must be > 0"},
		{[]string{"--step-factor", "-2"}, "--step-factor:"},
		{[]string{"--error-rate", "2"}, "--error-rate: must be in [0, 1]"},
		{[]string{"--hang-rate", "-0.1"}, "--hang-rate:"},
		{[]string{"--reset-rate", "1.1"}, "--reset-rate:"},
		{[]string{"--error-rate", "0.6", "--hang-rate", "0.6"}, "--error-rate: --error-rate + --hang-rate + --reset-rate must be <= 1"},
		{[]string{"--output-tokens", "0"}, "--output-tokens: must be at least 1"},
		{[]string{"--output-tokens", "-4"}, "--output-tokens:"},
		{[]string{"--retry-after", "-1s"}, "--retry-after:"},
		{[]string{"--listen", "nowhere"}, `--listen: want host:port, got "nowhere"`},
		{[]string{"--models", filepath.Join(dir, "missing.yaml")}, "--models: open"},
		{[]string{"--models", badModels}, "--models: " + badModels + ": yaml: unmarshal errors"},
		{[]string{"--models", negModels}, `--models: Models["gpt-x"].LatencyFactor:`},
		{[]string{"--abort-on-disconnect=maybe"}, "-abort-on-disconnect"},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, _, _, err := parseMockFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice mock %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestMockFlagsBuildConfig(t *testing.T) {
	models := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(models, []byte(`
big: {latency_factor: 2, input_usd_per_mtok: 5, output_usd_per_mtok: 20}
"*": {latency_factor: 1}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, listen, _, err := parseMockFlags([]string{
		"--listen", "127.0.0.1:0", "--slots", "0", "--mode", "429", "--median", "0", "--sigma", "0",
		"--per-prompt-token", "20us", "--per-output-token", "2ms",
		"--step-at", "30s", "--step-factor", "4", "--error-rate", "0.01", "--hang-rate", "0.02",
		"--reset-rate", "0.03", "--abort-on-disconnect", "--output-tokens", "10", "--retry-after", "2s",
		"--seed", "9", "--models", models,
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := mockllm.Config{
		Slots: 0, Mode: mockllm.Mode429, Median: 0, Sigma: 0, StepAt: 30 * time.Second, StepFactor: 4,
		PerPromptToken: 20 * time.Microsecond, PerOutputToken: 2 * time.Millisecond,
		ErrorRate: 0.01, HangRate: 0.02, ResetRate: 0.03, AbortOnDisconnect: true, OutputTokens: 10,
		RetryAfter: 2 * time.Second, Seed: 9,
		Models: map[string]mockllm.ModelSpec{
			"big": {LatencyFactor: 2, InputUSDPerMTok: 5, OutputUSDPerMTok: 20},
			"*":   {LatencyFactor: 1},
		},
	}
	if listen != "127.0.0.1:0" || !reflect.DeepEqual(cfg, want) {
		t.Errorf("config %+v listen %q\nwant %+v", cfg, listen, want)
	}

	cfg, _, _, err = parseMockFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	def := mockllm.DefaultConfig()
	def.StepFactor, def.OutputTokens = 1, mockllm.DefaultOutputTokens
	if !reflect.DeepEqual(cfg, def) {
		t.Errorf("defaults %+v, want %+v", cfg, def)
	}
}

// The command serves on the port it prints, answers, and on cancel stops
// cleanly, ending a request still in service with 503.
func TestMockCommandServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	var stderr strings.Builder // read once the command has returned
	go func() {
		done <- runMock(ctx, []string{"--listen", "127.0.0.1:0", "--median", "0", "--per-prompt-token", "1us", "--slots", "1"}, outW, &stderr)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatalf("no address line; command returned %v", <-done)
	}
	base, ok := strings.CutPrefix(lines.Text(), "mock listening on ")
	if !ok || strings.HasSuffix(base, ":0") {
		t.Fatalf("first line %q, want the listening address with its real port", lines.Text())
	}
	rest := make(chan []string)
	go func() {
		var l []string
		for lines.Scan() {
			l = append(l, lines.Text())
		}
		rest <- l
	}()

	resp, err := http.Post(base+mockllm.PathChatCompletions, "application/json",
		strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || body["model"] != "gpt-4o" {
		t.Fatalf("chat: %d %v %v", resp.StatusCode, body, err)
	}

	// A stream held in service for 10 minutes must not hold up shutdown.
	// Its headers arriving prove it is in service.
	req, _ := http.NewRequest(http.MethodPost, base+mockllm.PathChatCompletions,
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set(mockllm.HeaderLatencyMs, "600000")
	held, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Body.Close()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("command returned %v", err)
	}
	if !strings.Contains(stderr.String(), " median=0s per-prompt-token=1µs per-output-token=0s ") {
		t.Errorf("configuration line %q does not show the per-token times", stderr.String())
	}
	tail, _ := io.ReadAll(held.Body)
	if !strings.HasPrefix(string(tail), `data: {"error":`) {
		t.Errorf("stream in service at shutdown ended with %q, want an error event", tail)
	}
	l := <-rest
	if len(l) != 1 || !strings.HasPrefix(l[0], "mock stats: ") {
		t.Fatalf("output after the address: %q, want the final stats", l)
	}
	var st mockllm.Stats
	if err := json.Unmarshal([]byte(strings.TrimPrefix(l[0], "mock stats: ")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Delivered != 1 || st.Aborted != 1 {
		t.Errorf("final stats %+v, want 1 delivered and 1 aborted", st)
	}
}

func TestMockCommandReportsABusyPort(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runMock(ctx, []string{"--listen", "127.0.0.1:0"}, outW, io.Discard)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatal("no address line")
	}
	go io.Copy(io.Discard, outR)
	addr := strings.TrimPrefix(lines.Text(), "mock listening on http://")
	err := runMock(t.Context(), []string{"--listen", addr}, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "--listen: ") {
		t.Errorf("second mock on %s: %v, want a --listen error", addr, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
