// Package contract is the wire contract of the sluice gateway: the names and
// shapes that a request and its answer carry over HTTP, declared once for
// the gateway that writes them and for the client, the load generator and
// the mock provider that read them.
//
// It holds the request and response header names, the rejection reasons
// with the HTTP status and error type of each, the OpenAI-style JSON error
// body, the estimate endpoint's path and answer, the name of the anonymous
// tenant, and the token usage a provider reports for one call.
//
// Everything here is part of what callers see; a name or a field, once
// released, does not change meaning. The package imports only the standard
// library, so any part of the project (and any caller) may import it without
// pulling in the gateway.
//
// # Request headers (all optional)
//
//   - Authorization: Bearer <key> identifies the tenant when tenants are
//     configured; an unknown key is refused with 401. Without tenants every
//     request belongs to [AnonymousTenant].
//   - [HeaderPriority]: the class (interactive, batch, speculative, or one
//     configured); interactive when absent.
//   - [HeaderTimeoutMs]: the caller's remaining time budget in whole
//     milliseconds, relative like grpc-timeout. When absent,
//     [HeaderStainlessTimeout] (whole seconds, sent by the official OpenAI
//     SDKs) is the budget; then the class's default.
//   - [HeaderAttempt]: 0 for a first attempt, N for the Nth retry; also read
//     from [HeaderStainlessRetryCount], which the official OpenAI SDKs send.
//   - [HeaderDegrade]: [DegradeAllow] accepts a cheaper rung of the model's
//     ladder rather than a refusal under load.
//   - [HeaderIdempotencyKey]: the same key from the same tenant within the
//     window makes one upstream call, and one answer for all. A key is 1 to
//     255 printable ASCII bytes (else 400); reused for another method, path
//     or body it is a 422.
//
// # Response headers
//
// On every proxied response: [HeaderQueueMs], [HeaderModel], [HeaderClass]
// and [HeaderUpstream]. On every rejection: [HeaderRetryAfter] (whole
// seconds, at least 1), [HeaderRetryAfterMs], [HeaderReason],
// [HeaderEstimatedWaitMs], and an [ErrorBody] that repeats the reason, the
// estimated wait and the retry delay.
//
// In observe mode (mode: observe, the gateway's or a tenant's) no call is
// refused, queued or degraded: each is decided as in enforce mode and
// forwarded at once, and its answer says what enforce mode would have done
// in [HeaderWouldRefuse], [HeaderWouldModel] and [HeaderWouldQueueMs].
//
// [HeaderUpstream] names the deployment that answered (upstreams[].name;
// "default" for a gateway with one upstream); after a failover it is the
// deployment the call moved to. [HeaderModel] is the model the call was
// sent with: the one asked, the deployment's name for an alias, or the rung
// it was degraded to, for spend or under load. [HeaderDegrade] takes only
// [DegradeAllow]; any other value is a 400 naming the header.
//
// # Rejections
//
// A rejection names one of the Reason constants. The caller's own limits
// ([ReasonRetryBudget], [ReasonTenantBudget]) are 429 with type
// [ErrorTypeRateLimit]; overload is 503 with type [ErrorTypeOverloaded]
// (see [ReasonStatus]).
package contract
