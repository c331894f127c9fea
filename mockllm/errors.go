package mockllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// dialect is the error and event vocabulary of an endpoint: OpenAI's for
// everything but Anthropic's /v1/messages.
type dialect int

const (
	openAI dialect = iota
	anthropic
)

// apiError is an error answer. param names the offending field or header,
// so that a bad request always says what was wrong with it.
type apiError struct {
	status int
	code   string // OpenAI "code"; empty means null
	param  string // empty means null
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// badRequest is a 400 naming the field (or header) at fault.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, param: param, msg: param + ": " + fmt.Sprintf(format, args...)}
}

func errServerClosed() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, msg: "The mock provider is shutting down."}
}

// asAPIError turns any error from parsing into an answer; errors that are
// not already *apiError are client mistakes in the body.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return &apiError{status: http.StatusBadRequest, msg: err.Error()}
}

// openAIType is the "type" OpenAI gives to an error of a status.
func openAIType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// anthropicType is the error "type" Anthropic gives to a status.
func anthropicType(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// errorBody is the JSON body of an error in the dialect: OpenAI's
// {"error":{"message","type","param","code"}} or Anthropic's
// {"type":"error","error":{"type","message"}}.
func errorBody(d dialect, e *apiError) any {
	if d == anthropic {
		return map[string]any{
			"type":  "error",
			"error": map[string]any{"type": anthropicType(e.status), "message": e.msg},
		}
	}
	return map[string]any{"error": map[string]any{
		"message": e.msg,
		"type":    openAIType(e.status),
		"param":   nullable(e.param),
		"code":    nullable(e.code),
	}}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func writeError(w http.ResponseWriter, d dialect, e *apiError) {
	writeJSON(w, e.status, errorBody(d, e))
}

// writeRateLimited answers 429 with the headers clients back off on:
// Retry-After in whole seconds (at least 1), retry-after-ms (read by the
// OpenAI SDKs) and the exhausted request limit.
func writeRateLimited(w http.ResponseWriter, d dialect, after time.Duration, msg string) {
	h := w.Header()
	h.Set(contract.HeaderRetryAfter, strconv.FormatInt(int64(math.Ceil(max(after, time.Second).Seconds())), 10))
	h.Set(contract.HeaderRetryAfterMs, strconv.FormatInt(max(after.Milliseconds(), 1), 10))
	// A limiter may already have said which limit is exhausted.
	if h.Get("x-ratelimit-remaining-requests") == "" && h.Get("anthropic-ratelimit-requests-remaining") == "" {
		h.Set("x-ratelimit-remaining-requests", "0")
		if d == anthropic {
			h.Set("anthropic-ratelimit-requests-remaining", "0")
		}
	}
	writeError(w, d, &apiError{
		status: http.StatusTooManyRequests, code: "rate_limit_exceeded",
		msg: fmt.Sprintf("%s Please try again in %v.", msg, after),
	})
}

func writeMethodNotAllowed(w http.ResponseWriter, allowed string) {
	w.Header().Set("Allow", allowed)
	writeError(w, openAI, &apiError{
		status: http.StatusMethodNotAllowed, code: "method_not_allowed",
		msg: "Method not allowed: use " + allowed + ".",
	})
}

// writeJSON writes v with an exact Content-Length. The error is the
// connection's: callers that care whether the answer left use it.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		// Only values built in this package are marshalled; failing here
		// is a bug, answered as one rather than with a panic.
		b = []byte(`{"error":{"message":"mock: cannot encode response","type":"server_error","param":null,"code":null}}`)
		status = http.StatusInternalServerError
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}
