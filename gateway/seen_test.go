package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/retrybudget"
)

// promptBody is a chat completion of its own prompt: distinct requests,
// where copies of one (chatBody) that failed would be retries.
func promptBody(i int) string {
	return `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"request ` + strconv.Itoa(i) + `"}],"max_tokens":16}`
}

// recognised reads sluice_retries_recognised_total{how} from the
// gateway's registry, as a scrape would.
func recognised(t *testing.T, g *Gateway, how string) float64 {
	t.Helper()
	mfs, err := g.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_retries_recognised_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "how" && l.GetValue() == how {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("sluice_retries_recognised_total{how=%q} not exported", how)
	return 0
}

// TestHeaderlessRetryIsRecognised: over loopback against the mock
// provider, with the default configuration, a plain HTTP client that sends
// no retry header and repeats a request the gateway refused is counted as
// a retry — in sluice_retries_recognised_total{how="fingerprint"} and in
// admissions — and waits at the retry rank; the same request repeated
// after it succeeded is a first attempt again.
func TestHeaderlessRetryIsRecognised(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{AbortOnDisconnect: true})
	cfg := baseConfig(up.URL)
	cfg.Admission.Concurrency, cfg.Admission.MaxQueue = 1, new(1)
	// Budgets that refill in a microsecond: the retry must reach the gate.
	cfg.Retries.Budget = retrybudget.Config{MinPerSecond: 1e6, MaxTokens: 10}
	cfg.Retries.PerTenant = cfg.Retries.Budget
	g, gw := startGateway(t, cfg)
	anon := contract.AnonymousTenant
	stats := func() admission.Stats { return g.Gate().Stats() }
	depth := func() (n int) {
		for _, d := range stats().Depth {
			n += d
		}
		return n
	}
	// background sends body until its context is cancelled; the result
	// comes back on the channel.
	background := func(ctx context.Context, body string, headers map[string]string) <-chan int {
		ch := make(chan int, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ch <- 0
				return
			}
			readAll(t, resp)
			ch <- resp.StatusCode
		}()
		return ch
	}
	plain := func() int { // the caller under test: no header of any kind
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp.StatusCode
	}

	// The slot is held by a long call, the queue by another request.
	blockCtx, unblock := context.WithCancel(t.Context())
	defer unblock()
	background(blockCtx, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"block"}]}`, map[string]string{mockllm.HeaderLatencyMs: "60000"})
	testkit.Eventually(t, "the slot taken", func() bool { return stats().InFlight == 1 })
	fillCtx, unfill := context.WithCancel(t.Context())
	filled := background(fillCtx, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"fill"}]}`, nil)
	testkit.Eventually(t, "the queue filled", func() bool { return depth() == 1 })

	// Refused: the queue is full.
	if code := plain(); code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
		t.Fatalf("a request with the queue full: %d, want a refusal", code)
	}
	if n := recognised(t, g, "fingerprint"); n != 0 {
		t.Fatalf("recognised %v retries before any retry", n)
	}
	unfill()
	<-filled
	testkit.Eventually(t, "the queue emptied", func() bool { return depth() == 0 })

	// The same request again: a retry, waiting at the retry rank.
	retried := make(chan int, 1)
	go func() { retried <- plain() }()
	retryRank, _ := g.Gate().Rank(admission.Request{Class: admission.ClassInteractive, Attempt: 1})
	firstRank, _ := g.Gate().Rank(admission.Request{Class: admission.ClassInteractive})
	if retryRank == firstRank {
		t.Fatalf("the retry rank %d is the first attempts' rank", retryRank)
	}
	testkit.Eventually(t, "the retry queued at the retry rank", func() bool { return stats().Depth[retryRank] == 1 })
	if n := recognised(t, g, "fingerprint"); n != 1 {
		t.Fatalf("sluice_retries_recognised_total{how=fingerprint} %v, want 1", n)
	}
	unblock()
	if code := <-retried; code != http.StatusOK {
		t.Fatalf("the retry: %d, want 200", code)
	}
	if n := counter(t, g, "admissions", admission.ClassInteractive, anon, "retry"); n != 1 {
		t.Fatalf("admissions{attempt=retry} %v, want 1", n)
	}

	// It succeeded: the same request once more is new work.
	firsts := counter(t, g, "admissions", admission.ClassInteractive, anon, "first")
	if code := plain(); code != http.StatusOK {
		t.Fatalf("the request after its success: %d", code)
	}
	if n := recognised(t, g, "fingerprint"); n != 1 {
		t.Fatalf("a repeat after a success counted as a retry: recognised %v, want 1", n)
	}
	if n := counter(t, g, "admissions", admission.ClassInteractive, anon, "first"); n != firsts+1 {
		t.Fatalf("admissions{attempt=first} %v, want %v", n, firsts+1)
	}

	// Declared retries are counted by their header.
	for _, h := range []string{contract.HeaderAttempt, contract.HeaderStainlessRetryCount} {
		readAll(t, post(t, t.Context(), gw.URL, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`+h+`"}]}`, map[string]string{h: "1"}))
	}
	if h, s, f := recognised(t, g, "header"), recognised(t, g, "stainless"), recognised(t, g, "fingerprint"); h != 1 || s != 1 || f != 1 {
		t.Fatalf("recognised: header %v, stainless %v, fingerprint %v; want 1 each", h, s, f)
	}
}

// A request the provider failed (500), repeated without a header, is a
// retry; with retries.recognise.disabled, it is a first attempt again.
func TestHeaderlessRetryOfAProviderFailure(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		_, up := testkit.StartMock(t, mockllm.Config{})
		cfg := baseConfig(up.URL)
		cfg.Retries.Recognise.Disabled = disabled
		g, gw := startGateway(t, cfg)
		for range 3 {
			resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{mockllm.HeaderFault: "error"})
			// The provider's 500, or — a retry recognised, soon after the
			// first attempts' deposits — 429 retry_budget.
			if readAll(t, resp); resp.StatusCode != http.StatusInternalServerError &&
				resp.Header.Get(contract.HeaderReason) != contract.ReasonRetryBudget {
				t.Fatalf("a request the mock fails: %d %s, want 500 or 429 retry_budget", resp.StatusCode, resp.Header.Get(contract.HeaderReason))
			}
		}
		want := 2.0 // the second and third copies
		if disabled {
			want = 0
		}
		if n := recognised(t, g, "fingerprint"); n != want {
			t.Fatalf("disabled %v: recognised %v, want %v", disabled, n, want)
		}
	}
}

