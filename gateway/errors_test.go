package gateway

import (
	"encoding/json"
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
		writeRejection(rec, &admission.Rejection{Reason: r, EstimatedWait: 1500 * time.Millisecond, RetryAfter: 2200 * time.Millisecond})
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
