package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/workload"
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

// writeTrace writes a trace file for a test and returns its path.
func writeTrace(t *testing.T, csv string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoServices is a trace of a chat service whose rows carry no deadline
// and a code service whose rows all do.
const twoServices = `timestamp,context_tokens,generated_tokens,service,max_tokens,deadline_ms
0,100,20,chat,,
0.5,200,5,code,256,3000
1.0,50,30,chat,1024,
2.0,10,1,code,,2500
`

func TestLoadTraceFlagErrorsNameTheFlag(t *testing.T) {
	traced := []string{"--target", "http://127.0.0.1:1", "--trace", writeTrace(t, twoServices), "--deadline", "chat=10s"}
	with := func(args ...string) []string { return append(slices.Clone(traced), args...) }
	target := []string{"--target", "http://127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{with("--rate", "5"), "--rate: not with --trace"},
		{with("--mix", "chat=1"), "--mix: not with --trace"},
		{with("--same-prompt"), "--same-prompt: not with --trace"},
		{with("--speed", "0"), "--speed: must be a positive factor"},
		{with("--speed", "-2"), "--speed: must be a positive factor"},
		{with("--speed", "NaN"), "--speed: must be a positive factor"},
		{append(slices.Clone(target), "--speed", "2"), "--speed: only with --trace"},
		{append(slices.Clone(target), "--trace", filepath.Join(t.TempDir(), "missing.csv")), "--trace: open"},
		{append(slices.Clone(target), "--trace", writeTrace(t, "timestamp,context_tokens,generated_tokens\n0,ten,1\n")), "line 2: column context_tokens"},
		{append(slices.Clone(target), "--trace", writeTrace(t, twoServices)), `--deadline: service "chat" has none, and its calls in`},
		{with("--deadline", "chat=10s,chat=5s"), `--deadline: class "chat" given twice`},
		{with("--priority", "search=interactive"), `--priority: service "search" is not in the trace (services: chat, code)`},
		{with("--service-key", "search=K"), `--service-key: service "search" is not in the trace`},
		{with("--service-max-tokens", "search=5"), `--service-max-tokens: service "search" is not in the trace`},
		{with("--service-max-tokens", "chat=0"), `--service-max-tokens: chat: "0" is not a whole number of at least 1`},
		{with("--service-max-tokens", "chat=lots"), `--service-max-tokens: chat: "lots" is not a whole number`},
		{with("--priority", "chat=very high"), `--priority: chat: priority "very high" may hold only`},
		{with("--priority", "chat"), "--priority: entry"},
		{with("--duration", "-1s"), "--duration:"},
		{append(slices.Clone(target), "--trace", writeTrace(t, "timestamp,context_tokens,generated_tokens,service\n0,1,1,chat\n1,1,1,\n")),
			"some calls name a service and some none"},
		{append(slices.Clone(target), "--trace", writeTrace(t, "timestamp,context_tokens,generated_tokens,service,deadline_ms\n0,1,1,my app,100\n")),
			`service "my app": a service's name may hold only`},
		// The per-class flags name classes of --mix without a trace.
		{append(slices.Clone(target), "--priority", "premium=interactive"), `--priority: class "premium" is not in --mix (classes: interactive, batch, speculative)`},
		{append(slices.Clone(target), "--service-key", "premium=K"), `--service-key: class "premium" is not in --mix`},
		{append(slices.Clone(target), "--service-max-tokens", "batch=-1"), `--service-max-tokens: batch: "-1" is not a whole number`},
	} {
		_, _, err := parseLoadFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice load %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	// loadgen's own checks of a class map to the per-class flags.
	for field, flag := range map[string]string{
		"Classes[1].Priority": "--priority", "Classes[0].APIKey": "--service-key",
		"Classes[2].MaxTokens": "--service-max-tokens", "Classes[0].Deadline": "--deadline",
		"Trace": "--trace", "SamePrompt": "--same-prompt",
	} {
		err := flagError(&loadgen.ConfigError{Field: field, Problem: "bad"})
		if err.Error() != flag+": bad" {
			t.Errorf("%s: %v, want %s: bad", field, err, flag)
		}
	}
}

func TestLoadTraceFlagsBuildConfig(t *testing.T) {
	path := writeTrace(t, twoServices)
	cfg, _, err := parseLoadFlags([]string{
		"--target", "http://127.0.0.1:8080", "--trace", path, "--speed", "2",
		"--deadline", "chat=10s", "--priority", "code=batch", "--service-key", "chat=KC==",
		"--service-max-tokens", "code=128", "--max-tokens", "99", "--api-key", "K",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Trace == nil || len(cfg.Trace.Calls) != 4 {
		t.Fatalf("trace = %+v", cfg.Trace)
	}
	// Played twice as fast; the sizes and deadlines as recorded.
	wantCalls := []workload.Call{
		{At: 0, Service: "chat", PromptTokens: 100, OutputTokens: 20},
		{At: 250 * time.Millisecond, Service: "code", PromptTokens: 200, OutputTokens: 5, MaxTokens: 256, Deadline: 3 * time.Second},
		{At: 500 * time.Millisecond, Service: "chat", PromptTokens: 50, OutputTokens: 30, MaxTokens: 1024},
		{At: time.Second, Service: "code", PromptTokens: 10, OutputTokens: 1, Deadline: 2500 * time.Millisecond},
	}
	if !slices.Equal(cfg.Trace.Calls, wantCalls) {
		t.Errorf("calls = %+v, want %+v", cfg.Trace.Calls, wantCalls)
	}
	// The classes are the services in order of appearance; code's calls
	// all carry deadlines, so it needs none.
	wantClasses := []loadgen.Class{
		{Name: "chat", Priority: "interactive", APIKey: "KC==", Deadline: 10 * time.Second},
		{Name: "code", Priority: "batch", MaxTokens: 128},
	}
	if !slices.Equal(cfg.Classes, wantClasses) {
		t.Errorf("classes = %+v, want %+v", cfg.Classes, wantClasses)
	}
	// No rate, and the whole trace: the 10s default of --duration would
	// cut a trace short.
	if cfg.Rate != 0 || cfg.Duration != 0 || cfg.APIKey != "K" || cfg.MaxTokens != 99 {
		t.Errorf("rate %v duration %v key %q max tokens %d, want 0 0 K 99", cfg.Rate, cfg.Duration, cfg.APIKey, cfg.MaxTokens)
	}

	// --duration given stops the replay there; a trace without services
	// is one, named trace.
	unnamed := writeTrace(t, "timestamp,context_tokens,generated_tokens\n2023-11-16 18:15:46.6805900,4808,10\n2023-11-16 18:15:50.9951690,3180,8\n")
	cfg, _, err = parseLoadFlags([]string{"--target", "http://127.0.0.1:8080", "--trace", unnamed, "--deadline", "trace=3s", "--duration", "1m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []loadgen.Class{{Name: "trace", Priority: "interactive", Deadline: 3 * time.Second}}; !slices.Equal(cfg.Classes, want) || cfg.Duration != time.Minute {
		t.Errorf("classes %+v duration %v, want %+v and 1m", cfg.Classes, cfg.Duration, want)
	}
	if at := cfg.Trace.Calls[1].At; at != 4314579*time.Microsecond {
		t.Errorf("second call at %v, want 4.314579s after the first", at)
	}

	// Without a trace the per-class flags set the mix's classes; the
	// priority stays the name unless given.
	cfg, _, err = parseLoadFlags([]string{"--target", "http://127.0.0.1:8080", "--mix", "tenant-a=1,tenant-b=1",
		"--deadline", "tenant-a=2s,tenant-b=4s", "--priority", "tenant-a=interactive", "--service-key", "tenant-b=KB",
		"--service-max-tokens", "tenant-a=7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wantClasses = []loadgen.Class{
		{Name: "tenant-a", Priority: "interactive", MaxTokens: 7, Weight: 1, Deadline: 2 * time.Second},
		{Name: "tenant-b", APIKey: "KB", Weight: 1, Deadline: 4 * time.Second},
	}
	if !slices.Equal(cfg.Classes, wantClasses) || cfg.Trace != nil || cfg.Rate != 10 {
		t.Errorf("classes = %+v (trace %v, rate %v), want %+v", cfg.Classes, cfg.Trace, cfg.Rate, wantClasses)
	}
}

// sluice load --trace sends each call of the trace as its service: its
// priority, key, max_tokens, deadline, prompt size and recorded answer
// length; the report has a row per service.
func TestLoadCommandReplaysATrace(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	type got struct {
		priority, auth, outputTokens, timeoutMs string
		maxTokens, promptChars                  int
	}
	var mu sync.Mutex
	seen := map[string]got{} // by X-Mock-Output-Tokens, which tells the calls apart
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			MaxTokens int `json:"max_tokens"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) != 1 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[r.Header.Get(loadgen.HeaderMockOutputTokens)] = got{r.Header.Get("X-Sluice-Priority"), r.Header.Get("Authorization"),
			r.Header.Get(loadgen.HeaderMockOutputTokens), r.Header.Get("X-Sluice-Timeout-Ms"), body.MaxTokens, len(body.Messages[0].Content)}
		mu.Unlock()
		io.WriteString(w, `{"choices":[]}`)
	}))
	defer srv.Close()

	var out, errOut bytes.Buffer
	// 1000 times faster: the 2s trace is over in 2ms.
	code := run([]string{"load", "--target", srv.URL, "--trace", writeTrace(t, twoServices), "--speed", "1000",
		"--deadline", "chat=10s", "--service-key", "code=KC", "--api-key", "K", "--max-tokens", "64",
		"--policy", "polite", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut.String())
	}
	var rep loadgen.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
	}
	if rep.Requests != 4 || rep.OnTime != 4 || !rep.Trace || len(rep.Classes) != 2 ||
		rep.Classes[0].Name != "chat" || rep.Classes[0].Requests != 2 || rep.Classes[0].OnTime != 2 ||
		rep.Classes[1].Name != "code" || rep.Classes[1].Requests != 2 || rep.Classes[1].OnTime != 2 {
		t.Errorf("report = %+v", rep)
	}
	mu.Lock()
	defer mu.Unlock()
	for tokens, w := range map[string]got{
		"20": {"interactive", "Bearer K", "20", "10000", 64, 400},
		"5":  {"interactive", "Bearer KC", "5", "3000", 256, 800},
		"30": {"interactive", "Bearer K", "30", "10000", 1024, 200},
		"1":  {"interactive", "Bearer KC", "1", "2500", 64, 40},
	} {
		g := seen[tokens]
		// A polite caller declares what is left of its deadline: its
		// whole deadline, give or take the moment it took to send.
		timeout, _ := strconv.Atoi(g.timeoutMs)
		wantTimeout, _ := strconv.Atoi(w.timeoutMs)
		g.timeoutMs, w.timeoutMs = "", ""
		if g != w || timeout > wantTimeout || timeout < wantTimeout-1000 {
			t.Errorf("call with %s output tokens: %+v (timeout %dms), want %+v (%dms)", tokens, g, timeout, w, wantTimeout)
		}
	}
}
