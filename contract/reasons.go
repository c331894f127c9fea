package contract

import "net/http"

// Rejection reasons, sent in HeaderReason and in ErrorDetail.Reason and
// ErrorDetail.Code. The strings never change: callers branch on them.
const (
	// ReasonQueueWait: the estimated wait plus the expected service time
	// exceeds the request's deadline.
	ReasonQueueWait = "queue_wait"
	// ReasonQueueFull: the queue is at its hard bound.
	ReasonQueueFull = "queue_full"
	// ReasonEvicted: the request was queued, then displaced by
	// higher-priority work.
	ReasonEvicted = "evicted"
	// ReasonExpired: the deadline passed before the request was served.
	ReasonExpired = "expired"
	// ReasonRetryBudget: the request was a retry, and retries are over
	// their budget. The caller's own limit: 429.
	ReasonRetryBudget = "retry_budget"
	// ReasonTenantBudget: the tenant's spend budget is exhausted. The
	// caller's own limit: 429.
	ReasonTenantBudget = "tenant_budget"
	// ReasonSpendCeiling: the gateway's spend ceiling is reached.
	ReasonSpendCeiling = "spend_ceiling"
	// ReasonDraining: the gateway is shutting down.
	ReasonDraining = "draining"
)

// Error types of the JSON error body, in OpenAI's and Anthropic's
// vocabulary so that SDKs classify the error as they would the provider's.
const (
	// ErrorTypeRateLimit is the type of a 429: the caller's own limit.
	ErrorTypeRateLimit = "rate_limit_error"
	// ErrorTypeOverloaded is the type of a 503: the dependency is
	// overloaded, or the gateway is draining.
	ErrorTypeOverloaded = "overloaded_error"
	// ErrorTypeInvalidRequest is the type of an answer to a request that
	// is malformed (400) or not authorised (401).
	ErrorTypeInvalidRequest = "invalid_request_error"
)

// reasons is every reason, in the order Reasons returns them, with its
// status. The order is that of the HTTP contract's list.
var reasons = [...]struct {
	name   string
	status int
}{
	{ReasonQueueWait, http.StatusServiceUnavailable},
	{ReasonQueueFull, http.StatusServiceUnavailable},
	{ReasonEvicted, http.StatusServiceUnavailable},
	{ReasonExpired, http.StatusServiceUnavailable},
	{ReasonRetryBudget, http.StatusTooManyRequests},
	{ReasonTenantBudget, http.StatusTooManyRequests},
	{ReasonSpendCeiling, http.StatusServiceUnavailable},
	{ReasonDraining, http.StatusServiceUnavailable},
}

// Reasons returns every rejection reason, in a stable order.
func Reasons() []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = r.name
	}
	return out
}

// ReasonStatus returns the HTTP status of a rejection for reason and the
// type of its error body: 429 and ErrorTypeRateLimit for the caller's own
// limits (retry_budget, tenant_budget), which the caller can fix by sending
// less; 503 and ErrorTypeOverloaded for everything else, which is the
// dependency's overload or the gateway's shutdown. ok is false for a string
// that is not a reason of the contract.
func ReasonStatus(reason string) (status int, errType string, ok bool) {
	for _, r := range reasons {
		if r.name == reason {
			if r.status == http.StatusTooManyRequests {
				return r.status, ErrorTypeRateLimit, true
			}
			return r.status, ErrorTypeOverloaded, true
		}
	}
	return 0, "", false
}
