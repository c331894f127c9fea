// Package sim is a discrete-event simulator of callers, an admission policy
// and a slow, per-call-billed upstream, in virtual time. It exists to put
// numbers on the claims sluice is built on — an unbounded queue turns a slow
// failure into a total one, depth thresholds break on a bad day, expiry and
// LIFO recover goodput, retry budgets cap amplification, a spend limiter
// holds a runaway's bill — measured on the code sluice ships, and to let a user ask what their own traffic does at
// three times capacity before an incident answers.
//
// # Model
//
// A scenario (a [scenario.Scenario], usually read from a YAML file with
// [scenario.Load]; package sim/scenario holds the file's schema, its
// keys documented on its fields, and its validation) describes:
//
//   - the upstream: a number of slots and a service-time distribution
//     (lognormal, or empirical samples), which can step mid-run; every call
//     is billed from the moment it starts;
//   - priority classes with deadlines;
//   - traffic sources: Poisson arrivals of one class from one tenant, at a
//     share of the swept load or at a fixed load, with rate steps and bursts,
//     sent by naive, polite or client callers (the vocabulary of package
//     loadgen; see caller.go) that time out and retry, saying so in a
//     header or not (headers: none: then only the chain's recognise stage
//     can tell a retry, by its copy of the request); each logical request
//     is its own prompt, or all are one (same_prompt); each asks for a
//     model and reports a fixed usage in tokens;
//   - optionally the upstream's models: a service-time factor each, and
//     optionally slots of their own at the provider (concurrency: a call
//     sent when they are all busy waits there, first come first served,
//     its wait part of the service time the policy sees), the provider's
//     rpm and tpm for it, and service-time steps of its own
//     (upstream.steps[].model); and a spend section: the gateway's spend.Config — prices, ladder, ceiling,
//     tenants' budgets, stages, rate window, alerts — decoded by its own
//     yaml tags. With it every call is priced by its tokens.
//
// A run plays one policy at one load factor: logical requests arrive, their
// callers send attempts, the policy grants, queues or refuses them, granted
// attempts occupy a slot for their service time, and callers give up at
// their attempt timeout. An answer is good if it reaches a caller still
// waiting for it by the request's deadline; every other billed call is
// wasted. [Result] holds goodput as a share of capacity, success per class
// and source, waste, latency, what callers felt without an answer (the
// attempts left unanswered until their own timeout, and how soon refusals
// came), attempts per request, when the upstream steps the time to recover
// ([Recovery]), and with a spend section the bill's peak rate and what the
// spend limiter did ([SpendResult]).
//
// The policies ([Policies]) are a ladder. The baselines — unbounded FIFO, a
// depth threshold, a fixed queue timeout, a small bounded queue — are simple
// queues written here, the comparison. Every other rung is the real
// admission.Core, configured to add one feature at a time (wait-based
// admission by the p50 or by the mean, expiry at dequeue, adaptive LIFO,
// priority shedding); sluice adds the gateway's retry budgets, the real
// retrybudget.Budget, and its recognition of retries sent without a
// header (the rungs before it take a caller's word for its attempt); and, for scenarios with a spend section, the last
// rung adds the real spend.Limiter (policy "spend", full sluice as the
// gateway runs with a spend section). For scenarios whose every model has
// a concurrency of its own, policy "pools" is full sluice with the chain's
// route stage (chain.RoutingConfig): a pool per model — deployment
// "upstream", a gate of the model's slots, paced on its rpm and tpm
// (Request.NotBefore: the shell wakes at Core.NextPaced and calls
// Core.Advance, as the gateway's sleeps) — each model routed to its own
// pool, and, with sluice.degrade, a call sent one rung down its ladder
// under load, taking the rung's service time. Every sluice rung runs package
// chain's Core: the admission chain the gateway runs — tenant, retry
// budgets (with the recognition of retries sent without a header), spend,
// gate, settlement — with the same stages in the same
// order, by construction, in virtual time. The client callers run package
// client's own retry discipline (client.Retrier: backoff, retry budget,
// adaptive throttle) on the virtual clock. Nothing of either is modelled a
// second time. The shell around the chain does what the
// gateway's does: the request deadline is the attempt's timeout (what the
// X-Sluice-Timeout-Ms header carries), a queued request whose caller leaves
// is withdrawn with Core.Cancel, refusals carry the Retry-After of whichever
// stage refused, a degraded call calls the ladder's rung (see gate.go). The
// spend limiter's alerts are evaluated every alert_interval; the result
// records when each alert's rate crossed its threshold and when the alert
// fired ([SpendResult]).
//
// With a replicas section every sluice rung runs as several gateway
// replicas, one chain each, whose concurrency the lease table the gateway
// uses with Redis (lease.Table, the Go twin of the Lua script) sets
// every lease interval from each replica's demand by rank; traffic goes
// round-robin or to the replica a source is pinned to, and [Result]'s
// Provider reports the upstream's calls in flight over all replicas
// against its slots (replicas.go). The baselines stay one queue.
//
// One choice departs from the gateway on purpose: when a caller leaves
// while its call runs, the upstream keeps generating — and billing — as real
// providers do, and the policy's slot stays busy until the call ends (a call
// waiting for one of its model's provider slots is not withdrawn either). The
// gateway releases its permit at once and the provider's own capacity stays
// busy; holding the slot models the same capacity without a hidden second
// queue at the provider. The spend limiter sees what the gateway would: the
// gateway hangs up and gets no usage, so the reservation is settled at its
// estimate when the caller leaves, and counted wasted, while the provider
// bills the call in full (the simulator's own bill).
//
// Runs are deterministic for a seed. Arrivals come from a generator per
// source; service times and jitter are a hash of (seed, request, attempt),
// so every policy sees the same request take the same time — policies are
// compared on common random numbers, which removes the noise of different
// draws from the differences between them.
//
// # Goals
//
//   - The real admission code, in virtual time, at a million requests in a
//     second or so on one core (see BenchmarkMillionRequests).
//   - Every figure reproducible from a file and a seed; `sluice sim --all`
//     regenerates docs/results.md and its plots in one command.
//   - Bad input is an error naming the field by its YAML path
//     ([scenario.FieldError]).
//
// # Non-goals
//
//   - Network, HTTP and process overheads, which
//     cmd/sluice/internal/calibrate measures by running the same workload
//     for real.
//   - Varied usage outside a trace: every call of a scenario's traffic
//     source reports the same tokens (a trace's calls each their own, and
//     take their tokens' time: the scenario's trace_file), and the
//     spend limiter is given the true prompt size where the gateway
//     estimates it from the body. Without a spend section a call costs a
//     fixed price per traffic source.
//   - Shared ledgers: one run is one gateway with its memory ledger.
//   - Faults (errors, hangs, resets) and the gateway's own retries of the
//     provider, which only faults trigger.
//   - Rendering: the text tables, docs/results.md and its plots are written
//     by cmd/sluice/internal/simreport from [Sweep] and [Result], so that
//     importing the simulator does not import a plotting library.
package sim
