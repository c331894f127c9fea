package gateway

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

func TestProxiesAndStampsTheContractHeaders(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 10 * time.Millisecond})
	_, gw := startGateway(t, baseConfig(up.URL))
	resp := post(t, t.Context(), gw.URL, chatBody, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if resp.Header.Get(contract.HeaderModel) != "gpt-4o-mini" {
		t.Errorf("%s = %q", contract.HeaderModel, resp.Header.Get(contract.HeaderModel))
	}
	if _, err := strconv.Atoi(resp.Header.Get(contract.HeaderQueueMs)); err != nil {
		t.Errorf("%s = %q", contract.HeaderQueueMs, resp.Header.Get(contract.HeaderQueueMs))
	}
	if !strings.Contains(string(body), `"usage"`) {
		t.Errorf("body has no usage: %s", body)
	}
	if st := mock.Stats(); st.Delivered != 1 {
		t.Errorf("mock delivered %d", st.Delivered)
	}
}

// TestRewritesCredentialsAndStripsSluiceHeaders uses a plain recording
// upstream: what matters is exactly what reaches the provider.
func TestRewritesCredentialsAndStripsSluiceHeaders(t *testing.T) {
	var mu sync.Mutex
	var seen http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer up.Close()
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{{Name: "acme", APIKeysSHA256: []string{HashKey("sk-tenant-acme")}}}
	_, gw := startGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{
		"Authorization": "Bearer sk-tenant-acme", contract.HeaderPriority: "batch", contract.HeaderTimeoutMs: "5000", contract.HeaderAttempt: "0",
	})
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := seen.Get("Authorization"); got != "Bearer sk-provider-secret" {
		t.Errorf("upstream Authorization = %q, want the provider key", got)
	}
	for _, h := range []string{contract.HeaderPriority, contract.HeaderTimeoutMs, contract.HeaderAttempt} {
		if seen.Get(h) != "" {
			t.Errorf("%s reached the provider", h)
		}
	}
}

func TestTenantKeys(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", Tier: "high", APIKeysSHA256: []string{HashKey("key-a")}},
		{Name: "cheap", Tier: "low", APIKeysSHA256: []string{HashKey("key-c1"), strings.ToUpper(HashKey("key-c2"))}},
	}
	g, gw := startGateway(t, cfg)
	for _, tc := range []struct {
		auth   string
		status int
	}{
		{"Bearer key-a", 200}, {"Bearer key-c2", 200}, {"bearer key-c1", 200},
		{"", 401}, {"Bearer nope", 401}, {"Basic a2V5LWE=", 401},
	} {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"Authorization": tc.auth})
		b := readAll(t, resp)
		if resp.StatusCode != tc.status {
			t.Errorf("Authorization %q: status %d, want %d (%s)", tc.auth, resp.StatusCode, tc.status, b)
		}
		if tc.status == 401 && decodeError(t, b).Code != "invalid_api_key" {
			t.Errorf("401 body %s", b)
		}
	}
	if n := counter(t, g, "admissions", "interactive", "cheap", "first"); n != 2 {
		t.Errorf("cheap admissions %v, want 2", n)
	}
	// Tiers map to ranks: low-tier interactive is rank 2, high-tier 5.
	for key, want := range map[string]int{"key-a": 5, "key-c1": 2} {
		req, _ := http.NewRequest("GET", gw.URL+contract.EstimatePath+"?priority=interactive&timeout_ms=1000", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var est contract.Estimate
		decodeJSON(t, resp, &est)
		if est.Rank != want {
			t.Errorf("%s: rank %d, want %d", key, est.Rank, want)
		}
	}
}

