// Package wire is what the gateway reads and writes in its providers' and
// callers' wire formats: pure functions and small types, with no state of
// the gateway's.
//
// # Model
//
// What the gateway writes: its own answers, in the caller's API shape.
// WriteError and WriteJSONError write an error body (contract.ErrorBody,
// OpenAI's shape), or Anthropic's {"type":"error","error":{...}} when the
// writer is an Exchange that says the caller speaks Anthropic's API; the
// gateway chooses the shape (its exchange, from the request's path), this
// package writes it. WriteRejection writes the contract's refusal: 429 or
// 503 with Retry-After, retry-after-ms, the reason and the estimated wait,
// in headers and body. A BadRequest is a 4xx naming what was wrong in the
// request (BadHeader, one header), written by WriteBadRequest.
//
// What the gateway reads of the provider's answers: a UsageMeter finds the
// token usage in a JSON body or an SSE stream as it goes by (OpenAI's chat,
// completions, embeddings and Responses, Anthropic's messages); Exhausted
// reads the rate-limit headers that say the next call will be refused
// (OpenAI's x-ratelimit-remaining-*, Anthropic's
// anthropic-ratelimit-*-remaining); RetryAfter reads retry-after-ms or
// Retry-After.
//
// # Goals
//
// The bytes on the wire fixed in one place: every error the gateway writes
// goes through WriteJSONError, every refusal through WriteRejection. A
// provider's header or body, which the gateway does not control, is read
// without trusting it: malformed or absurd values are ignored or bounded,
// and a huge body costs no more memory than a small one.
//
// # Non-goals
//
// Deciding anything: which status an answer deserves, whether to retry or
// slow down, what a call costs are the gateway's and the chain's. This
// package does not import the gateway.
package wire
