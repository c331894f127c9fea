package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// An Exchange is a response writer that keeps what the gateway answered
// (the gateway's exchange, for its access-log line). The error writers
// below note on it the code of every error they write, and write in
// Anthropic's shape when it says the caller speaks Anthropic's API. A
// writer that is not one is answered in OpenAI's shape, with nothing
// noted.
type Exchange interface {
	// NoteError records the code of an error the gateway answered with
	// itself.
	NoteError(code string)
	// SpeaksAnthropic says the request came on Anthropic's API.
	SpeaksAnthropic() bool
}

// WriteError writes an OpenAI-style JSON error (contract.ErrorBody).
func WriteError(w http.ResponseWriter, status int, typ, code, msg string) {
	WriteJSONError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg, Type: typ, Code: code}})
}

// WriteJSONError writes body, in Anthropic's shape when the request came
// on Anthropic's API (see Exchange and anthropicError): every answer of
// the gateway's own, refusals included, reaches the caller in the shape
// its SDK reads.
func WriteJSONError(w http.ResponseWriter, status int, body contract.ErrorBody) {
	x, _ := w.(Exchange)
	if x != nil {
		x.NoteError(body.Error.Code) // for the access log
	}
	if x != nil && x.SpeaksAnthropic() {
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

// WriteRejection writes a refusal with every header of the contract.
func WriteRejection(w http.ResponseWriter, rej *admission.Rejection) {
	writeRejection(w, rej, explain(rej.Reason))
}

// WriteSaturated writes the refusal of a call shed because the gateway's
// own CPU is saturated (package saturation): a queue_full, the queue being
// the work waiting for the gateway's cores, whose message says so; delay
// is the scheduling delay measured, target the one it is held to.
func WriteSaturated(w http.ResponseWriter, rej *admission.Rejection, delay, target time.Duration) {
	writeRejection(w, rej, fmt.Sprintf("the gateway's own CPU is saturated (scheduling delay %s, held to %s)",
		delay.Round(100*time.Microsecond), target))
}

func writeRejection(w http.ResponseWriter, rej *admission.Rejection, why string) {
	status, typ := rejectionStatus(rej.Reason)
	retryMs := contract.RetryAfterMs(rej.RetryAfter)
	waitMs := int64(0)
	if rej.EstimatedWait > 0 {
		waitMs = contract.RetryAfterMs(rej.EstimatedWait)
	}
	h := w.Header()
	h.Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(rej.RetryAfter), 10))
	h.Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	h.Set(contract.HeaderReason, rej.Reason.String())
	h.Set(contract.HeaderEstimatedWaitMs, strconv.FormatInt(waitMs, 10))
	WriteJSONError(w, status, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("sluice refused the request (%s): %s; estimated wait %d ms; retry after %d ms",
			rej.Reason, why, waitMs, retryMs),
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

// BadRequest is a 4xx answer naming what was wrong: its Status, its error
// Code and its message.
type BadRequest struct {
	Status int
	Code   string
	Msg    string
	// Cause is the error behind the answer, for the log only: never
	// written to the caller (it may name socket addresses or be a Go
	// runtime string). Nil when Msg says everything.
	Cause error
}

func (e *BadRequest) Error() string { return e.Msg }

// Unwrap returns Cause.
func (e *BadRequest) Unwrap() error { return e.Cause }

// BadHeader is a 400 invalid_header naming the header.
func BadHeader(name, format string, args ...any) *BadRequest {
	return &BadRequest{Status: http.StatusBadRequest, Code: "invalid_header",
		Msg: name + ": " + fmt.Sprintf(format, args...)}
}

// WriteBadRequest writes err: a BadRequest with its status and code, any
// other error as a 400 invalid_request.
func WriteBadRequest(w http.ResponseWriter, err error) {
	var br *BadRequest
	if errors.As(err, &br) {
		WriteError(w, br.Status, contract.ErrorTypeInvalidRequest, br.Code, br.Msg)
		return
	}
	WriteError(w, http.StatusBadRequest, contract.ErrorTypeInvalidRequest, "invalid_request", err.Error())
}

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
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
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
