package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// Reason says why a request was refused. Its strings are the contract's
// reasons (contract.ReasonQueueWait, ...), sent in X-Sluice-Reason.
type Reason uint8

const (
	reasonNone Reason = iota
	// ReasonQueueWait: the estimated wait plus the expected (p95) service time
	// would pass the request's deadline.
	ReasonQueueWait
	// ReasonQueueFull: the waiting room is at its hard bound and nothing of a
	// lower rank could be evicted.
	ReasonQueueFull
	// ReasonEvicted: the request was queued, then displaced by work of a
	// higher rank (or by a tenant holding less than its share of the bound).
	ReasonEvicted
	// ReasonExpired: the deadline passed, or came too close to finish in
	// time, before the request was served.
	ReasonExpired
	// ReasonRetryBudget, ReasonTenantBudget, ReasonSpendCeiling and
	// ReasonDraining are used by the layers above the gate (retry budgets,
	// spend limits, shutdown); they are defined here so every refusal in the
	// project is one type.
	ReasonRetryBudget
	ReasonTenantBudget
	ReasonSpendCeiling
	ReasonDraining
	numReasons
)

var reasonNames = [numReasons]string{
	reasonNone:         "",
	ReasonQueueWait:    contract.ReasonQueueWait,
	ReasonQueueFull:    contract.ReasonQueueFull,
	ReasonEvicted:      contract.ReasonEvicted,
	ReasonExpired:      contract.ReasonExpired,
	ReasonRetryBudget:  contract.ReasonRetryBudget,
	ReasonTenantBudget: contract.ReasonTenantBudget,
	ReasonSpendCeiling: contract.ReasonSpendCeiling,
	ReasonDraining:     contract.ReasonDraining,
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Reasons lists every reason, in a stable order (for metrics).
func Reasons() []Reason {
	out := make([]Reason, 0, numReasons-1)
	for r := ReasonQueueWait; r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// ParseReason is the inverse of [Reason.String].
func ParseReason(s string) (Reason, bool) {
	for r := ReasonQueueWait; r < numReasons; r++ {
		if reasonNames[r] == s {
			return r, true
		}
	}
	return reasonNone, false
}

// CallersOwnLimit reports whether the reason is the caller's own limit
// (HTTP 429) rather than overload of the dependency (HTTP 503), as the
// contract says (contract.ReasonStatus).
func (r Reason) CallersOwnLimit() bool {
	status, _, _ := contract.ReasonStatus(r.String())
	return status == http.StatusTooManyRequests
}

// Sentinel errors, one per reason, for errors.Is. A *Rejection matches the
// sentinel of its reason.
var (
	ErrQueueWait    = errors.New("admission: estimated wait exceeds the deadline")
	ErrQueueFull    = errors.New("admission: queue full")
	ErrEvicted      = errors.New("admission: evicted by higher-priority work")
	ErrExpired      = errors.New("admission: deadline passed before service")
	ErrRetryBudget  = errors.New("admission: retry budget exhausted")
	ErrTenantBudget = errors.New("admission: tenant budget exhausted")
	ErrSpendCeiling = errors.New("admission: spend ceiling reached")
	ErrDraining     = errors.New("admission: draining")
)

var sentinels = [numReasons]error{
	ReasonQueueWait:    ErrQueueWait,
	ReasonQueueFull:    ErrQueueFull,
	ReasonEvicted:      ErrEvicted,
	ReasonExpired:      ErrExpired,
	ReasonRetryBudget:  ErrRetryBudget,
	ReasonTenantBudget: ErrTenantBudget,
	ReasonSpendCeiling: ErrSpendCeiling,
	ReasonDraining:     ErrDraining,
}

// Rejection is the error returned when a request is refused. It is honest: it
// says why, how long the request would have waited, and when trying again has
// a chance.
type Rejection struct {
	Reason Reason
	// EstimatedWait is the gate's estimate of the time this request would
	// have waited for a slot.
	EstimatedWait time.Duration
	// RetryAfter is when trying again has a chance: for load, the time for
	// the backlog ahead of this request's rank to drain enough. Never zero.
	RetryAfter time.Duration
	// Rank is the rank the request was given.
	Rank int
	// Interval is the time between two calls the refusing resource
	// expects to admit once it has recovered: for the gate, one
	// completion's worth of its slots; for a budget, what its refill
	// affords one call. Callers refused together are told Retry-After
	// times this far apart (package chain spreads them), so that their
	// retries arrive at the rate they can be admitted. Zero means the
	// gate's.
	Interval time.Duration
	// ContextDeadline is set when the refusal came from the deadline of the
	// caller's context; the Rejection then also matches
	// context.DeadlineExceeded. (A flag, not the error itself, keeps a
	// Rejection free of pointers and cheap to allocate on the refusal path.)
	ContextDeadline bool
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("admission: rejected (%s): estimated wait %v, retry after %v",
		r.Reason, r.EstimatedWait.Round(time.Millisecond), r.RetryAfter.Round(time.Millisecond))
}

// Is matches the sentinel error of the rejection's reason.
func (r *Rejection) Is(target error) bool {
	return r.Reason < numReasons && sentinels[r.Reason] != nil && target == sentinels[r.Reason]
}

// Unwrap returns context.DeadlineExceeded for a refusal caused by the
// caller's context deadline, nil otherwise.
func (r *Rejection) Unwrap() error {
	if r.ContextDeadline {
		return context.DeadlineExceeded
	}
	return nil
}
