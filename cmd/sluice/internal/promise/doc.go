// Package promise is the promise suite: one table of overload scenarios,
// each with the floors sluice's defaults must hold, run two ways — by the
// simulator in virtual time (package sim runs the shipped admission chain),
// and over real HTTP on loopback: `sluice serve --upstream U --concurrency
// 16` and no other flag, or with HTTPOptions.Concurrency 0 (`sluice promise
// --concurrency 0`) no --concurrency either, the concurrency learnt as a
// user who says nothing gets it (a config file only where a scenario needs one:
// tenants' keys, a Redis for replicas) in front of `sluice mock`, driven by
// the load generator `sluice load` runs (package loadgen).
//
// # The promise
//
// sluice keeps a provider's capacity on answers someone still wants, and
// refuses early what it cannot serve. Under the defaults, in front of a
// provider of 16 slots (lognormal, median 200 ms, σ 0.5: about 70 answers
// a second), with callers who wait 2 s and retry twice at once:
//
//   - goodput: the on-time answers per second, as a share of the
//     provider's capacity;
//   - waste: the provider's calls whose answer reached nobody in time, as a
//     share of its calls;
//   - unanswered: the attempts left with neither an answer nor a refusal
//     when their caller's own timeout passed, as a share of attempts;
//   - time to a refusal: from an attempt's send to its 429 or 503, p99;
//   - success per class (and per tenant), and the provider's calls at once.
//
// Every scenario is run four ways (Variants): one prompt for every caller
// or each request its own, and callers that declare their attempts
// (X-Sluice-Attempt and X-Stainless-Retry-Count) or send no retry header at
// all — the two axes along which retry recognition can go wrong.
//
// # Capacity
//
// The simulator measures goodput against the nominal capacity (slots over
// the mean of the service-time distribution, before any slowdown). Over
// HTTP the mock draws a finite sample of that distribution, and one seed's
// thousand draws can average a few percent above its mean; goodput is
// measured against the capacity the mock really had in the run: slots over
// the mean of the service times it drew for the run's calls
// (mockllm.Stats.ServiceSeconds), so that a floor does not pass or fail on
// the luck of a seed.
//
// It is internal because it is a program (its command is `sluice promise`),
// not a library.
package promise
