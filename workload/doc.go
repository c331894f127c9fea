// Package workload is traffic shaped like production's: a trace of calls
// — when each arrived, how many tokens its prompt and its answer had,
// which service sent it — and the time a provider takes over a call of a
// given size.
//
// A [Trace] is read from the CSV form public production traces use
// ([ReadCSV]: a header row, then a row per call with its arrival time and
// its prompt's and answer's tokens; Azure's LLM inference traces read as
// they are published), or made to a production shape ([Shape.Trace]:
// several services of their own sizes, arrivals around a mean rate with
// bursts of several times it). A [ServiceModel] is a decode-bound
// provider's time for a call: a fixed part, a part per prompt token and
// a part per answer token, times a lognormal factor.
//
// The load generator replays a trace over HTTP (`sluice load --trace`),
// the simulator in virtual time (`sluice sim --trace`), the mock provider
// takes a call's time from its tokens (`sluice mock --per-output-token`),
// and the promise suite runs its production-shaped scenarios from one
// shape — the same calls each way, beside the two baselines it measures
// them against: no gateway at all, and the best schedule of the same
// calls made offline ([Bound]).
//
// # Non-goals
//
// Content: a call is its sizes, not its text. Tokenisation: sizes are
// what the trace says, and a replayed prompt is text of about four
// characters a token.
package workload
