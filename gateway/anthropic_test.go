package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/shared"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/spend"
)

const haiku = "claude-3-5-haiku"

// anthropicGateway is a gateway with two tenants in front of the mock,
// keeping books for Anthropic's model, with one slot and no queue so that a
// held call makes the next one a refusal.
func anthropicGateway(t *testing.T) (*Gateway, string, *mockllm.Server) {
	t.Helper()
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Admission.Concurrency, cfg.Admission.MaxQueue = 1, new(0)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Upstream.AuthHeader = "x-api-key"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{HashKey("key-acme")}},
		{Name: "poor", APIKeysSHA256: []string{HashKey("key-poor")}},
	}
	cfg.Spend = &spend.Config{
		Prices:  map[string]spend.Price{haiku: {InputPerMTok: 0.8, OutputPerMTok: 4}},
		Tenants: map[string]spend.TenantBudget{"poor": {PerHour: 1e-12}},
	}
	g, gw := startGateway(t, cfg)
	return g, gw.URL, mock
}

// anthropicSDK is the official Anthropic client pointed at the gateway, with its
// own retries off so that each test sees one answer.
func anthropicSDK(url, key string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(url+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func haikuParams(maxTokens int64) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     haiku,
		MaxTokens: maxTokens,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("0123456789abcdef"))},
	}
}

// TestAnthropicSDKThroughTheGateway: the official Anthropic Go SDK, its
// tenant key in x-api-key, gets a plain and a streamed message through the
// gateway, and both calls' usage is on the books: the tenant's spend and
// the token counters.
func TestAnthropicSDKThroughTheGateway(t *testing.T) {
	g, url, _ := anthropicGateway(t)
	client := anthropicSDK(url, "key-acme")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	msg, err := client.Messages.New(ctx, haikuParams(8))
	if err != nil {
		t.Fatalf("plain message: %v", err)
	}
	if msg.Usage.OutputTokens != 8 || msg.Usage.InputTokens != 4 || len(msg.Content) != 1 || msg.Content[0].Text == "" {
		t.Fatalf("plain message: %+v", msg)
	}

	stream := client.Messages.NewStreaming(ctx, haikuParams(5))
	var acc anthropic.Message
	events := 0
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
		events++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if acc.Usage.OutputTokens != 5 || acc.Usage.InputTokens != 4 || acc.Content[0].Text == "" || events < 5 {
		t.Fatalf("streamed message: %d events, %+v", events, acc)
	}

	// Both calls booked: 4+4 input and 8+5 output tokens, priced.
	model := g.metrics.models.label(haiku)
	testkit.Eventually(t, "usage on the books", func() bool {
		tokens := g.metrics.modelTokens(model)
		return testutil.ToFloat64(tokens[0]) == 8 && testutil.ToFloat64(tokens[2]) == 13
	})
	want := (8*0.8 + 13*4) / 1e6
	snap := g.spend.Snapshot(time.Now())
	var acme float64
	for _, s := range snap.Tenants {
		if s.Name == "acme" {
			acme = s.LastHourUSD
		}
	}
	if d := acme - want; d > 1e-12 || d < -1e-12 || snap.Reservations != 0 {
		t.Fatalf("acme's books: %v (reservations %d), want %v", acme, snap.Reservations, want)
	}
}

