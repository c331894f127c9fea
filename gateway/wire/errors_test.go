package wire

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// TestWriteRejectionEveryReason: each reason is written with the contract's
// status and error type, every rejection header, and a body that repeats
// the reason, the estimated wait and the retry delay.
func TestWriteRejectionEveryReason(t *testing.T) {
	for _, r := range admission.Reasons() {
		rec := httptest.NewRecorder()
		WriteRejection(rec, &admission.Rejection{Reason: r, EstimatedWait: 1500 * time.Millisecond, RetryAfter: 2200 * time.Millisecond})
		status, typ, ok := contract.ReasonStatus(r.String())
		if !ok {
			t.Fatalf("%v: not a reason of the contract", r)
		}
		if rec.Code != status {
			t.Errorf("%v: status %d, want %d", r, rec.Code, status)
		}
		h := rec.Header()
		for name, want := range map[string]string{
			contract.HeaderRetryAfter: "3", contract.HeaderRetryAfterMs: "2200",
			contract.HeaderReason: r.String(), contract.HeaderEstimatedWaitMs: "1500",
		} {
			if got := h.Get(name); got != want {
				t.Errorf("%v: %s = %q, want %q", r, name, got, want)
			}
		}
		var body contract.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %s: %v", r, rec.Body, err)
		}
		d := body.Error
		if d.Type != typ || d.Code != r.String() || d.Reason != r.String() ||
			d.EstimatedWaitMs == nil || *d.EstimatedWaitMs != 1500 || d.RetryAfterMs == nil || *d.RetryAfterMs != 2200 {
			t.Errorf("%v: body %s", r, rec.Body)
		}
	}
}

func TestAnthropicErrorType(t *testing.T) {
	for status, want := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		409: "conflict_error", 413: "request_too_large", 429: "rate_limit_error", 431: "invalid_request_error",
		500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error",
	} {
		if got := anthropicErrorType(status); got != want {
			t.Errorf("status %d: %s, want %s", status, got, want)
		}
	}
}

// exchange is an Exchange as the gateway's: it keeps the first code.
type exchange struct {
	*httptest.ResponseRecorder
	anthropic bool
	code      string
}

func (x *exchange) NoteError(code string) {
	if x.code == "" {
		x.code = code
	}
}

func (x *exchange) SpeaksAnthropic() bool { return x.anthropic }

// TestErrorShapeFollowsTheExchange: an Exchange gets the code of the error
// noted, and Anthropic's shape when it speaks Anthropic's API; any other
// writer gets OpenAI's.
func TestErrorShapeFollowsTheExchange(t *testing.T) {
	const openai = `{"error":{"message":"X-Sluice-Timeout-Ms: soon","type":"invalid_request_error","param":null,"code":"invalid_header"}}` + "\n"
	const anthropic = `{"type":"error","error":{"type":"invalid_request_error","message":"invalid_header: X-Sluice-Timeout-Ms: soon"}}` + "\n"
	err := BadHeader("X-Sluice-Timeout-Ms", "%s", "soon")
	for _, tc := range []struct {
		w    http.ResponseWriter
		want string
	}{
		{httptest.NewRecorder(), openai},
		{&exchange{ResponseRecorder: httptest.NewRecorder()}, openai},
		{&exchange{ResponseRecorder: httptest.NewRecorder(), anthropic: true}, anthropic},
	} {
		WriteBadRequest(tc.w, err)
		var rec *httptest.ResponseRecorder
		switch w := tc.w.(type) {
		case *httptest.ResponseRecorder:
			rec = w
		case *exchange:
			rec = w.ResponseRecorder
			if w.code != "invalid_header" {
				t.Errorf("%T: code noted %q", w, w.code)
			}
		}
		if rec.Code != http.StatusBadRequest || rec.Body.String() != tc.want ||
			rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%T: %d %v %s, want %s", tc.w, rec.Code, rec.Header(), rec.Body, tc.want)
		}
	}
	rec := &exchange{ResponseRecorder: httptest.NewRecorder(), anthropic: true}
	WriteRejection(rec, &admission.Rejection{Reason: admission.ReasonQueueFull, RetryAfter: 1500 * time.Millisecond})
	want := `{"type":"error","error":{"type":"overloaded_error","message":"sluice refused the request (queue_full): the queue is at its bound; estimated wait 0 ms; retry after 1500 ms","reason":"queue_full","estimated_wait_ms":0,"retry_after_ms":1500}}` + "\n"
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != want || rec.Header().Get(contract.HeaderRetryAfter) != "2" || rec.code != "queue_full" {
		t.Errorf("Anthropic refusal: %d %v %s, want %s", rec.Code, rec.Header(), rec.Body, want)
	}
}
