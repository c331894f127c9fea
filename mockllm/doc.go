// Package mockllm is a fake LLM provider that behaves like a real one under
// overload: finite capacity, slow and skewed service times, a mid-run
// slowdown, per-call billing, faults, and a provider that keeps generating
// (and billing) after its client has gone. The project's demo measures what
// a queue does to such a dependency, so the mock's job is to be honest
// about exactly those properties, and to count what was paid for nothing.
//
// # Model
//
// A Server has Config.Slots slots. A request that arrives when all are busy
// waits in an unbounded FIFO (ModeQueue: nobody is refused, everybody waits
// longer) or is refused at once with 429 and Retry-After (Mode429). A
// request holds its slot for its service time:
//
//	(Median + tokensIn × PerPromptToken + tokensOut × PerOutputToken)
//	  × exp(Sigma × N(0,1)) × model's LatencyFactor × StepFactor (once StepAt has passed)
//
// times any run-time slowdown of the model. The per-token parts are zero
// unless configured, and then the time does not depend on the call's
// size; set, they make it follow the answer's length as a decode-bound
// provider's does (workload.ServiceModel is the same formula), so that
// production-shaped traffic can be replayed against the mock. Time is read
// with time.Now and waited with timers, so tests run the real server in
// virtual time inside testing/synctest. When Median and both per-token
// parts are zero the service time is exactly zero: no draw, no timer.
// Streamed answers are cut into up to 16 pieces spread evenly over the
// service time and flushed as they are "generated".
//
// Billing follows the provider: a request is billed from the moment it takes
// a slot. Usage is estimated, not tokenized: prompt tokens are the prompt
// text's characters / 4 (at least 1); completion tokens are the request's
// max_tokens (max_completion_tokens, max_output_tokens) when given, else
// Config.OutputTokens, or X-Mock-Output-Tokens when the request sets it
// (no more than its maximum). Costs come from the model table
// (BuiltinModels or Config.Models). Stats says what was received, started
// (billed), delivered, wasted (billed, but the client had gone: the money
// the demo is about), aborted, abandoned in the queue (never billed),
// refused and faulted.
//
// # Endpoints
//
//	POST /v1/chat/completions  OpenAI chat, JSON or SSE ("stream": true)
//	POST /v1/completions       OpenAI legacy completions, JSON or SSE
//	POST /v1/embeddings        OpenAI embeddings (float or base64)
//	POST /v1/responses         OpenAI Responses, JSON or typed SSE events
//	POST /v1/messages          Anthropic Messages, JSON or named SSE events
//	GET  /v1/models            the model table
//	GET  /mock/v1/stats        Stats as JSON
//	GET  /mock/v1/outage       the outage in force: {"mode": "off"}
//	POST /mock/v1/outage       {"mode": "off|refuse|500|hang"}: see Outage
//	GET  /mock/v1/slowdown     the run-time slowdowns by model
//	POST /mock/v1/slowdown     {"model": "m", "factor": 4}: see SetSlowdown
//
// OpenAI streams end with a usage chunk (empty choices) only when the
// request sets stream_options.include_usage, as OpenAI does, then
// "data: [DONE]". Anthropic and Responses streams always carry usage.
// Errors use each API's error shape and name the offending field or header.
// Per request, headers override what the server would draw or decide:
//
//	X-Mock-Fault: none|error|hang|reset|429|cut   the fault (HeaderFault)
//	X-Mock-Latency-Ms: N                          the service time, exactly (HeaderLatencyMs)
//	X-Mock-Output-Tokens: N                       the answer's length (HeaderOutputTokens)
//
// X-Mock-Output-Tokens is the length a real model decides by itself: the
// answer has min(N, the request's maximum) tokens, ends on its own
// (finish_reason "stop", stop_reason "end_turn", status "completed") when
// that is less than the maximum, and reports and bills what it wrote; the
// per-token service time follows it. X-Mock-Latency-Ms still sets the
// time regardless of length. Answers carry X-Mock-Queue-Ms and
// X-Mock-Service-Ms, and, with finite slots, x-ratelimit-limit-requests and
// x-ratelimit-remaining-requests.
//
// # Rate limits
//
// A model row may set RPM and TPM (ModelSpec). They are enforced per row of
// the table (models the "*" row covers share its limits) before capacity, like the providers' own: buckets that refill
// continuously, a request charged one request and its prompt tokens plus
// its maximum output when it arrives, a 429 with Retry-After,
// retry-after-ms and the provider's error shape when either bucket is
// short. Every answer for a limited model carries the limits in the
// dialect's headers: OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,
// tokens} with resets as durations ("20s", "6m0s"), or on /v1/messages
// Anthropic's anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}
// with resets as RFC 3339 times. A reset is when the bucket would be full
// again.
//
// # Goals
//
//   - Overload that looks like a provider's: queueing delay grows without a
//     bound in ModeQueue; capacity refusals carry Retry-After and
//     retry-after-ms in Mode429.
//   - Exact accounting of waste, with a stated rule for when an answer was
//     delivered (see Stats).
//   - Wire compatibility with the official OpenAI Go SDK (plain and
//     streaming) and with Anthropic's documented shapes.
//   - Deterministic in tests: Sigma 0 gives exact service times, synctest
//     gives virtual time, headers force faults.
//
// # Non-goals
//
//   - Model behaviour: the text is filler, tools, images, audio, logprobs
//     and n > 1 are not generated (n > 1 is refused, not ignored).
//   - Token-exact usage: there is no tokenizer.
//   - Per-key quotas: limits are per model, shared by every caller.
//   - Time per token: the per-token parts set a call's median, and the
//     luck is one draw per request, not one per token; without them the
//     median the demo is measured against is the median you configured.
//   - Authentication: any or no API key is accepted.
package mockllm
