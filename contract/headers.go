package contract

// Request headers. All are optional.
const (
	// HeaderAuthorization carries "Bearer <key>", which names the tenant
	// when tenants are configured.
	HeaderAuthorization = "Authorization"
	// HeaderPriority is the request's class: "interactive", "batch",
	// "speculative" or a class the gateway is configured with.
	HeaderPriority = "X-Sluice-Priority"
	// HeaderTimeoutMs is the caller's remaining time budget in whole
	// milliseconds, relative to when the request is received: a relative
	// budget survives clock skew between caller and gateway, as
	// grpc-timeout does.
	HeaderTimeoutMs = "X-Sluice-Timeout-Ms"
	// HeaderAttempt is 0 for a first attempt and N for the Nth retry.
	HeaderAttempt = "X-Sluice-Attempt"
	// HeaderDegrade set to DegradeAllow says the caller accepts a cheaper
	// rung of the model's ladder rather than a refusal under load.
	HeaderDegrade = "X-Sluice-Degrade"
	// HeaderIdempotencyKey: requests with the same key from the same
	// tenant within the window share one upstream call and one answer.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderStainlessRetryCount is the retry count the official OpenAI
	// SDKs send on their own; it stands for HeaderAttempt when that is
	// absent, so that SDK retries are known as retries without any change
	// to the caller.
	HeaderStainlessRetryCount = "X-Stainless-Retry-Count"
	// HeaderStainlessTimeout is the timeout, in whole seconds, the official
	// OpenAI SDKs send on their own; it is the caller's budget when
	// HeaderTimeoutMs is absent.
	HeaderStainlessTimeout = "X-Stainless-Timeout"
	// HeaderRequestID names the request in logs, at every hop: the
	// caller's own id when it is one token of 1 to 128 visible ASCII
	// characters, else one the gateway makes up (32 hex digits). It is
	// sent on every response, refusals included, and forwarded to the
	// provider.
	HeaderRequestID = "X-Request-Id"
)

// DegradeAllow is the HeaderDegrade value that accepts a cheaper model.
const DegradeAllow = "allow"

// Response headers of every proxied answer.
const (
	// HeaderQueueMs is the time the request waited for a slot, in
	// milliseconds.
	HeaderQueueMs = "X-Sluice-Queue-Ms"
	// HeaderModel is the model actually called; it differs from the one
	// asked for when the request was degraded.
	HeaderModel = "X-Sluice-Model"
	// HeaderClass is the class applied; it differs from the one asked for
	// when the tenant may not use that class.
	HeaderClass = "X-Sluice-Class"
	// HeaderUpstream names the deployment that answered.
	HeaderUpstream = "X-Sluice-Upstream"
	// HeaderUpstreamRequestID is the provider's own X-Request-Id, moved
	// aside so that HeaderRequestID stays the request's one id; the
	// provider's support asks for it.
	HeaderUpstreamRequestID = "X-Sluice-Upstream-Request-Id"
)

// Response headers of a proxied answer to a call in observe mode (the
// gateway's, or its tenant's), which sluice decided about and let through.
const (
	// HeaderWouldRefuse is the reason the call would have been refused in
	// enforce mode (a Reason, or class_not_allowed); absent when it would
	// have been let through.
	HeaderWouldRefuse = "X-Sluice-Would-Refuse"
	// HeaderWouldModel is the cheaper model the call would have been
	// degraded to; absent when none.
	HeaderWouldModel = "X-Sluice-Would-Model"
	// HeaderWouldQueueMs is how long, in milliseconds, the call would have
	// waited for its slot; absent when it would not have waited or would
	// have been refused.
	HeaderWouldQueueMs = "X-Sluice-Would-Queue-Ms"
)

// Response headers of every rejection.
const (
	// HeaderRetryAfter is the standard retry delay, in whole seconds and at
	// least 1: a 0 would invite the immediate retry it exists to prevent.
	HeaderRetryAfter = "Retry-After"
	// HeaderRetryAfterMs is the retry delay in milliseconds, which the
	// OpenAI SDKs read before Retry-After (and parse as a float).
	HeaderRetryAfterMs = "retry-after-ms"
	// HeaderReason is the rejection's reason, one of the Reason constants.
	HeaderReason = "X-Sluice-Reason"
	// HeaderEstimatedWaitMs is how long the request would have queued, in
	// milliseconds. The estimate endpoint sends it too.
	HeaderEstimatedWaitMs = "X-Sluice-Estimated-Wait-Ms"
)
