// These tests drive the official OpenAI Go SDK through a Client.

package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/contract"
)

const chatCompletionJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1735732800,"model":"gpt-4o-mini",
"choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],
"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

// newSDK returns the official OpenAI client sending through a Client, set up
// as the package documentation recommends.
func newSDK(t *testing.T, baseURL string, cfg Config) openai.Client {
	t.Helper()
	hc := newTestClient(t, cfg).HTTPClient()
	return openai.NewClient(
		option.WithBaseURL(baseURL+"/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	)
}

var chatParams = openai.ChatCompletionNewParams{
	Model:    openai.ChatModelGPT4oMini,
	Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
}

func TestOpenAISDKRetriesThroughTheTransport(t *testing.T) {
	g := newFakeGateway(t,
		reject(503, "queue_full", "1000", "1", "800"),
		reply{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: chatCompletionJSON},
	)
	synctest.Test(t, func(t *testing.T) {
		sdk := newSDK(t, g.URL, Config{})
		ctx, cancel := context.WithTimeout(WithPriority(t.Context(), "batch"), 30*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := sdk.Chat.Completions.New(ctx, chatParams)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; got != "hello" {
			t.Fatalf("content = %q, want hello", got)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("took %v, want the 1s the gateway asked for", d)
		}
	})
	got := g.requests()
	if len(got) != 2 {
		t.Fatalf("gateway saw %d requests, want 2 (one retry, by the transport)", len(got))
	}
	for i, want := range []struct{ attempt, timeout string }{{"0", "30000"}, {"1", "29000"}} {
		h := got[i].header
		if h.Get(contract.HeaderAttempt) != want.attempt || h.Get(contract.HeaderStainlessRetryCount) != want.attempt {
			t.Errorf("request %d: attempt headers %q / %q, want %q", i, h.Get(contract.HeaderAttempt), h.Get(contract.HeaderStainlessRetryCount), want.attempt)
		}
		if h.Get(contract.HeaderTimeoutMs) != want.timeout || h.Get(contract.HeaderPriority) != "batch" {
			t.Errorf("request %d: %s=%q %s=%q, want %q and batch", i,
				contract.HeaderTimeoutMs, h.Get(contract.HeaderTimeoutMs), contract.HeaderPriority, h.Get(contract.HeaderPriority), want.timeout)
		}
		if h.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("request %d: Authorization %q", i, h.Get("Authorization"))
		}
	}
	if got[0].body == "" || got[0].body != got[1].body {
		t.Errorf("bodies differ or are empty:\n%s\n%s", got[0].body, got[1].body)
	}
}

func TestOpenAISDKSurfacesTheRejection(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_wait", "", "20", "15000"))
	var err error
	synctest.Test(t, func(t *testing.T) {
		sdk := newSDK(t, g.URL, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = sdk.Chat.Completions.New(ctx, chatParams)
	})
	var rej *RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("SDK error %v (%T) does not wrap a *RejectedError", err, err)
	}
	if rej.StatusCode != http.StatusServiceUnavailable || rej.Reason != "queue_wait" ||
		rej.RetryAfter != 20*time.Second || rej.EstimatedWait != 15*time.Second || rej.GaveUp != GaveUpDeadline {
		t.Fatalf("rejection = %+v", rej)
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("gateway saw %d requests, want 1", n)
	}
}
