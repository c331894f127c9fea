// Package adaptive learns how many calls a provider serves at once from
// its answers, for a gateway or simulator told no concurrency
// (admission.learn): the number the gate's slots are set to.
//
// It is a functional core. [Concurrency] is fed each answer as a
// [Sample] — when it was sent and answered, at what concurrency, whether
// the provider refused it or said it was exhausted, and its expected
// time as a share of the mean call's — with the time as an input; it
// returns the limit and keeps its [State] for the state dump. It starts
// nothing, reads no clock and takes no lock: the shell serialises the
// calls and applies the limit. The gateway's shell is gateway/limit.go,
// which also lowers the level on a provider's rate-limit signals; the
// simulator's is sim/gate.go, on the same core, so that what the
// simulator shows of a learnt limit is what the gateway does.
//
// The signal is Little's law over windows of answers: a queue at the
// provider shows as latency that grows with the calls sent, and the
// controller keeps that queue between two small bounds, probing now and
// then for the latency without one. The method, its phases ([Phase]:
// starting, tracking, probing) and why each rule is there are on
// [Concurrency]; docs/learned-concurrency.md has the measurements.
//
// Files: concurrency.go is the controller; config.go its bounds
// ([Config], the YAML of admission.learn and of a scenario's
// sluice.learn) and their defaults.
package adaptive
