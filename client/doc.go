// Package client is the caller's side of a sluice gateway: an http.RoundTripper
// that tells the gateway how long the caller can wait and how much the request
// matters, retries rejections only when the retry can still be useful, and
// keeps the caller's own retries within a budget.
//
// # Model
//
// A Client wraps a base transport. For every request it
//
//   - sets X-Sluice-Timeout-Ms to the time left before the request context's
//     deadline, so the gateway can refuse work that cannot finish in time
//     instead of queueing it;
//   - sets X-Sluice-Priority from WithPriority (or Config.Priority);
//   - sets X-Sluice-Attempt: 0 on a first attempt, N on its Nth retry;
//   - on a 429 or 503 rejection, or a connection error before any response,
//     retries only if the wait the server asked for (retry-after-ms, else
//     Retry-After) ends before the deadline, the retry budget has a token and
//     attempts remain. Otherwise it gives up at once and returns a
//     *RejectedError carrying the gateway's reason, retry delay and estimated
//     wait, so the caller can decide what to do without parsing anything.
//
// Optionally (Config.ThrottleK), it throttles itself as described in the
// "client-side throttling" section of Google's SRE book: when the gateway has
// been rejecting much of what it is sent, a share of new requests is refused
// locally without being sent at all, so an overloaded gateway does not spend
// its capacity rejecting.
//
// That retry discipline is a Retrier of its own, with time and random draws
// as inputs and no HTTP, so that code which is not a transport (the
// simulator, in virtual time) applies the very same rules.
//
// Estimate asks the gateway, before submitting, how long a request of a given
// priority would wait and whether it would be admitted; behind a gateway with
// tenants it needs Config.APIKey, the caller's own key.
//
// # Use with the OpenAI Go SDK
//
// A Client's HTTPClient is an *http.Client, which the SDK accepts:
//
//	hc, err := client.NewHTTPClient(client.Config{})
//	...
//	oai := openai.NewClient(
//		option.WithBaseURL("http://gateway:8080/v1/"),
//		option.WithHTTPClient(hc),
//		option.WithMaxRetries(0),
//	)
//
// Set option.WithMaxRetries(0). The SDK retries by itself (twice by default,
// with its own backoff) around this transport; left on, a request can be sent
// up to MaxAttempts×3 times, and the SDK does not ask whether a retry can
// finish before the deadline.
// If the SDK does retry, this transport sees its X-Stainless-Retry-Count,
// numbers X-Sluice-Attempt from it and charges the retry to the retry budget
// like its own. When this transport gives up, the SDK returns the
// *RejectedError (wrapped in a *url.Error); errors.As finds it.
//
// # Goals
//
//   - Never wait for a retry that cannot finish before the deadline.
//   - Never resend a request that the server may already have acted on unless
//     the request is idempotent: a chat completion is billed.
//   - Keep retries a bounded share of traffic, however many requests fail.
//
// # Non-goals
//
//   - Choosing a deadline. The context carries it (http.Client.Timeout also
//     sets one); without one, no X-Sluice-Timeout-Ms is sent and the gateway
//     applies its default for the priority class.
//   - Retrying other failures (500, 502, a broken response body). Those are
//     returned as they are.
//   - Load balancing or failover between gateways.
package client
