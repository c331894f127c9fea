// Package spend treats money as a second resource, limited with the same
// machinery as load: a rolling window, thresholds, and a shedding policy
// tied to the admission gate's ranks. A dependency that bills every call
// can be spent out by a runaway loop or a retry bug that stays inside
// every concurrency limit; the Limiter stops that within seconds, degrades
// before it refuses, refuses in rank order, and alerts on the rate of
// spend rather than the total.
//
// # Model
//
// Prices are per model, in USD per million input, cached-input and output
// tokens (Config.Prices). A model without a price is refused as bad input
// or billed at a configured default price (Config.UnknownModel) — never
// silently free.
//
// At admission the cost of a call is estimated — prompt size
// (EstimateInputTokens) at the input price, plus max_tokens, or the mean
// output observed for the model, at the output price — and reserved: booked
// as spend at once, so calls in flight count against every limit. When the
// response ends, Reconcile replaces the reservation with the actual cost of
// the reported usage (for JSON bodies and for the final usage chunk of SSE
// streams alike); a response without usage keeps its estimate and is
// counted as estimated. Cancel releases a call that never went upstream.
// Both are idempotent.
//
// Spend is kept in minute buckets per scope — global, each tenant, each
// model — for a day. The rate that drives policy and alerts is the spend of
// the last Config.RateWindow (default 5 minutes) projected to USD per hour.
// Windows slide smoothly (the oldest minute leaves the window gradually),
// so the time at which a window will have freed enough is computed exactly
// and returned as RetryAfter.
//
// The policy is staged, for the global ceiling (Config.CeilingPerHour) and
// for each tenant's own budget (TenantBudget: per_hour on its rate, per_day
// on its last 24 hours), at fractions of the limit (Stages, defaults 0.8,
// 0.9, 0.95):
//
//   - shed speculative: rank 0 (or class "speculative") is refused; a
//     tenant past this point of its budget is over quota (Decision.OverQuota)
//     and its other requests drop to the over-quota rank in the gate and in
//     the global ceiling's order. Past this point of the global ceiling, a
//     tenant spending more than its max-min fair share of it (among the
//     tenants with spend in the rate window: one that spends less than an
//     equal share keeps it, the others share the rest) is refused like
//     rank 0 whatever its rank, and marked over quota (Decision.OverShare):
//     a runaway without a budget of its own cannot hold the global rate
//     where every other tenant's batch work is refused;
//   - degrade: the request is rewritten one rung down its model's ladder
//     (Config.Ladder, e.g. gpt-4o → gpt-4o-mini) and re-estimated at the
//     rung's price; the gateway tells the caller in X-Sluice-Model;
//   - reject: ranks are refused lowest first, each at its own fraction from
//     reject_at (rank 1) to 1.0 (the top rank, high-tier interactive work);
//     a tenant's refusal is 429 tenant_budget (its own limit), the
//     ceiling's is 503 spend_ceiling (overload), each with RetryAfter = when
//     the window will have freed enough for that rank, were nothing more
//     spent. Never zero.
//
// Alerts fire when the global rate or a tenant's rate reaches its alert
// threshold, once per crossing, and resolve once it falls below 90% of it
// (hysteresis). EvaluateAlerts is the pure evaluator; the Alerter runs it
// every alert_interval (at most 10s), logs a WARN and POSTs each event to a
// webhook.
//
// Wasted spend — the cost of answers that arrived after the caller's
// deadline or after the caller left — and spend saved by cancelling
// upstream calls early are counted (RecordWasted, RecordSaved) and
// reported in the Snapshot and the metrics.
//
// # Shape
//
// The Limiter is the functional core: every method takes the time as an
// argument; it never reads the clock, sleeps or starts a goroutine, so the
// simulator drives the shipped code in virtual time and the tests state
// times exactly. The Alerter (ticker, webhook) and the Prometheus Collector
// (read at scrape time) are the shells. All are safe for concurrent use.
//
// # Who calls it
//
// The admission chain's spend stage (chain/spend.go) is the Limiter's one
// caller per call, in the gateway and in the simulator alike: it asks
// Admit with the call's tenant, model, rank, class and token estimate
// (EstimateInputTokens, max_tokens) and applies the Decision — a refusal
// is the call's answer, OverQuota demotes the call at the gate, Degraded
// rewrites its model — and its hold gives the reservation back (Cancel)
// if the call never reaches the provider, or settles it with the call's
// usage (Reconcile), counting a call cut short as wasted (RecordWasted)
// and the part the provider likely did not generate as saved
// (RecordSaved). The gateway's config decodes the `spend:` section into a
// Config (ParseConfig names bad fields as spend.…), registers
// Limiter.Collector, runs the Alerter and serves Limiter.Snapshot in its
// state dump.
//
// # Ledger and scale-out
//
// The books live in a Ledger: spend per scope per minute bucket, nothing
// else — a reservation is spend booked at admission, corrected in place by
// its reconciliation (see Ledger). MemoryLedger is the in-process
// implementation; spendtest.Run is the suite any other must pass.
//
// store.Ledger shares the books of a fleet through Redis without a round
// trip on any request: a MemoryLedger is its local view and answers every
// read; Add applies to the view at once and queues the change, which a
// background loop writes every sync interval (200ms) in one script,
// applied once, then reads back the recent buckets of the scopes in use
// (the others' spend). A replica's decisions therefore lag the others'
// spend by about one sync, which the rate window (minutes) absorbs; a
// fleet can overshoot a budget by what it admits in one interval. While
// Redis is unreachable each replica admits from its own view — its own
// spend only — and queues its writes, bounded (docs/replicas.md). Ledger
// errors that do reach the Limiter are counted
// (sluice_spend_ledger_errors_total) and a failed read counts as no spend:
// a bookkeeping fault must not become an outage.
//
// # Goals and non-goals
//
// Goals: bound the spend rate globally and per tenant within seconds of a
// runaway, protect everyone else's work (a runaway is contained by its own
// budget first), refuse honestly with a truthful RetryAfter, count every
// dollar once (estimates replaced by actuals, reservations never leaked nor
// released twice), and cost well under a microsecond per request.
//
// Non-goals: exact token counting (estimates are replaced by reported
// usage), invoice reconciliation with the provider, pricing beyond tokens
// (images, audio and per-call fees are not modelled), and queueing:
// spend decides allow, degrade or refuse at once; the admission gate
// decides when a call runs. Fairness at the global ceiling goes only as
// far as its shed stage: there a tenant over its max-min share is refused
// like speculative work (Decision.OverShare); past it, at the degrade and
// reject stages, the ceiling refuses by rank, and a tenant without a
// budget of its own whose calls rank as high as the others' shares those
// refusals with them (TestRunawayWithoutBudget reports what the others
// keep) — so give every tenant a budget.
package spend
