package contract_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/contract"
)

// TestErrorBodyJSON pins the field names of the error body: a rejection
// carries sluice's fields beside OpenAI's, param is null as OpenAI sends it,
// and any other error omits sluice's fields.
func TestErrorBodyJSON(t *testing.T) {
	wait, retry := int64(5200), int64(4100)
	for _, tc := range []struct {
		name string
		body contract.ErrorBody
		want string
	}{
		{"rejection", contract.ErrorBody{Error: contract.ErrorDetail{
			Message: "m", Type: contract.ErrorTypeOverloaded, Code: contract.ReasonQueueWait,
			Reason: contract.ReasonQueueWait, EstimatedWaitMs: &wait, RetryAfterMs: &retry,
		}}, `{"error":{"message":"m","type":"overloaded_error","param":null,"code":"queue_wait","reason":"queue_wait","estimated_wait_ms":5200,"retry_after_ms":4100}}`},
		{"bad request", contract.ErrorBody{Error: contract.ErrorDetail{
			Message: "m", Type: contract.ErrorTypeInvalidRequest, Code: "invalid_header",
		}}, `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"invalid_header"}}`},
	} {
		b, err := json.Marshal(tc.body)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
	}
}

// TestErrorBodyFromProvider: a reader gets the message of a body a server
// that is not sluice wrote, with code null and no sluice fields.
func TestErrorBodyFromProvider(t *testing.T) {
	var b contract.ErrorBody
	err := json.Unmarshal([]byte(`{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":null}}`), &b)
	if err != nil {
		t.Fatal(err)
	}
	if d := b.Error; d.Message != "Rate limit reached" || d.Code != "" || d.Reason != "" || d.EstimatedWaitMs != nil || d.RetryAfterMs != nil {
		t.Errorf("decoded %+v", d)
	}
}

// TestEstimateJSON pins the estimate endpoint's field names.
func TestEstimateJSON(t *testing.T) {
	e := contract.Estimate{Priority: "interactive", Rank: 4, EstimatedWaitMs: 1234, ServiceP50Ms: 800,
		ServiceP95Ms: 2100, Admit: false, Reason: contract.ReasonQueueWait, RetryAfterMs: 900,
		QueueDepth: ptr(12), InFlight: ptr(8), Concurrency: ptr(8), Mode: "fifo", TimeoutMs: 3000, Model: "gpt-4o"}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"priority":"interactive","rank":4,"estimated_wait_ms":1234,"service_p50_ms":800,"service_p95_ms":2100,"admit":false,"reason":"queue_wait","retry_after_ms":900,"queue_depth":12,"in_flight":8,"concurrency":8,"mode":"fifo","timeout_ms":3000,"model":"gpt-4o"}`
	if string(b) != want {
		t.Errorf("\n got %s\nwant %s", b, want)
	}
	// Without the global figures and the model: those fields are absent.
	e.Model, e.QueueDepth, e.InFlight, e.Concurrency, e.Mode = "", nil, nil, nil, ""
	if b, err = json.Marshal(e); err != nil || strings.Contains(string(b), "queue_depth") || strings.Contains(string(b), "mode") {
		t.Errorf("without global figures: %s, %v", b, err)
	}
	var back contract.Estimate
	if b, err = json.Marshal(e); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil || back != e {
		t.Errorf("round trip without a model: %+v, %v; want %+v", back, err, e)
	}
}

func ptr(n int) *int { return &n }
