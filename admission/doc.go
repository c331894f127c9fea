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
// Within a rank, tenants share the gate fairly (see Fairness below), so one
// tenant's flood cannot sit in front of everyone else's requests.
//
// When a slot frees, the highest rank is served first. Within a rank, tenants
// take turns by fair queuing; within a tenant's queue, the call due first
// goes first (see Lanes below). Items that can no longer finish in time are dropped at
// dequeue (reason expired) without running, and a waiter whose deadline
// passes is told at once.
//
// # Service times by shape
//
// A request's expected service time is its shape's ([Request.Shape]: a
// hash of what is known of it before it runs — who sends it, the model,
// the endpoint, the sizes of its prompt and max_tokens), else its family's
// ([Request.Family]: the same caller, model and endpoint at any size),
// else its key's, else all requests': a window of recent samples each,
// bounded in number ([Config.MaxShapes]; see shapes.go). A 13-token code
// completion is judged by completions, not by the p95 of 1,000-token
// chats, and the work queued ahead of a newcomer is counted in time —
// each queued request's shape's mean — not in requests.
//
// # Lanes
//
// A tenant's queue of one rank is a few lanes, one per power of two of
// the budget its callers came with (see lane.go): a 3 s caller and a 10 s
// caller of one class wait in lanes of their own. Between lanes the
// request with the earliest deadline goes first, so short deadlines are
// not served late behind long ones that could have waited, and in a burst
// beyond the slots the short calls are served before the long ones that
// would take their time; within a lane the order is the queue's as it
// always was (oldest first, and newest-first for the requests queued while
// the lane stands). A request pushed past its deadline less its p95 by
// later requests of nearer deadlines is refused at once. A newcomer's wait counts the
// shorter lanes' requests queued ahead of it and, for as long as they can
// still overtake it, the rate they arrive at.
//
// # Refusing early
//
// The wait told at arrival is a promise, and the gate keeps it or says so as
// soon as it knows it cannot (see "Refusing early" in core.go):
//
//   - Work pushed back by work that overtakes it — a higher rank, newer work
//     served first, a slower dependency — is refused at once (queue_wait)
//     when it can no longer start by its deadline less its p95; work whose
//     deadline less its p95 has passed is refused (expired) wherever it
//     waits, not only when dequeued.
//   - A rank's wait counts the slots its tenant's higher ranks go on taking:
//     a retry below a flood of first attempts waits for the next arrivals
//     above it as well as for those queued now, and is refused at once when
//     they take every slot.
//   - A lane that has been refusing newcomers for their wait, without a
//     pause, for a quarter of a newcomer's budget stands: sustained
//     overload, not a burst — for callers of that lane's budgets: a lane of
//     short-deadline callers refused in a burst does not cut the wait of
//     the long-deadline callers it can serve in time. A newcomer may then wait only its allowance — a twentieth
//     of its budget, or four slots' time — and the callers turned away are
//     told at once. Newest-first is for this: the calls queued while the
//     queue stands are served newest-first, after the calls promised a
//     place before it stood, and one overtaken for its whole allowance is
//     refused at once — under sustained overload the newest caller is the
//     one surely still waiting, and no caller waits out a promise nobody
//     keeps. ([Config.LIFOTarget] and [Config.LIFOInterval], a CoDel-style
//     switch on the age of the oldest item, order only queues whose oldest
//     item has no deadline, and every queue with [Config.NoEarlyRefusal].)
//   - The service-time window follows a level shift of the dependency: a
//     change-point test (a CUSUM on its samples' logarithms, in units of
//     their own spread, so a noisy but steady dependency is no shift) finds
//     a fourfold slowdown of a typical spread within about eight samples,
//     and the window's estimates are then the new level's — its samples
//     from before the change moved to the level of those since — not a
//     mixture's, so a slowed dependency's waits and p95 are estimated as
//     they are within a second or two rather than after the window turns
//     over (see window.go). Each shape's window follows a shift of its own;
//     the window of all requests does only while they are of one shape — of
//     several, its level moves with their mix. Before any slowed call
//     completes, the calls in flight say it: several running longer than
//     the p95 put a floor under it (see inflight.go; a gate of one key and
//     one shape). And a first
//     attempt with even odds (its budget above the median service time,
//     below the p95) may take a slot that is free with nothing queued — it
//     never waits — so that a gate whose p95 crept past every budget does
//     not idle for good; a retry may not (its budget is what an earlier
//     attempt left, and retries are shed first).
//
// # Fairness
//
// What tenants share is the estimated cost of their work ([Request.Cost],
// for example its tokens), not the count of their requests, in proportion
// to their weights ([TenantShare.Weight], default 1).
//
// Within a rank, tenants are served by start-time fair queuing: each has a
// virtual finish time, the tenant whose next request starts earliest in
// virtual time is served, and its finish time then advances by the
// request's cost over its weight. Two tenants of equal weight sending the
// same request rate, one with prompts sixteen times the size, each get half
// of the served cost — the large one a sixteenth of the requests. A tenant
// that goes idle gets no credit for it: it starts again at the current
// virtual time.
//
// Across ranks, each tenant has a max-min fair share of the slots, by
// water filling over the tenants with demand (cost in flight plus queued),
// weighted: a tenant demanding less than its portion keeps its demand and
// the rest goes to the others. While other tenants wait, a tenant's work
// that would take it past its share is treated as over-quota work (the
// rank [Ranks.LowTier], as for a tenant past its spend budget): it is
// served after the work within its share of every rank above LowTier, and
// evicted before it (it may itself displace work of rank LowTier and
// below, which it is served ahead of). A newcomer's own demand counts in
// the shares when it asks for a place at the bound. So a tenant flooding at the top class cannot starve
// the others' lower classes, yet the gate stays work-conserving: the excess
// still gets every slot the others leave, ahead of rank LowTier and below,
// and a tenant alone is never over its share.
//
// The share is decided at dequeue and at eviction, not at arrival: whether
// a request is excess depends on who else waits when a slot frees, which is
// unknown when it arrives, and a request ranked low at arrival would stay
// low after the others left (or high after they came). The wait estimate
// told at arrival follows the same rule. Within one rank, fair queuing
// alone decides between tenants within and over their shares (a burst
// takes the turns the others leave), unless work within its share waits at
// a lower rank above LowTier.
//
// A tenant may also be capped: at [TenantShare.MaxInFlight] its requests
// queue even while slots are free for others, and past
// [TenantShare.MaxQueue] queued requests it is refused with queue_full.
//
// # Files
//
// core.go is the Core: its decisions, the wait estimate, refusing early;
// queue.go the waiting room of a rank (tickets, tenants' queues, fair
// queuing); lane.go the lanes of a tenant's queue; fair.go the tenants'
// shares; shapes.go the statistics by shape and a request's place; window.go
// a window of service times; inflight.go the calls in flight; headroom.go a
// tenant's room; stats.go the snapshot; gate.go the blocking shell;
// reconfigure.go a running gate's new configuration; config.go, request.go
// and rejection.go the types of the API.
//
// # Shape of the code
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
