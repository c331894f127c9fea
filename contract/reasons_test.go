package contract_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/contract"
)

// TestReasonStatus pins every reason of the HTTP contract to its status and
// error type: the caller's own limits are 429, overload is 503.
func TestReasonStatus(t *testing.T) {
	want := []struct {
		reason string
		status int
		typ    string
	}{
		{"queue_wait", http.StatusServiceUnavailable, "overloaded_error"},
		{"queue_full", http.StatusServiceUnavailable, "overloaded_error"},
		{"evicted", http.StatusServiceUnavailable, "overloaded_error"},
		{"expired", http.StatusServiceUnavailable, "overloaded_error"},
		{"retry_budget", http.StatusTooManyRequests, "rate_limit_error"},
		{"tenant_budget", http.StatusTooManyRequests, "rate_limit_error"},
		{"spend_ceiling", http.StatusServiceUnavailable, "overloaded_error"},
		{"draining", http.StatusServiceUnavailable, "overloaded_error"},
	}
	var names []string
	for _, w := range want {
		names = append(names, w.reason)
		status, typ, ok := contract.ReasonStatus(w.reason)
		if !ok || status != w.status || typ != w.typ {
			t.Errorf("ReasonStatus(%q) = %d, %q, %v; want %d, %q, true", w.reason, status, typ, ok, w.status, w.typ)
		}
	}
	if got := contract.Reasons(); !slices.Equal(got, names) {
		t.Errorf("Reasons() = %q, want %q", got, names)
	}
}

// TestEveryReasonHasStatusAndType holds a reason added to Reasons to having
// a status and a type that agree with each other.
func TestEveryReasonHasStatusAndType(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range contract.Reasons() {
		if r == "" || seen[r] {
			t.Errorf("reason %q is empty or listed twice", r)
		}
		seen[r] = true
		status, typ, ok := contract.ReasonStatus(r)
		switch {
		case !ok:
			t.Errorf("ReasonStatus(%q): not ok", r)
		case status == http.StatusTooManyRequests && typ != contract.ErrorTypeRateLimit,
			status == http.StatusServiceUnavailable && typ != contract.ErrorTypeOverloaded,
			status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable:
			t.Errorf("ReasonStatus(%q) = %d, %q; want 429 with %q or 503 with %q",
				r, status, typ, contract.ErrorTypeRateLimit, contract.ErrorTypeOverloaded)
		}
	}
}

func TestReasonStatusUnknown(t *testing.T) {
	for _, r := range []string{"", "Queue_Wait", "client_throttled", "timeout"} {
		if status, typ, ok := contract.ReasonStatus(r); ok || status != 0 || typ != "" {
			t.Errorf("ReasonStatus(%q) = %d, %q, %v; want 0, \"\", false", r, status, typ, ok)
		}
	}
}

func ExampleReasonStatus() {
	for _, r := range []string{contract.ReasonQueueWait, contract.ReasonTenantBudget} {
		status, typ, _ := contract.ReasonStatus(r)
		fmt.Println(r, status, typ)
	}
	// Output:
	// queue_wait 503 overloaded_error
	// tenant_budget 429 rate_limit_error
}
