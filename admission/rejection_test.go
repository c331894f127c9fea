package admission_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// TestReasonsAreTheContracts holds admission's reasons to the contract's, in
// both directions: every Reason prints as a contract reason, every contract
// reason parses back, and CallersOwnLimit agrees with the contract's status.
func TestReasonsAreTheContracts(t *testing.T) {
	var names []string
	for _, r := range admission.Reasons() {
		names = append(names, r.String())
		status, _, ok := contract.ReasonStatus(r.String())
		if !ok {
			t.Errorf("%v: not a reason of the contract", r)
		}
		if r.CallersOwnLimit() != (status == http.StatusTooManyRequests) {
			t.Errorf("%v: CallersOwnLimit() = %v, but the contract's status is %d", r, r.CallersOwnLimit(), status)
		}
	}
	if want := contract.Reasons(); !slices.Equal(names, want) {
		t.Errorf("admission.Reasons() = %q, contract.Reasons() = %q", names, want)
	}
	for _, s := range contract.Reasons() {
		if r, ok := admission.ParseReason(s); !ok || r.String() != s {
			t.Errorf("ParseReason(%q) = %v, %v", s, r, ok)
		}
	}
	if r, ok := admission.ParseReason(""); ok {
		t.Errorf("ParseReason(\"\") = %v, true; want false", r)
	}
}
