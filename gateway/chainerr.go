package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/spend"
)

// chainBadInput is the answer to an error of the chain that says the call
// itself is wrong — not a refusal for load (*admission.Rejection), which
// refuse answers — the same at every entrance that asks the chain: a call
// (serveCall), the estimate (serveEstimate) and a batch's model check
// (batchModel). classFrom names where the class came from, for the
// message (the header, the query's parameter, batch.class). Nil when err
// is none of these: each entrance says what else it was.
func chainBadInput(err error, tenant, model, classFrom string) *wire.BadRequest {
	var classErr *chain.ClassError
	var unknownModel *chain.UnknownModelError
	switch {
	case errors.As(err, &unknownModel):
		return &wire.BadRequest{Status: http.StatusNotFound, Code: "model_not_found", Msg: unknownModel.Error()}
	case errors.As(err, &classErr):
		return &wire.BadRequest{Status: http.StatusForbidden, Code: "class_not_allowed",
			Msg: fmt.Sprintf("%s: tenant %s may not use class %s (allowed: %s)", classFrom, tenant, contract.Echo(classErr.Class), strings.Join(classErr.Allowed, ", "))}
	case errors.Is(err, spend.ErrUnknownModel):
		return &wire.BadRequest{Status: http.StatusBadRequest, Code: "model_not_priced",
			Msg: fmt.Sprintf("model: %s has no price in spend.prices (and spend.unknown_model is reject)", contract.Echo(model))}
	}
	return nil
}
