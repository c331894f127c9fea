// Package loadgen is an open-loop load generator for OpenAI-compatible chat
// completion endpoints. It measures what the callers of a slow, per-call-billed
// dependency feel — whether an answer reached them before they stopped
// listening — rather than what the server is busy with.
//
// # Model
//
// Logical requests arrive as a Poisson process: inter-arrival times are drawn
// from an exponential distribution with a seeded generator (see [Arrivals]),
// so a seed always yields the same schedule. The loop is open: an arrival
// never waits for an earlier request to finish, which is how independent users
// behave and the only way overload can build up the way it does in
// production. A closed loop (N workers, each waiting for its answer) slows
// down exactly when the server does and hides the overload being measured.
//
// Or they replay a trace of production traffic (Config.Trace, a
// [workload.Trace]): each call arrives at its recorded offset from the
// start, as the class named after its service, with a prompt of its
// recorded size (about [CharsPerToken] characters a token of filler), its
// max_tokens and deadline when the trace has them, and the length of the
// answer it got in [HeaderMockOutputTokens], for a mock provider to write
// (a real one ignores it). The loop is just as open.
//
// Each logical request belongs to a class (interactive, batch, speculative by
// default) and carries a deadline: its scheduled arrival plus the class's
// deadline (or a trace call's own). A class also chooses its callers'
// X-Sluice-Priority, API key and max_tokens. Latency is measured from the scheduled arrival, not from the moment
// the runner got round to sending, so a runner that falls behind cannot hide
// queueing it caused (coordinated omission).
//
// A [Policy] plays the retrying client. It is an http.RoundTripper factory:
// the runner sends each logical request through the policy's transport, and
// the policy sends each attempt through the runner's, which counts, times and
// bounds it. Any retrying client written as a RoundTripper (sluice's client
// package, an SDK's transport) therefore plugs in unchanged. The built-in
// policies are [Rule]s — two pure decisions, time as an input — driven by a
// shared loop: [Naive] is the client most SDKs ship, with a fixed per-attempt
// timeout and immediate retries that ignore Retry-After and the caller's
// deadline; [Polite] honours Retry-After and never spends time the caller
// does not have.
//
// The [Report] counts an answer as good only if its last byte arrived before
// the request's deadline; goodput is the rate of such answers. Late answers,
// attempts per request, rejection reasons and the estimated waits the server
// advertised are reported beside it, because amplification and late work are
// exactly what backpressure is meant to prevent. So are the two things a
// gateway that sheds load promises each attempt: an answer or a refusal
// before the caller's own timeout (Report.Unanswered counts the attempts
// left without either), and a refusal that comes quickly
// (Report.RefusalTime).
//
// # Goals
//
//   - Reproducible: same seed, same arrival schedule and class mix; the
//     same trace, the same calls at the same offsets.
//   - Bounded: a run stops accepting arrivals after Config.Duration or
//     Config.MaxRequests (or at the trace's end), and cancels whatever is
//     still in flight once the longest deadline has passed since the last
//     arrival (every caller has stopped listening by then); nothing
//     outlives [Run].
//   - Honest: every arrival is accounted for, including those the runner
//     itself refused because of Config.MaxInFlight (client_overflow).
//
// # Non-goals
//
//   - Maximum throughput from one process. The runner spends a goroutine per
//     logical request; it is meant for the hundreds of requests per second an
//     LLM deployment sees, not for benchmarking a web server.
//   - Checking response content. Bodies are read to the end and discarded;
//     only status, the sluice headers and timing are recorded.
//   - Closed-loop load, and shapes other than a Poisson process or a
//     trace (a ramp or burst is a trace: see [workload.Shape]).
package loadgen
