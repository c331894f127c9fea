// Package chain is sluice's admission chain: the stages every call passes
// through before it may reach the provider, and the settlement after it
// ends. The gateway runs it in real time and the simulator in virtual time,
// so a policy is written once and the simulator measures the policy that
// ships.
//
// # The chain
//
// A call is asked, in this order:
//
//  1. identify: whose call it is — a tenant named by a trusted shell, or
//     found by its API key (stored as SHA-256 digests, compared in
//     constant time) — and so its tier and class;
//  2. recognise: a call identical to one its tenant sent lately (same
//     model and body fingerprint) whose last copy failed — refused, timed
//     out, abandoned — is a retry, whatever its headers say (seen.go);
//  3. retry budgets: a first attempt earns retries, a retry must be paid
//     for from its tenant's budget and then the global one (the tenant is
//     refunded when the global budget refuses);
//  4. degrade under load: a call none of its model's pools would serve in
//     time, and that may be degraded, goes one rung down the routing
//     ladder when the rung can serve it (degrade.go);
//  5. spend: the call's cost is estimated and reserved at the model it
//     will call; past the spend ceiling's or the tenant's budget's stages
//     it is refused, marked over quota, or degraded to a cheaper model;
//  6. route: the pool of the call's model whose estimate meets its
//     deadline, and the pool's request and token buckets;
//  7. the gate: that pool's admission.Core decides by estimated wait
//     against the deadline, queues, evicts or refuses.
//
// The order is data: one table (order, in stage.go) names the stages
// before the gate with the reason each stands where it does, and adding
// one is one entry there and a type implementing [Stage]. No stage
// reaches into another's hold after the fact. Stages take the time as an
// input and never read the clock, sleep or start goroutines.
//
// When the call ends it is settled (outcome, usage, service time: the spend
// reservation replaced by the actual cost, wasted spend counted) and its
// slot released. A call refused by a stage, or withdrawn before service,
// gives back what every earlier stage took.
//
// # Estimates
//
// Estimate asks the same stages in the same order what they would answer
// now, and then the gate, taking nothing: a stage that implements [Peeker]
// answers without withdrawing a token, reserving or counting; one that
// does not is assumed to let the call pass. So the estimate of a call the
// spend ceiling, its tenant's budget or the retry budget would refuse says
// so, with the reason and Retry-After the call would get.
//
// # Refusals spread over the recovery
//
// Every refusal — a stage's or the gate's — is handed its Retry-After on
// a retry calendar (spread.go): callers refused together are told times one
// admission of the refusing resource apart, from its base recovery on,
// rather than one time for all, so that retries which honour Retry-After
// exactly come back at the rate they can be admitted instead of as one
// wave. Config.RefusalSpread bounds how far the times reach.
//
// # The map: each interface, and who implements it
//
// The chain is held together by a few small interfaces; the pieces behind
// them live in their own packages, and none of them knows the others.
//
//   - [Stage] (stage.go): Admit(now, *Request) (Hold, error) — one step
//     of the order above. Implemented here by identify (tenants.go), seen
//     (seen.go), retries (retry.go), degrader (degrade.go), spendStage
//     (spend.go) and router (route.go). The table order (stage.go) lists
//     them.
//   - [Hold] (stage.go): Cancel(now, cause) and Settle(now, Outcome) —
//     what a stage took for one call, given back or settled when the call
//     ends. Implemented by seenHold, spendHold and routeHold; a stage that
//     takes nothing returns nil.
//   - [Peeker] (estimate.go): Peek(now, *Request) error — a stage's answer
//     to Estimate, taking nothing. Implemented by identify, retries,
//     degrader, spendStage and router; seen is asked nothing (an estimate
//     is no attempt).
//   - [GateView] (stage.go): Rank and KeyStats — what stages may ask of
//     the gate. Implemented by the pools' view (poolsView, route.go) over
//     admission.Core (the simulator's [Core]) or admission.Gate (the
//     gateway's [Chain]); poolGate and calendarGate (pool.go, spread.go)
//     are the route stage's and the retry calendar's wider views of one
//     pool's gate.
//   - spend.Ledger (package spend): the spend books the spend stage's
//     limiter keeps — spend.MemoryLedger in one process, store.Ledger on
//     Redis for replicas. The shell chooses it (Config.Spend is built by
//     the shell).
//   - batch.JobStore and batch.Doer (package batch): not the chain's, but
//     the Batch API's, which sends each item through the same chain as a
//     live call — the job store is batch.Bolt on local disk or store.Jobs
//     on Redis, and the Doer is gateway/batchapi.API.
//   - lease.Table (package lease): the division of a fleet's concurrency
//     among its replicas, which sets each pool's gate; store.Leases keeps
//     it on Redis, and the simulator runs the same Table in memory.
//
// # Two shells
//
// [Core] is the chain over an admission.Core: every method takes the time,
// nothing blocks, decisions about queued calls come back from Events — the
// simulator drives it. [Chain] is the chain over an admission.Gate: Acquire
// blocks until a slot, a refusal or the context's end, and the Permit's Done
// settles and releases — the gateway runs it. Both call the same stages in
// the same order through one function; only the gate's form differs, as
// admission.Gate is the blocking shell of admission.Core.
//
// Non-goals: HTTP (headers, bodies, status codes are the gateway's), and
// what happens upstream (retries of the provider, streaming) beyond the
// outcome the shell reports.
package chain
