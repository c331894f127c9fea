package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/loadgen"
)

func TestLoadFlagErrorsNameTheFlag(t *testing.T) {
	target := []string{"--target", "http://127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--target is required"},
		{[]string{"--target", "127.0.0.1:8080"}, "--target:"},
		{append(target, "--rate", "-1"), "--rate:"},
		{append(target, "--rate", "0"), "--rate:"},
		{append(target, "--rate", "fast"), "-rate"},
		{append(target, "--duration", "-1s"), "--duration:"},
		{append(target, "--duration", "0"), "--duration 0 needs --max-requests"},
		{append(target, "--max-requests", "-3"), "--max-requests:"},
		{append(target, "--mix", "interactive"), "--mix: entry"},
		{append(target, "--mix", "interactive=lots"), "--mix: interactive: \"lots\" is not a number"},
		{append(target, "--mix", "interactive=-0.5,batch=1"), "--mix: interactive: must not be negative"},
		{append(target, "--mix", "interactive=0,batch=0"), "--mix: at least one class needs a positive weight"},
		{append(target, "--mix", "a=1,a=2"), "--mix: class \"a\" given twice"},
		{append(target, "--mix", "two words=1"), "--mix: class name"},
		{append(target, "--mix", "custom=1"), "--deadline: class \"custom\" has no default deadline"},
		{append(target, "--deadline", "premium=3s"), "--deadline: class \"premium\" is not in --mix"},
		{append(target, "--deadline", "interactive=soon"), "--deadline: interactive: \"soon\" is not a duration"},
		{append(target, "--deadline", "interactive=0s"), "--deadline: interactive: must be positive"},
		{append(target, "--policy", "eager"), "--policy: unknown policy \"eager\""},
		{append(target, "--max-attempts", "0"), "--max-attempts: must be at least 1"},
		{append(target, "--max-attempts", "-2"), "--max-attempts:"},
		{append(target, "--attempt-timeout", "-1s"), "--attempt-timeout:"},
		{append(target, "--max-in-flight", "0"), "--max-in-flight: must be at least 1"},
		{append(target, "--max-tokens", "-1"), "--max-tokens:"},
		{append(target, "--header", "novalue"), "-header"},
		{append(target, "--header", "Bad Name: v"), "--header:"},
		{append(target, "extra"), "unexpected argument \"extra\""},
		{append(target, "--attempt-headers", "openai"), "--attempt-headers: must be one of sluice, stainless, both, none, got \"openai\""},
		{append(target, "--attempt-headers", ""), "--attempt-headers: must be one of"},
		{append(target, "--same-prompt=maybe"), "-same-prompt"},
	} {
		_, _, err := parseLoadFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice load %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestLoadFlagsBuildConfig(t *testing.T) {
	cfg, asJSON, err := parseLoadFlags([]string{
		"--target", "http://127.0.0.1:8080", "--rate", "50", "--duration", "30s",
		"--mix", "batch=2,interactive=8", "--deadline", "batch=45s",
		"--policy", "polite", "--max-attempts", "4", "--attempt-timeout", "5s",
		"--model", "m", "--max-tokens", "9", "--stream", "--api-key", "K",
		"--max-requests", "100", "--max-in-flight", "20", "--seed", "7", "--json",
		"--header", "X-Tenant: acme", "--same-prompt", "--attempt-headers", "stainless",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []loadgen.Class{
		{Name: "batch", Weight: 2, Deadline: 45 * time.Second},       // --deadline overrides
		{Name: "interactive", Weight: 8, Deadline: 10 * time.Second}, // default kept
	}
	if len(cfg.Classes) != 2 || cfg.Classes[0] != want[0] || cfg.Classes[1] != want[1] {
		t.Errorf("classes = %+v, want %+v", cfg.Classes, want)
	}
	if cfg.Rate != 50 || cfg.Duration != 30*time.Second || cfg.Policy.Name() != "polite" || cfg.MaxAttempts != 4 ||
		cfg.AttemptTimeout != 5*time.Second || cfg.Model != "m" || cfg.MaxTokens != 9 || !cfg.Stream ||
		cfg.APIKey != "K" || cfg.MaxRequests != 100 || cfg.MaxInFlight != 20 || cfg.Seed != 7 || !asJSON ||
		cfg.Headers.Get("X-Tenant") != "acme" || !cfg.SamePrompt || cfg.AttemptHeaders != loadgen.AttemptHeadersStainless {
		t.Errorf("config = %+v", cfg)
	}

	// Left out, they keep today's traffic: a distinct body per request and
	// sluice's own headers.
	cfg, _, err = parseLoadFlags([]string{"--target", "http://127.0.0.1:8080"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SamePrompt || cfg.AttemptHeaders != loadgen.AttemptHeadersSluice {
		t.Errorf("defaults: same prompt %v, attempt headers %q; want false and sluice", cfg.SamePrompt, cfg.AttemptHeaders)
	}
	for _, mode := range []string{"sluice", "stainless", "both", "none"} {
		cfg, _, err := parseLoadFlags([]string{"--target", "http://127.0.0.1:8080", "--attempt-headers", mode}, io.Discard)
		if err != nil || string(cfg.AttemptHeaders) != mode {
			t.Errorf("--attempt-headers %s: mode %q, err %v", mode, cfg.AttemptHeaders, err)
		}
	}
}

func TestLoadCommandPlaysThePromiseSuiteTraffic(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var mu sync.Mutex
	bodies := map[string]int{}
	var headers []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies[string(b)]++
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("X-Sluice-Reason", "queue_full")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	var out, errOut bytes.Buffer
	code := run([]string{"load", "--target", srv.URL, "--rate", "200", "--max-requests", "4", "--max-attempts", "2",
		"--same-prompt", "--attempt-headers", "stainless", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut.String())
	}
	var rep loadgen.Report
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
	}
	if err := json.Unmarshal(out.Bytes(), &keys); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"unanswered", "unanswered_ratio", "refusal_time", "same_prompt", "attempt_headers"} {
		if _, ok := keys[key]; !ok {
			t.Errorf("--json output lacks %q:\n%s", key, out.String())
		}
	}
	if rep.Attempts != 8 || rep.RefusalTime.Count != 8 || rep.Unanswered != 0 || !rep.SamePrompt || rep.AttemptHeaders != "stainless" {
		t.Errorf("attempts %d refusals timed %d unanswered %d same prompt %v attempt headers %q, want 8 8 0 true stainless",
			rep.Attempts, rep.RefusalTime.Count, rep.Unanswered, rep.SamePrompt, rep.AttemptHeaders)
	}
	mu.Lock()
	if len(bodies) != 1 {
		t.Errorf("server saw %d distinct bodies, want 1 with --same-prompt: %v", len(bodies), bodies)
	}
	retries := 0
	for _, h := range headers {
		if h.Get("X-Sluice-Attempt") != "" || h.Get("X-Sluice-Timeout-Ms") != "" {
			t.Errorf("X-Sluice-* attempt headers sent with --attempt-headers stainless: %v", h)
		}
		if h.Get("X-Stainless-Retry-Count") == "1" {
			retries++
		}
		if h.Get("X-Stainless-Timeout") == "" {
			t.Errorf("X-Stainless-Timeout missing: %v", h)
		}
	}
	mu.Unlock()
	if retries != 4 {
		t.Errorf("%d attempts sent X-Stainless-Retry-Count: 1, want 4", retries)
	}

	out.Reset()
	code = run([]string{"load", "--target", srv.URL, "--rate", "200", "--max-requests", "2", "--max-attempts", "1"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "unanswered") || !strings.Contains(out.String(), "refusal time") {
		t.Errorf("text output (exit %d):\n%s", code, out.String())
	}
}

func TestLoadCommandRuns(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var mu sync.Mutex
	priorities := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		priorities[r.Header.Get("X-Sluice-Priority")]++
		mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer K" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{"choices":[]}`)
	}))
	defer srv.Close()

	var out, errOut bytes.Buffer
	code := run([]string{"load", "--target", srv.URL, "--rate", "200", "--max-requests", "12",
		"--api-key", "K", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut.String())
	}
	var rep loadgen.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
	}
	if rep.Requests != 12 || rep.OnTime != 12 || rep.Policy != "naive" || len(rep.Classes) != 3 {
		t.Errorf("report = %+v", rep)
	}
	mu.Lock()
	total := priorities["interactive"] + priorities["batch"] + priorities["speculative"]
	mu.Unlock()
	if total != 12 {
		t.Errorf("server saw priorities %v, want 12 requests of the default classes", priorities)
	}

	out.Reset()
	code = run([]string{"load", "--target", srv.URL, "--rate", "200", "--max-requests", "3", "--api-key", "K"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "goodput") || !strings.Contains(out.String(), "interactive") {
		t.Errorf("text output (exit %d):\n%s", code, out.String())
	}
}

func TestLoadCommandStopsOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body: only then does the server watch the connection and
		// cancel r.Context() when the client hangs up.
		io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel() // as SIGINT would
	}()
	var out bytes.Buffer
	err := runLoad(ctx, []string{"--target", srv.URL, "--rate", "100", "--duration", "1h"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "INTERRUPTED") {
		t.Errorf("report does not say it was interrupted:\n%s", out.String())
	}
}
