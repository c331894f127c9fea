package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// Estimate is the gateway's answer to "what if I sent a request now?".
//
// On the wire it is a contract.Estimate, whose durations are whole
// milliseconds; Estimate holds them as time.Duration. Unknown fields are
// ignored, so the gateway may add to it.
type Estimate struct {
	// Priority is the class the estimate is for, after the gateway's default.
	Priority string
	// Rank is the class's shedding rank: higher is served first and shed last.
	Rank int
	// EstimatedWait is how long a request of this class would queue.
	EstimatedWait time.Duration
	// ServiceP50 and ServiceP95 are the recent service-time percentiles.
	ServiceP50, ServiceP95 time.Duration
	// Admit reports whether a request with the given timeout would be admitted.
	Admit bool
	// Reason is the rejection reason (queue_wait, ...) when Admit is false.
	Reason string
	// RetryAfter is when trying again has a chance, when Admit is false.
	RetryAfter time.Duration
	// QueueDepth is the number of requests queued, when the gateway shows
	// it — only on its admin listener, since it shows every tenant's load —
	// and zero otherwise.
	QueueDepth int
	// Mode is the queue's current order: "fifo", or "lifo" under overload.
	Mode string
	// ModelCalled is the cheaper model the request would be degraded to by
	// the gateway's spend ladder; empty when it would not be.
	ModelCalled string
}

// EstimateQuery describes the request an estimate is asked about. Every
// field is optional.
type EstimateQuery struct {
	// Priority is the class; empty means the gateway's default.
	Priority string
	// Timeout is the time budget; zero means the class's default timeout.
	Timeout time.Duration
	// Attempt is 0 for a first attempt, N for the Nth retry: a retry is
	// ranked as one and must be paid for from the retry budgets.
	Attempt int
	// Model is the model to call: the gateway prices the call with it and
	// says whether its ladder would degrade it. Empty asks about the
	// budgets without pricing.
	Model string
	// InputTokens estimates the prompt's size and MaxTokens is its
	// max_tokens; zero means unknown.
	InputTokens, MaxTokens int64
	// Endpoint is the path the request would be sent to, such as
	// "/v1/embeddings"; empty means chat completions. With the model, the
	// caller and the token counts, it is what the gateway estimates the
	// call's service time by.
	Endpoint string
}

// maxEstimateBody bounds the estimate response read; the real one is ~200 bytes.
const maxEstimateBody = 1 << 20

// Estimate asks the gateway at Config.BaseURL how long a request of priority
// would wait and whether one with the given timeout would be admitted.
// An empty priority means the gateway's default class; a zero timeout means
// the class's default timeout. The query is sent once through Config.Base,
// without retries, throttling or the retry budget: it is cheap, and a caller
// asking is deciding whether to send at all.
func (c *Client) Estimate(ctx context.Context, priority string, timeout time.Duration) (Estimate, error) {
	return c.EstimateFor(ctx, EstimateQuery{Priority: priority, Timeout: timeout})
}

// EstimateFor asks the gateway what a request described by q would get if
// it were sent now: the gateway asks every rule — the tenant's classes,
// the retry budgets, the spend ceiling and the tenant's budget, the model
// ladder, the queue — and takes nothing. It is sent like Estimate.
func (c *Client) EstimateFor(ctx context.Context, eq EstimateQuery) (Estimate, error) {
	if c.cfg.BaseURL == "" {
		return Estimate{}, fmt.Errorf("client: Estimate needs Config.BaseURL, which is empty")
	}
	q := url.Values{}
	if eq.Priority != "" {
		if err := checkPriority(eq.Priority); err != nil {
			return Estimate{}, fmt.Errorf("client: Estimate priority: %w", err)
		}
		q.Set("priority", eq.Priority)
	}
	switch {
	case eq.Timeout < 0:
		return Estimate{}, fmt.Errorf("client: Estimate timeout must not be negative, got %v", eq.Timeout)
	case eq.Timeout > 0:
		q.Set("timeout_ms", strconv.FormatInt(timeoutMs(eq.Timeout), 10))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"attempt", int64(eq.Attempt)}, {"input_tokens", eq.InputTokens}, {"max_tokens", eq.MaxTokens}} {
		switch {
		case f.v < 0:
			return Estimate{}, fmt.Errorf("client: Estimate %s must not be negative, got %d", f.name, f.v)
		case f.v > 0:
			q.Set(f.name, strconv.FormatInt(f.v, 10))
		}
	}
	if eq.Model != "" {
		q.Set("model", eq.Model)
	}
	if eq.Endpoint != "" {
		if !strings.HasPrefix(eq.Endpoint, "/") {
			return Estimate{}, fmt.Errorf("client: Estimate endpoint must be a path such as /v1/chat/completions, got %q", eq.Endpoint)
		}
		q.Set("endpoint", eq.Endpoint)
	}
	u, err := url.JoinPath(c.cfg.BaseURL, contract.EstimatePath)
	if err != nil {
		return Estimate{}, fmt.Errorf("client: Estimate URL: %w", err)
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Estimate{}, fmt.Errorf("client: Estimate: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.APIKey != "" {
		req.Header.Set(contract.HeaderAuthorization, "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.Base.RoundTrip(req)
	if err != nil {
		return Estimate{}, fmt.Errorf("client: Estimate: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxEstimateBody))
	if err != nil {
		return Estimate{}, fmt.Errorf("client: Estimate: reading the response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Estimate{}, fmt.Errorf("client: Estimate: %s answered %s: %.200s", u, resp.Status, body)
	}
	var w contract.Estimate
	if err := json.Unmarshal(body, &w); err != nil {
		return Estimate{}, fmt.Errorf("client: Estimate: decoding the response from %s: %w", u, err)
	}
	// Durations must be representable; a negative wait or depth is a broken
	// gateway, and passing it on would only move the confusion downstream.
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"estimated_wait_ms", w.EstimatedWaitMs}, {"service_p50_ms", w.ServiceP50Ms},
		{"service_p95_ms", w.ServiceP95Ms}, {"retry_after_ms", w.RetryAfterMs},
	} {
		if f.v < 0 || f.v > math.MaxInt64/int64(time.Millisecond) {
			return Estimate{}, fmt.Errorf("client: Estimate: field %s is out of range (%d) in the response from %s", f.name, f.v, u)
		}
	}
	return Estimate{
		Priority:      w.Priority,
		Rank:          w.Rank,
		EstimatedWait: time.Duration(w.EstimatedWaitMs) * time.Millisecond,
		ServiceP50:    time.Duration(w.ServiceP50Ms) * time.Millisecond,
		ServiceP95:    time.Duration(w.ServiceP95Ms) * time.Millisecond,
		Admit:         w.Admit,
		Reason:        w.Reason,
		RetryAfter:    time.Duration(w.RetryAfterMs) * time.Millisecond,
		QueueDepth:    depth(w.QueueDepth),
		Mode:          w.Mode,
		ModelCalled:   w.ModelCalled,
	}, nil
}

// depth reads the optional queue depth; a negative one is a broken gateway,
// read as none.
func depth(p *int) int {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}
