package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// TestChainErrorsAnsweredAlike: the chain's errors about the call itself
// get one answer — status, code, a message naming what was wrong — at
// every entrance (a call, the estimate, a batch's check), wrapped or not;
// a model name too long to repeat is cut (contract.Echo), and an error of
// another kind is left to the entrance.
func TestChainErrorsAnsweredAlike(t *testing.T) {
	long := strings.Repeat("m", 500)
	for _, tc := range []struct {
		err    error
		status int
		code   string
		says   string
	}{
		{&chain.ClassError{Tenant: "acme", Class: "batch", Allowed: []string{"interactive"}}, http.StatusForbidden, "class_not_allowed",
			`from: tenant acme may not use class "batch" (allowed: interactive)`},
		{fmt.Errorf("route: %w", &chain.UnknownModelError{Model: "gpt-9"}), http.StatusNotFound, "model_not_found", `model "gpt-9" is not served`},
		{fmt.Errorf("spend: %w", spend.ErrUnknownModel), http.StatusBadRequest, "model_not_priced", contract.Echo(long) + " has no price"},
	} {
		br := chainBadInput(tc.err, "acme", long, "from")
		if br == nil || br.Status != tc.status || br.Code != tc.code || !strings.Contains(br.Msg, tc.says) {
			t.Errorf("%v: %+v, want %d %s saying %q", tc.err, br, tc.status, tc.code, tc.says)
		}
		if br != nil && strings.Contains(br.Msg, long) {
			t.Errorf("%v: the message repeats the whole 500-byte model", tc.err)
		}
	}
	if br := chainBadInput(errors.New("something else"), "acme", "gpt-4o", "from"); br != nil {
		t.Errorf("another error: %+v, want nil", br)
	}
}
