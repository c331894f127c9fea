package gateway

import (
	"net/http"
	"strconv"
	"strings"
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

// TestHeadroomHeadersReachZeroBeforeTheRefusal: a tenant whose share (two
// slots of four, no waiting room) is the binding limit opens streams one
// after another: each answer's x-ratelimit-remaining-requests counts down
// to 0 on the last one admitted, the next call is refused carrying 0 and a
// reset as long as its Retry-After, and the provider's own rate-limit
// headers (about the key every tenant shares) never reach the caller. The
// official SDK reads the headers as they are.
func TestHeadroomHeadersReachZeroBeforeTheRefusal(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 8, Mode: mockllm.Mode429}) // sends its own x-ratelimit-*
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Admission = config.AdmissionConfig{Concurrency: 4, MaxQueue: new(0), InitialServiceTime: config.Duration(100 * time.Millisecond)}
	cfg.Tenants = []chain.TenantConfig{
		{Name: "web", APIKeysSHA256: []string{HashKey("k-web")}, Share: admission.TenantShare{MaxInFlight: 2}},
		{Name: "other", APIKeysSHA256: []string{HashKey("k-other")}},
	}
	_, gw := startGateway(t, cfg)
	open := func() *http.Response {
		t.Helper()
		resp := post(t, t.Context(), gw.URL, streamBody, map[string]string{"Authorization": "Bearer k-web", mockllm.HeaderLatencyMs: "3000"})
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	remaining := func(resp *http.Response) int {
		t.Helper()
		n, err := strconv.Atoi(resp.Header.Get("X-Ratelimit-Remaining-Requests"))
		if err != nil {
			t.Fatalf("status %d: x-ratelimit-remaining-requests %q", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Requests"))
		}
		return n
	}
	var seen []int
	for i := range 2 {
		resp := open()
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: status %d", i, resp.StatusCode)
		}
		seen = append(seen, remaining(resp))
		if l := resp.Header.Get("X-Ratelimit-Limit-Requests"); l != "2" {
			t.Errorf("call %d: x-ratelimit-limit-requests %q, want 2 (its cap)", i, l)
		}
		if v := resp.Header.Get("X-Ratelimit-Limit-Tokens"); v != "" {
			t.Errorf("call %d: x-ratelimit-limit-tokens %q: no token limit applies, and the provider's must not pass", i, v)
		}
	}
	if seen[0] != 1 || seen[1] != 0 {
		t.Fatalf("remaining on the admitted calls %v, want [1 0]", seen)
	}
	refused := open()
	if refused.StatusCode != http.StatusServiceUnavailable && refused.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third call: status %d, want a refusal", refused.StatusCode)
	}
	ra, _ := strconv.Atoi(refused.Header.Get("Retry-After"))
	reset, err := time.ParseDuration(refused.Header.Get("X-Ratelimit-Reset-Requests"))
	if remaining(refused) != 0 || err != nil || reset <= 0 || reset > time.Duration(ra)*time.Second {
		t.Errorf("refusal: remaining %q, reset %q, Retry-After %q: want 0, and a reset within the Retry-After",
			refused.Header.Get("X-Ratelimit-Remaining-Requests"), refused.Header.Get("X-Ratelimit-Reset-Requests"), refused.Header.Get("Retry-After"))
	}

	// Another tenant, through the SDK: its own room, whole (four slots,
	// two taken by web: two free).
	var raw *http.Response
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("k-other"), option.WithMaxRetries(0))
	_, err = client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header.Get("x-ratelimit-remaining-requests"); got != "1" || raw.Header.Get("x-ratelimit-limit-requests") != "2" {
		t.Errorf("SDK: x-ratelimit-limit-requests %q remaining %q, want 2 and 1 (two free slots, one its own call)",
			raw.Header.Get("x-ratelimit-limit-requests"), got)
	}
	for k := range raw.Header {
		if strings.HasPrefix(k, "X-Ratelimit-") && !strings.HasSuffix(k, "-Requests") {
			t.Errorf("SDK: %s passed through", k)
		}
	}
	_ = contract.HeaderReason
}