// TestOverloadRefusesEarlyAndHonestly: a burst far beyond capacity. The
// gateway answers every request: successes inside their deadline, the rest
// refused at once with 503, Retry-After, the reason and the estimated wait —
// never a request left to time out in a queue.
func TestOverloadRefusesEarlyAndHonestly(t *testing.T) {
	const service = 100 * time.Millisecond
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: service})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 2, MaxQueue: new(8), InitialServiceTime: config.Duration(service)}
	_, gw := startGateway(t, cfg)

	const n = 40
	const budget = 600 * time.Millisecond
	type result struct {
		status  int
		hdr     http.Header
		body    []byte
		elapsed time.Duration
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			// Each its own prompt: copies of one refused a moment ago would be retries (seen.go).
			resp := post(t, t.Context(), gw.URL, promptBody(i), map[string]string{contract.HeaderTimeoutMs: strconv.Itoa(int(budget.Milliseconds()))})
			b := readAll(t, resp)
			results[i] = result{resp.StatusCode, resp.Header, b, time.Since(start)}
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, r := range results {
		switch r.status {
		case 200:
			ok++
			if r.elapsed > budget {
				t.Errorf("a success took %v, past its %v budget", r.elapsed, budget)
			}
		case 503:
			refused++
			reason := r.hdr.Get(contract.HeaderReason)
			if reason != "queue_wait" && reason != "queue_full" {
				t.Errorf("503 reason %q", reason)
			}
			ra, err := strconv.Atoi(r.hdr.Get("Retry-After"))
			if err != nil || ra < 1 {
				t.Errorf("Retry-After %q", r.hdr.Get("Retry-After"))
			}
			ms, err := strconv.Atoi(r.hdr.Get(contract.HeaderRetryAfterMs))
			if err != nil || ms < 1 {
				t.Errorf("retry-after-ms %q", r.hdr.Get(contract.HeaderRetryAfterMs))
			}
			if _, err := strconv.Atoi(r.hdr.Get(contract.HeaderEstimatedWaitMs)); err != nil {
				t.Errorf("%s %q", contract.HeaderEstimatedWaitMs, r.hdr.Get(contract.HeaderEstimatedWaitMs))
			}
			e := decodeError(t, r.body)
			if e.Code != reason || e.RetryAfterMs == nil || *e.RetryAfterMs != int64(ms) || e.EstimatedWaitMs == nil {
				t.Errorf("error body %s does not repeat the headers", r.body)
			}
			if r.elapsed > budget/2 {
				t.Errorf("a refusal took %v: refusals must come early, not at the deadline", r.elapsed)
			}
		default:
			t.Errorf("status %d: %s", r.status, r.body)
		}
	}
	// Capacity is 2 slots × 600ms / 100ms = 12 calls inside the budget.
	if ok < 8 || refused < n-14 {
		t.Errorf("%d successes, %d refusals of %d", ok, refused, n)
	}
	st := mock.Stats()
	if st.Wasted != 0 {
		t.Errorf("the provider did %d calls nobody received", st.Wasted)
	}
	t.Logf("%d ok, %d refused; provider started %d, delivered %d", ok, refused, st.Started, st.Delivered)
}

// TestSpeculativeIsShedBeforeInteractive: the queue is full of speculative
// work when interactive requests arrive; speculative is evicted, interactive
// served.
func TestSpeculativeIsShedBeforeInteractive(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 300 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(3)}
	g, gw := startGateway(t, cfg)

	type res struct {
		class  string
		status int
		reason string
	}
	out := make(chan res, 10)
	send := func(class string) {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderPriority: class, contract.HeaderTimeoutMs: "20000"})
		readAll(t, resp)
		out <- res{class, resp.StatusCode, resp.Header.Get(contract.HeaderReason)}
	}
	go send("interactive") // takes the slot
	testkit.Eventually(t, "the first call in flight", func() bool { return g.Gate().Stats().InFlight == 1 })
	for range 3 {
		go send("speculative")
	}
	testkit.Eventually(t, "speculative work queued", func() bool { return g.Gate().Stats().Queued == 3 })
	for range 3 {
		go send("interactive")
	}
	got := map[string][]res{}
	for range 7 {
		r := <-out
		got[r.class] = append(got[r.class], r)
	}
	for _, r := range got["interactive"] {
		if r.status != 200 {
			t.Errorf("interactive got %d %s", r.status, r.reason)
		}
	}
	for _, r := range got["speculative"] {
		if r.status != 503 || r.reason != "evicted" {
			t.Errorf("speculative got %d %s, want 503 evicted", r.status, r.reason)
		}
	}
	if n := counter(t, g, "rejections", "evicted", "speculative", contract.AnonymousTenant); n != 3 {
		t.Errorf("evicted speculative rejections counted %v", n)
	}
}

// TestDisconnectCancelsTheUpstreamCall: the caller leaves mid-call; the
// gateway cancels the provider call and frees the slot.
func TestDisconnectCancelsTheUpstreamCall(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 20 * time.Second, AbortOnDisconnect: true})
	g, gw := startGateway(t, baseConfig(up.URL))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	testkit.Eventually(t, "the call in service upstream", func() bool { return mock.Stats().InService == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	testkit.Eventually(t, "the upstream call aborted", func() bool { return mock.Stats().Aborted == 1 })
	testkit.Eventually(t, "the slot released", func() bool { return g.Gate().Stats().InFlight == 0 })
}

// TestDeadlineCancelsTheUpstreamCall: the caller's budget ends mid-call; the
// gateway answers 504 at the deadline and cancels the provider call.
func TestDeadlineCancelsTheUpstreamCall(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 20 * time.Second, AbortOnDisconnect: true})
	g, gw := startGateway(t, baseConfig(up.URL))
	start := time.Now()
	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderTimeoutMs: "300"})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusGatewayTimeout || decodeError(t, b).Code != "deadline_exceeded" {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("answered after %v", el)
	}
	testkit.Eventually(t, "the upstream call aborted", func() bool { return mock.Stats().Aborted == 1 })
	if st := g.Gate().Stats(); st.InFlight != 0 {
		t.Fatalf("slot not released: %+v", st)
	}
}