func TestRecogniseConfigErrorsNameTheField(t *testing.T) {
	const base = "upstream: {url: http://x}\nadmission: {concurrency: 1}\n"
	for _, tc := range []struct{ yaml, field string }{
		{"retries: {recognise: {window: -1s}}", "retries.recognise.window"},
		{"retries: {recognise: {window: 2h}}", "retries.recognise.window"},
		{"retries: {recognise: {max_entries: 0}}", "retries.recognise.max_entries"},
		{"retries: {recognise: {max_entries: -5}}", "retries.recognise.max_entries"},
		{"retries: {recognise: {max_entries: 1e9}}", "max_entries"},
		{"retries: {recognise: {colour: red}}", "colour"},
	} {
		_, err := config.Parse([]byte(base + tc.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s → %v, want an error naming %s", tc.yaml, err, tc.field)
		}
	}
	for _, ok := range []string{
		"retries: {recognise: {disabled: true, max_entries: 0}}",
		"retries: {recognise: {window: 5s, max_entries: 1}}",
	} {
		if _, err := config.Parse([]byte(base + ok + "\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestHeaderlessRetryAfterTheCallerGaveUp: a plain client whose own timeout
// ends its wait in the queue hangs up; the gateway withdraws the call, and
// the client's next send of the same request is a retry.
func TestHeaderlessRetryAfterTheCallerGaveUp(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{AbortOnDisconnect: true})
	cfg := baseConfig(up.URL)
	cfg.Admission.Concurrency = 1
	cfg.Retries.Budget = retrybudget.Config{MinPerSecond: 1e6, MaxTokens: 10}
	cfg.Retries.PerTenant = cfg.Retries.Budget
	g, gw := startGateway(t, cfg)
	queued := func() (n int) {
		for _, d := range g.Gate().Stats().Depth {
			n += d
		}
		return n
	}
	blockCtx, unblock := context.WithCancel(t.Context())
	defer unblock()
	go func() {
		req, _ := http.NewRequestWithContext(blockCtx, http.MethodPost, gw.URL+"/v1/chat/completions",
			strings.NewReader(promptBody(-1)))
		req.Header.Set(mockllm.HeaderLatencyMs, "60000")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			readAll(t, resp)
		}
	}()
	testkit.Eventually(t, "the slot taken", func() bool { return g.Gate().Stats().InFlight == 1 })

	impatient := &http.Client{Timeout: 300 * time.Millisecond}
	if _, err := impatient.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody)); err == nil {
		t.Fatal("the queued request answered before the client's timeout")
	}
	testkit.Eventually(t, "the abandoned request withdrawn", func() bool { return queued() == 0 })
	unblock()
	testkit.Eventually(t, "the slot free", func() bool { return g.Gate().Stats().InFlight == 0 })

	resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("the retry: %d", resp.StatusCode)
	}
	if n := recognised(t, g, "fingerprint"); n != 1 {
		t.Fatalf("sluice_retries_recognised_total{how=fingerprint} %v, want 1", n)
	}
	if n := counter(t, g, "admissions", admission.ClassInteractive, contract.AnonymousTenant, "retry"); n != 1 {
		t.Fatalf("admissions{attempt=retry} %v, want 1", n)
	}
}