// TestAnthropicSDKSeesRefusalsAsItsOwnErrors: the gateway's refusals on
// /v1/messages are *anthropic.Error values of the right type and status,
// carrying the contract's headers: overload (503 queue_full) is an
// overloaded_error, the tenant's own limit (429 tenant_budget) a
// rate_limit_error, an unknown key an authentication_error and a path the
// gateway does not forward a not_found_error.
func TestAnthropicSDKSeesRefusalsAsItsOwnErrors(t *testing.T) {
	_, url, mock := anthropicGateway(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	check := func(err error, status int, typ shared.ErrorType, reason string) {
		t.Helper()
		var ae *anthropic.Error
		if !errors.As(err, &ae) {
			t.Fatalf("err %v (%T), want *anthropic.Error", err, err)
		}
		if ae.StatusCode != status || ae.Type() != typ {
			t.Fatalf("status %d type %q, want %d %q: %v", ae.StatusCode, ae.Type(), status, typ, err)
		}
		if !strings.HasPrefix(ae.RawJSON(), `{"type":"error","error":{`) {
			t.Fatalf("body %s, want Anthropic's shape", ae.RawJSON())
		}
		h := ae.Response.Header
		if reason == "" {
			return
		}
		if h.Get(contract.HeaderReason) != reason || h.Get("Retry-After") == "" || h.Get(contract.HeaderRetryAfterMs) == "" ||
			h.Get(contract.HeaderEstimatedWaitMs) == "" || !strings.Contains(ae.RawJSON(), `"reason":"`+reason+`"`) {
			t.Fatalf("refusal headers %v body %s, want reason %s with Retry-After, retry-after-ms and the estimated wait", h, ae.RawJSON(), reason)
		}
	}

	// Hold the one slot with a slow call, then ask again: queue_full.
	held := make(chan error, 1)
	go func() {
		c := anthropicSDK(url, "key-acme")
		_, err := c.Messages.New(ctx, haikuParams(1), option.WithHeader(mockllm.HeaderLatencyMs, "2000"))
		held <- err
	}()
	testkit.Eventually(t, "the slow call in service", func() bool { return mock.Stats().InService == 1 })
	acme := anthropicSDK(url, "key-acme")
	_, err := acme.Messages.New(ctx, haikuParams(1))
	check(err, http.StatusServiceUnavailable, shared.ErrorTypeOverloadedError, "queue_full")
	if err := <-held; err != nil {
		t.Fatalf("the held call: %v", err)
	}

	// The poor tenant's first call spends its budget; the next is refused.
	poor := anthropicSDK(url, "key-poor")
	if _, err := poor.Messages.New(ctx, haikuParams(1)); err != nil {
		t.Fatalf("the poor tenant's first call: %v", err)
	}
	_, err = poor.Messages.New(ctx, haikuParams(1))
	check(err, http.StatusTooManyRequests, shared.ErrorTypeRateLimitError, "tenant_budget")

	nobody := anthropicSDK(url, "key-nobody")
	_, err = nobody.Messages.New(ctx, haikuParams(1))
	check(err, http.StatusUnauthorized, shared.ErrorTypeAuthenticationError, "")

	_, err = acme.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model:    haiku,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	check(err, http.StatusNotFound, shared.ErrorTypeNotFoundError, "")
}

// TestAnthropicSDKThroughAProviderOutage: the mock's outage switch, seen
// through the gateway by the Anthropic SDK: connections reset before any
// answer are the gateway's own 502 in Anthropic's shape (an api_error), the
// provider's 500 reaches the caller as the provider wrote it, and the end
// of the outage brings answers back.
func TestAnthropicSDKThroughAProviderOutage(t *testing.T) {
	_, url, mock := anthropicGateway(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	acme := anthropicSDK(url, "key-acme")

	if err := mock.SetOutage(mockllm.OutageRefuse); err != nil {
		t.Fatal(err)
	}
	_, err := acme.Messages.New(ctx, haikuParams(1))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || ae.Type() != shared.ErrorTypeAPIError ||
		!strings.Contains(ae.RawJSON(), "upstream_") {
		t.Fatalf("refused connections: %v", err)
	}

	// Each call asks for something else: the same body again would be
	// recognised as a retry of the failed call (seen.go).
	if err := mock.SetOutage(mockllm.Outage500); err != nil {
		t.Fatal(err)
	}
	_, err = acme.Messages.New(ctx, haikuParams(2))
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusInternalServerError || ae.Type() != shared.ErrorTypeAPIError ||
		!strings.Contains(ae.Message, "mock outage") {
		t.Fatalf("provider 500s: %v", err)
	}

	if err := mock.SetOutage(mockllm.OutageOff); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Messages.New(ctx, haikuParams(3)); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	if st := mock.Stats(); st.Outage < 2 {
		t.Fatalf("the mock answered %d calls in outage, want at least 2", st.Outage)
	}
}

// TestAnthropicShapeForEveryAnswerOfTheGateway: a malformed header on
// /v1/messages is a 400 invalid_request_error in Anthropic's shape naming
// the header, and the same header on an OpenAI path keeps OpenAI's shape.
func TestAnthropicShapeForEveryAnswerOfTheGateway(t *testing.T) {
	_, url, _ := anthropicGateway(t)
	body := `{"model":"claude-3-5-haiku","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	bad := map[string]string{"x-api-key": "key-acme", contract.HeaderTimeoutMs: "soon"}
	resp := postPath(t, t.Context(), url, "/v1/messages", body, bad)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(string(b), `{"type":"error","error":{"type":"invalid_request_error","message":"invalid_header: `+contract.HeaderTimeoutMs) {
		t.Fatalf("bad header on /v1/messages: %d %s", resp.StatusCode, b)
	}
	resp = postPath(t, t.Context(), url, "/v1/chat/completions", body, bad)
	if e := decodeError(t, readAll(t, resp)); resp.StatusCode != http.StatusBadRequest || e.Code != "invalid_header" {
		t.Fatalf("bad header on chat: %d %+v", resp.StatusCode, e)
	}
}
