// Package admission is an in-process gate in front of a slow, per-call-billed
// dependency: a fixed number of concurrency slots, a bounded waiting room split
// by priority rank, and an admission decision made on estimated wait time
// against the caller's deadline rather than on queue depth.
//
// # Model
//
// A request arrives with a priority class, a tenant, an attempt number and a
// deadline. The gate maps it to a rank (higher is served first and shed last;
// see [Ranks]). If a slot is free it runs at once. Otherwise the gate estimates
// how long the request would wait — the work queued ahead of it divided by the
// service rate, Little's law — and refuses it now, with an honest
// [Rejection], when now + estimated wait + p95 service time would pass its
// deadline. Work that cannot finish in time is never started.
//
// The waiting room is bounded by [Config.MaxQueue]. At the bound a newcomer of
// a higher rank evicts the queued item that would be served last in the lowest
// rank (reason evicted); otherwise the newcomer is refused (reason queue_full).
// Within a rank, tenants are served round-robin, so one tenant's flood cannot
// sit in front of everyone else's requests of the same rank.
//
// When a slot frees, the highest rank is served first. Within a rank, tenants
// take turns; within a tenant's queue the order is FIFO, switching to LIFO
// while that queue is overloaded: under sustained overload the oldest item is
// the one most likely to have been abandoned, so serving newest-first
// completes the requests whose callers are still waiting. Overload is
// detected CoDel-style, per tenant queue: the age of its oldest item has
// stayed above a target (half that item's time budget, or
// [Config.LIFOTarget] without a deadline) for [Config.LIFOInterval]. Items
// that can no longer finish in time are dropped at dequeue (reason expired)
// without running, and a waiter whose deadline passes is told at once.
//
// # Shape
//
// [Core] is the state machine. It takes the current time as an argument, never
// sleeps, never reads the clock and starts no goroutines, so a simulator can
// drive the very same code in virtual time. [Gate] is the blocking shell around
// it: [Gate.Acquire] waits in the queue (a producer awaiting a permit applies
// backpressure for free), [Gate.TryAcquire] never waits, and [Permit.Done]
// reports how long the work took, feeding the service-time estimator.
//
// # Non-goals
//
// The gate does not retry, does not know about HTTP and does not share state
// across processes: each process keeps its own queue and estimates. Retry
// budgets, spend limits and the HTTP contract are layers above it.
package admission