// TestADeclaredFirstAttemptIsBelieved: the official SDK declares every
// attempt (X-Stainless-Retry-Count), and a declared first attempt is a
// first attempt — even when it repeats, byte for byte, a call the gateway
// refused a moment ago, as a popular prompt sent by many callers does.
// Recognition is for callers that declare nothing: were it to override
// the header, one refusal of a popular prompt under overload would make
// every later copy a retry (the storm of issue 21).
func TestADeclaredFirstAttemptIsBelieved(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Admission.Concurrency, cfg.Admission.MaxQueue = 1, new(0)
	cfg.Retries.Budget = retrybudget.Config{MinPerSecond: 1e6, MaxTokens: 10}
	cfg.Retries.PerTenant = cfg.Retries.Budget
	g, gw := startGateway(t, cfg)
	var sent []string // X-Stainless-Retry-Count of each attempt, as sent
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			sent = append(sent, r.Header.Get(contract.HeaderStainlessRetryCount))
			return next(r)
		}))
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Summarise the incident")},
	}
	hold, err := g.Gate().TryAcquire(admission.Request{}) // the one slot, taken
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *openai.Error
	if _, err := client.Chat.Completions.New(t.Context(), params); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with the slot taken and no queue: %v, want a 503", err)
	}
	hold.Drop()
	// Another caller, or the application's own loop: the same call again.
	if _, err := client.Chat.Completions.New(t.Context(), params); err != nil {
		t.Fatalf("the same call again: %v", err)
	}
	t.Logf("X-Stainless-Retry-Count sent: %q", sent)
	if len(sent) != 2 || sent[0] != sent[1] || (sent[1] != "" && sent[1] != "0") {
		t.Fatalf("the SDK sent X-Stainless-Retry-Count %q: the test means two first attempts by the SDK's count", sent)
	}
	if n := recognised(t, g, "fingerprint"); n != 0 {
		t.Fatalf("sluice_retries_recognised_total{how=fingerprint} %v, want 0", n)
	}
	if n := counter(t, g, "admissions", admission.ClassInteractive, contract.AnonymousTenant, "first"); n != 1 {
		t.Fatalf("admissions{attempt=first} %v, want 1", n)
	}
}