// TestStreamArrivesIncrementallyAndHoldsTheSlot: SSE chunks reach the caller
// as the provider produces them, and the slot is held until the stream ends.
func TestStreamArrivesIncrementallyAndHoldsTheSlot(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 800 * time.Millisecond})
	g, gw := startGateway(t, baseConfig(up.URL))
	start := time.Now()
	resp := post(t, t.Context(), gw.URL, `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var first, last time.Duration
	chunks := 0
	sawUsage := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if chunks == 0 {
			first = time.Since(start)
			if n := g.Gate().Stats().InFlight; n != 1 {
				t.Errorf("in flight %d while the stream runs, want 1", n)
			}
		}
		chunks++
		if strings.Contains(line, `"usage"`) && strings.Contains(line, `"completion_tokens"`) {
			sawUsage = true
		}
		last = time.Since(start)
	}
	if chunks < 5 || !sawUsage {
		t.Fatalf("%d chunks, usage %v", chunks, sawUsage)
	}
	if first > last/2 {
		t.Fatalf("first chunk after %v, last after %v: the stream was buffered", first, last)
	}
	testkit.Eventually(t, "the slot released after the stream", func() bool { return g.Gate().Stats().InFlight == 0 })
}

// TestOpenAISDKThroughTheGateway: the official SDK works for plain and
// streaming calls, and its own retries are seen as retries.
func TestOpenAISDKThroughTheGateway(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 20 * time.Millisecond})
	g, gw := startGateway(t, baseConfig(up.URL))
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"))
	params := openai.ChatCompletionNewParams{
		Model:     "gpt-4o-mini",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hi")},
		MaxTokens: openai.Int(8),
	}
	comp, err := client.Chat.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) == 0 || comp.Usage.CompletionTokens != 8 {
		t.Fatalf("completion %+v", comp)
	}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" {
		t.Fatalf("stream accumulated %+v", acc.ChatCompletion)
	}

	if n := counter(t, g, "attempts", "first"); n != 2 {
		t.Fatalf("first attempts counted %v, want 2", n)
	}

	// Retries: with the only slot taken and no waiting room, each attempt is
	// refused; the SDK retries (honouring retry-after-ms) and the gateway
	// counts those attempts as retries.
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(0), InitialServiceTime: config.Duration(20 * time.Millisecond)}
	g, gw = startGateway(t, cfg)
	client = openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"))
	hold, err := g.Gate().TryAcquire(admission.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Drop()
	before := counter(t, g, "attempts", "retry")
	_, err = client.Chat.Completions.New(t.Context(), params, option.WithMaxRetries(2))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("want a 503 from the SDK, got %v", err)
	}
	if got := counter(t, g, "attempts", "retry") - before; got != 2 {
		t.Fatalf("gateway saw %v retries, want the SDK's 2", got)
	}
}

// TestSDKTimeoutIsTheDeadline: an unmodified SDK call with a 1 s timeout,
// behind a 3 s estimated wait, is refused at once (queue_wait) instead of
// being held until the SDK gives up on it.
func TestSDKTimeoutIsTheDeadline(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 20 * time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(16), InitialServiceTime: config.Duration(3 * time.Second)}
	g, gw := startGateway(t, cfg)
	hold, err := g.Gate().TryAcquire(admission.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Drop()
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hi")},
	}
	start := time.Now()
	_, err = client.Chat.Completions.New(t.Context(), params, option.WithRequestTimeout(time.Second))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Response.Header.Get(contract.HeaderReason) != contract.ReasonQueueWait {
		t.Fatalf("want a 503 queue_wait, got %v", err)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Fatalf("the refusal took %v: the call was held", waited)
	}
	// Without the SDK's timeout the class default (30 s) applies: queued.
	// Another prompt: the same one, refused a moment ago, would be its
	// retry (seen.go), and the retry budget has nothing yet.
	params.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = client.Chat.Completions.New(ctx, params)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("without a timeout the call should have queued until the test's own deadline; got %v", err)
	}
}

func TestSDKTimeoutParsing(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"600", 600 * time.Second, true}, {"1", time.Second, true}, {"600.0", 600 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true}, {" 2 ", 2 * time.Second, true},
		{"0", 0, false}, {"", 0, false}, {"-1", 0, false}, {"1e3", 0, false}, {"abc", 0, false},
		{"1.", time.Second, true}, {".5", 0, false}, {"99999999999", 0, false},
	} {
		got, ok := sdkTimeout(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("sdkTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
