package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// writeError writes an OpenAI-style JSON error (contract.ErrorBody).
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSONError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg, Type: typ, Code: code}})
}

// writeJSONError writes body, in Anthropic's shape when the request came
// on Anthropic's API (see anthropicError): every answer of the gateway's
// own, refusals included, reaches the caller in the shape its SDK reads.
func writeJSONError(w http.ResponseWriter, status int, body contract.ErrorBody) {
	noteError(w, body.Error.Code) // for the access log (accesslog.go)
	if x := exchangeOf(w); x != nil && x.anthropic {
		writeAnthropicBody(w, status, anthropicError(status, body.Error))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// rejectionStatus is the status and error type of a refusal for r: the
// caller's own limits are 429, overload is 503 (contract.ReasonStatus). A
// Reason outside the contract is a bug in the layers above the gate, and
// is answered as overload, which asks the caller to back off, rather than
// as a success or a client error.
func rejectionStatus(r admission.Reason) (int, string) {
	if status, typ, ok := contract.ReasonStatus(r.String()); ok {
		return status, typ
	}
	return http.StatusServiceUnavailable, contract.ErrorTypeOverloaded
}

// ceilMs is d in whole milliseconds, rounded up, at least 1.
func ceilMs(d time.Duration) int64 {
	return max(1, int64(math.Ceil(float64(d)/float64(time.Millisecond))))
}

// ceilSeconds is d in whole seconds, rounded up, at least 1: Retry-After
// has no fractions, and a zero would invite the immediate retry it exists to
// prevent.
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// writeRejection writes a refusal with every header of the contract.
func writeRejection(w http.ResponseWriter, rej *admission.Rejection) {
	status, typ := rejectionStatus(rej.Reason)
	retryMs := ceilMs(rej.RetryAfter)
	waitMs := int64(0)
	if rej.EstimatedWait > 0 {
		waitMs = ceilMs(rej.EstimatedWait)
	}
	h := w.Header()
	h.Set(contract.HeaderRetryAfter, strconv.FormatInt(ceilSeconds(rej.RetryAfter), 10))
	h.Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	h.Set(contract.HeaderReason, rej.Reason.String())
	h.Set(contract.HeaderEstimatedWaitMs, strconv.FormatInt(waitMs, 10))
	writeJSONError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("sluice refused the request (%s): %s; estimated wait %d ms; retry after %d ms",
			rej.Reason, explain(rej.Reason), waitMs, retryMs),
		Type:            typ,
		Code:            rej.Reason.String(),
		Reason:          rej.Reason.String(),
		EstimatedWaitMs: &waitMs,
		RetryAfterMs:    &retryMs,
	}})
}

func explain(r admission.Reason) string {
	switch r {
	case admission.ReasonQueueWait:
		return "the estimated wait plus the expected service time exceeds the request's deadline"
	case admission.ReasonQueueFull:
		return "the queue is at its bound"
	case admission.ReasonEvicted:
		return "displaced from the queue by higher-priority work"
	case admission.ReasonExpired:
		return "the deadline passed before the request could be served"
	case admission.ReasonRetryBudget:
		return "retries are over their budget"
	case admission.ReasonTenantBudget:
		return "the tenant's spend budget is exhausted"
	case admission.ReasonSpendCeiling:
		return "the spend ceiling is reached"
	case admission.ReasonDraining:
		return "the gateway is shutting down"
	}
	return "refused"
}

// badRequest is a 4xx answer naming what was wrong.
type badRequest struct {
	status int
	code   string
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func badHeader(name, format string, args ...any) *badRequest {
	return &badRequest{status: http.StatusBadRequest, code: "invalid_header",
		msg: name + ": " + fmt.Sprintf(format, args...)}
}

func writeBadRequest(w http.ResponseWriter, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		writeError(w, br.status, contract.ErrorTypeInvalidRequest, br.code, br.msg)
		return
	}
	writeError(w, http.StatusBadRequest, contract.ErrorTypeInvalidRequest, "invalid_request", err.Error())
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// anthropicErrorBody is Anthropic's error shape:
// {"type":"error","error":{"type","message"}}. On a refusal, the error also
// repeats the contract's reason, estimated wait and retry delay, as the
// OpenAI-shaped body does; Anthropic's SDKs ignore fields they do not know.
type anthropicErrorBody struct {
	Type  string              `json:"type"`
	Error anthropicErrorInner `json:"error"`
}

type anthropicErrorInner struct {
	Type            string `json:"type"`
	Message         string `json:"message"`
	Reason          string `json:"reason,omitempty"`
	EstimatedWaitMs *int64 `json:"estimated_wait_ms,omitempty"`
	RetryAfterMs    *int64 `json:"retry_after_ms,omitempty"`
}

// anthropicErrorType is the error type Anthropic gives a status: a refusal
// for the caller's own limits (429) is a rate_limit_error, one for
// overload (503) an overloaded_error, as Anthropic's own 429s and 529s.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestHeaderFieldsTooLarge,
		http.StatusUnprocessableEntity, http.StatusUnsupportedMediaType:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusConflict:
		return "conflict_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anthropicError turns the gateway's error into Anthropic's shape. The
// code, which Anthropic's shape has no place for, leads the message.
func anthropicError(status int, d contract.ErrorDetail) anthropicErrorBody {
	msg := d.Message
	if d.Code != "" && d.Reason == "" {
		msg = d.Code + ": " + msg
	}
	return anthropicErrorBody{Type: "error", Error: anthropicErrorInner{
		Type: anthropicErrorType(status), Message: msg,
		Reason: d.Reason, EstimatedWaitMs: d.EstimatedWaitMs, RetryAfterMs: d.RetryAfterMs,
	}}
}

func writeAnthropicBody(w http.ResponseWriter, status int, body anthropicErrorBody) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
