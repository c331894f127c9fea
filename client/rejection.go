package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// Reasons a Client gives for refusing a request locally, without the gateway.
// The gateway's own reasons (queue_wait, queue_full, retry_budget, ...) arrive
// in X-Sluice-Reason and are passed through as they are.
const (
	// ReasonClientThrottled: adaptive throttling refused the request.
	ReasonClientThrottled = "client_throttled"
	// ReasonClientRetryBudget: the request was a retry by the layer above
	// (the OpenAI SDK's X-Stainless-Retry-Count, or X-Sluice-Attempt set by
	// the caller), and the retry budget had no token for it.
	ReasonClientRetryBudget = "client_retry_budget"
)

// GiveUp says why a Client stopped retrying.
type GiveUp string

const (
	// GaveUpDeadline: the server's retry delay ends at or after the context's
	// deadline, so a retry could not finish in time.
	GaveUpDeadline GiveUp = "deadline"
	// GaveUpMaxDelay: the server's retry delay exceeds Config.MaxRetryDelay.
	GaveUpMaxDelay GiveUp = "max_retry_delay"
	// GaveUpMaxAttempts: Config.MaxAttempts attempts were sent.
	GaveUpMaxAttempts GiveUp = "max_attempts"
	// GaveUpRetryBudget: the retry budget had no token for a retry.
	GaveUpRetryBudget GiveUp = "retry_budget"
	// GaveUpThrottled: adaptive throttling refused the attempt.
	GaveUpThrottled GiveUp = "throttled"
	// GaveUpBodyNotReplayable: the request body could not be sent again
	// (no GetBody, and larger than the client will buffer).
	GaveUpBodyNotReplayable GiveUp = "body_not_replayable"
)

// RejectedError is returned when a request ends in a rejection: the gateway's
// last 429 or 503, which this client did not or could not retry, or a local
// refusal (StatusCode 0). Find it with errors.As; through the OpenAI SDK or an
// http.Client it arrives wrapped in a *url.Error.
type RejectedError struct {
	// StatusCode is the status of the last response, 429 (the caller's own
	// limit) or 503 (overload); 0 when the request was refused locally and
	// never sent.
	StatusCode int
	// Reason is the gateway's X-Sluice-Reason (queue_wait, queue_full,
	// evicted, expired, retry_budget, tenant_budget, spend_ceiling, draining;
	// empty when a server that is not sluice rejected), or one of the
	// ReasonClient constants for a local refusal.
	Reason string
	// RetryAfter is when the server said trying again has a chance
	// (retry-after-ms, else Retry-After); zero when it did not say.
	RetryAfter time.Duration
	// EstimatedWait is the gateway's X-Sluice-Estimated-Wait-Ms: how long the
	// request would have queued. Zero when not sent.
	EstimatedWait time.Duration
	// Message is the error message of the OpenAI-style JSON body, if any.
	Message string
	// Attempts is how many attempts were sent.
	Attempts int
	// GaveUp is why no further attempt was made.
	GaveUp GiveUp
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	if e.StatusCode == 0 {
		b.WriteString("sluice client: refused locally")
	} else {
		fmt.Fprintf(&b, "sluice client: rejected with %d", e.StatusCode)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", retry after %v", e.RetryAfter)
	}
	if e.EstimatedWait > 0 {
		fmt.Fprintf(&b, ", estimated wait %v", e.EstimatedWait)
	}
	fmt.Fprintf(&b, "; %d attempt(s), gave up: %s", e.Attempts, e.GaveUp)
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// isRejection reports whether a response is one this client may retry.
func isRejection(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}

// maxErrorBody bounds how much of a rejection body is read for its message.
const maxErrorBody = 64 << 10

// rejectionFrom turns a 429/503 response into a RejectedError and closes its
// body. The second result reports whether the server gave a retry delay.
func rejectionFrom(resp *http.Response, now time.Time) (*RejectedError, bool) {
	rej := &RejectedError{
		StatusCode: resp.StatusCode,
		Reason:     resp.Header.Get(contract.HeaderReason),
	}
	ra, hinted := retryAfter(resp.Header, now)
	rej.RetryAfter = ra
	rej.EstimatedWait, _ = serverDelayMs(resp.Header, contract.HeaderEstimatedWaitMs)
	rej.Message = errorMessage(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	return rej, hinted
}

// errorMessage extracts error.message from an OpenAI-style error body
// (contract.ErrorBody); the body is informational, so anything else yields
// "". A field of another type than sluice's (a numeric code, an object
// param, sent by servers that are not sluice) does not hide the message:
// encoding/json decodes the rest and reports only the mismatch.
func errorMessage(r io.Reader) string {
	var body contract.ErrorBody
	var typeErr *json.UnmarshalTypeError
	if err := json.NewDecoder(r).Decode(&body); err != nil && !errors.As(err, &typeErr) {
		return ""
	}
	return body.Error.Message
}
