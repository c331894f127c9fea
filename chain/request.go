package chain

import (
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// Request is one call presented to the chain. The shell fills what the
// caller said; the stages fill the rest.
type Request struct {
	// Tenant names the caller's tenant when the shell has identified it
	// itself (the simulator, or a program that authenticated the caller).
	// Empty means identify by APIKey, or the anonymous tenant when the
	// chain has no keyed tenants.
	Tenant string
	// APIKey is the caller's key, used only when Tenant is empty. It is
	// never stored or logged.
	APIKey string
	// Caller tells apart, beyond its tenant, who sends the call: with no
	// tenants configured, a hash of the key it presents (the gateway's),
	// or the simulator's traffic source. Its service-time statistics are
	// kept by it among the rest of its shape (see Shape). Zero means the
	// tenant alone.
	Caller uint64
	// Endpoint is the API path the call came on ("/v1/chat/completions"),
	// part of its shape. Empty means one endpoint for every call.
	Endpoint string
	// Tier is the tenant's tier. The identify stage sets it from the
	// tenant's configuration; with a named Tenant of no configuration it is
	// kept as given.
	Tier admission.Tier
	// Class is the priority class. Empty means admission.ClassInteractive.
	// The identify stage may change it to one the tenant may use;
	// AskedClass then keeps the caller's.
	Class      string
	AskedClass string
	// Attempt is 0 for a first attempt and N for the Nth retry, as the
	// caller said (a header). The recognise stage may raise it (see
	// RetrySeen) when the caller did not declare it.
	Attempt int
	// AttemptDeclared says the caller stated its attempt (a header such as
	// X-Sluice-Attempt or X-Stainless-Retry-Count, or a simulated caller
	// that sends one): a declared attempt is believed, and the recognise
	// stage leaves the call alone. Recognition is for callers that say
	// nothing. An Attempt of 1 or more is declared whatever this says: only
	// a shell can tell a stated 0 from silence.
	AttemptDeclared bool
	// Fingerprint identifies what the call asks, beside its tenant and
	// model: the gateway's hash of the request body, the simulator's
	// request identity. Two calls of one tenant and model with the same
	// fingerprint are copies of one request, and a copy sent after one
	// failed is a retry (see RecogniseConfig). Zero means none: the call
	// is not compared.
	Fingerprint uint64
	// Deadline is when the caller stops waiting. Zero means none. In
	// [Chain.Acquire] it is the earlier of this and the context's deadline
	// (admission.CallDeadline), and the permit's Request carries it.
	Deadline time.Time
	// Model is the model asked for. The spend stage may degrade it to a
	// cheaper rung; the gate keys service-time statistics by it.
	Model string
	// InputTokens estimates the prompt's size and MaxOutputTokens is its
	// max_tokens (zero: unknown); the spend stage prices the call with them.
	InputTokens, MaxOutputTokens int64
	// Cost is the call's estimated cost in the gate's fair shares (see
	// admission.Request.Cost). Zero means estimated from its tokens by
	// [Request.GateCost]; negative is an error.
	Cost float64
	// Unpriced says the provider does not bill the call (a metadata call
	// passed through): the spend stage lets it by without a reservation.
	Unpriced bool
	// Flavour is the API the call came on ("openai", "anthropic"): with
	// routing, only pools of that flavour serve it. Empty means any.
	Flavour string
	// AllowDegrade says the caller accepts a cheaper model when its own
	// cannot be served in time (X-Sluice-Degrade: allow), whatever its
	// class (see RoutingConfig.DegradeClasses).
	AllowDegrade bool

	// Set by the stages.

	// RetrySeen says the recognise stage found the call to be a retry
	// its caller did not declare, and raised Attempt.
	RetrySeen bool
	// overRetryBudget is the retry budgets' refusal of a recognised retry
	// that found no token: such a call may still take a slot that is free
	// now, with nobody waiting for it, and is refused with this otherwise
	// (see retries.Admit).
	overRetryBudget *admission.Rejection
	// OverQuota says the tenant is past its own quota: the gate ranks the
	// call at the over-quota rank.
	OverQuota bool
	// Degraded says Model was moved down the ladder from AskedModel, by
	// the spend stage (DegradedBy "spend") or the route stage under load
	// ("load").
	Degraded   bool
	AskedModel string
	DegradedBy string
	// With routing (Config.Routing), the route stage sets the call's pool
	// (an index into RoutingConfig.Pools), the deployment that serves it
	// and the model's name there, and NotBefore when the call must wait
	// for the pool's requests or tokens per minute before it is sent.
	Pool          int
	Upstream      string
	UpstreamModel string
	NotBefore     time.Time
	// EstimatedUSD is the cost the spend stage reserved (zero without one).
	EstimatedUSD float64

	// Observe says the call's tenant is in observe mode (the identify
	// stage sets it from TenantConfig.Mode and Config.Mode): every stage
	// and the gate decide about it as they would, and nothing of what
	// they decide is enforced — it is forwarded now, unchanged, and what
	// would have been done to it is recorded here instead.
	Observe bool
	// Would is, for an observed call, the first refusal it would have
	// had: a *admission.Rejection (a stage's or its gate's) or a
	// *ClassError. Nil when it would have been let through.
	Would error
	// WouldDegrade is, for an observed call, the cheaper model it would
	// have been sent to (by the degrade stage under load, or for money),
	// and WouldWait how long it would have waited for its slot.
	WouldDegrade string
	WouldWait    time.Duration
}

// WouldRejection is the observed call's would-be refusal as a
// *admission.Rejection, nil when it would have been let through or
// refused for its class (Would holds the *ClassError then).
func (r *Request) WouldRejection() *admission.Rejection {
	rej, _ := r.Would.(*admission.Rejection)
	return rej
}

// would records an observed call's would-be refusal: the first one counts.
func (r *Request) would(err error) {
	if r.Would == nil {
		r.Would = err
	}
}

func (r *Request) admission() admission.Request {
	shape, family := r.shapes()
	return admission.Request{
		Class:     r.Class,
		Tenant:    r.Tenant,
		Tier:      r.Tier,
		OverQuota: r.OverQuota,
		Attempt:   r.Attempt,
		Deadline:  r.Deadline,
		Key:       r.gateKey(),
		Shape:     shape,
		Family:    family,
		Cost:      r.GateCost(),
	}
}

// refusal is the refusal to tell a call its gate refused: the gate's own,
// except for a recognised retry past its budgets, which was asked for a
// free slot only — finding none, it is refused for its budget (429
// retry_budget), not for the wait it was never allowed.
func (r *Request) refusal(gate *admission.Rejection) *admission.Rejection {
	if r.overRetryBudget == nil || gate == nil {
		return gate
	}
	switch gate.Reason {
	case admission.ReasonQueueWait, admission.ReasonQueueFull:
		rej := *r.overRetryBudget
		rej.EstimatedWait = gate.EstimatedWait
		return &rej
	}
	return gate
}

// gateKey keys the call's service-time statistics: the model as its
// deployment names it when routed, else as asked.
func (r *Request) gateKey() string {
	if r.UpstreamModel != "" {
		return r.UpstreamModel
	}
	return r.Model
}

// GateCost is the call's cost in the gate's fair shares: Cost when set,
// else its tokens — the prompt's estimated size plus max_tokens, or
// spend.DefaultOutputTokens when max_tokens is unknown. Tokens rather than
// dollars, so that a tenant's share of the provider does not depend on
// which model it calls, and so that the gateway and the simulator, with or
// without prices, weigh calls alike: the provider's time goes roughly with
// tokens.
func (r *Request) GateCost() float64 {
	if r.Cost != 0 {
		return r.Cost
	}
	out := r.MaxOutputTokens
	if out <= 0 {
		out = spend.DefaultOutputTokens
	}
	return float64(max(r.InputTokens, 0) + out)
}

// Outcome is how an admitted call ended, as the shell saw it.
type Outcome struct {
	// Result classifies the call (see admission.Result): Canceled when the
	// caller left or its deadline cut the call, which books the call's cost
	// as wasted.
	Result admission.Result
	// ServiceTime is how long the call held its slot. Zero in [Permit.Done]
	// means measured by the gate.
	ServiceTime time.Duration
	// Usage is what the provider reported, when UsageKnown.
	Usage      contract.Usage
	UsageKnown bool
	// With Result Failure: RateLimited says the provider refused the call
	// for its rate limits (a 429), Unreachable that it could not be
	// reached at all. A pool's health counts the other failures, and an
	// unreachable deployment is down at once.
	RateLimited, Unreachable bool
}
