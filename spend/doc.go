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
// # Using it from the gateway
//
// The gateway decodes a `spend:` section of its YAML into a Config
// (KnownFields; Validate names bad fields as spend.…), builds one Limiter
// with New, registers Limiter.Collector on its registry, runs
// NewAlerter(l, …).Run in the background and serves Limiter.Snapshot in its
// state dump. Per request:
//
//  1. rank, _ := ranks.Rank(&admissionRequest) — the request's rank in the
//     gate, before any over-quota demotion.
//  2. d, err := l.Admit(now, spend.Request{Tenant, Model: body.model, Rank:
//     rank, Class, EstimatedInputTokens: spend.EstimateInputTokens(body.raw),
//     MaxOutputTokens: body.maxTokens}). err (ErrUnknownModel,
//     ErrInvalidRequest) is a 400. A refusal (d.Rejection) is written like
//     any *admission.Rejection: 429 or 503, Retry-After, X-Sluice-Reason.
//  3. If d.OverQuota, set admissionRequest.OverQuota. If d.Degraded,
//     rewrite "model" in the body to d.Model. Send X-Sluice-Model: d.Model.
//  4. Acquire the gate. If that fails, l.Cancel(now, d.Reservation).
//  5. When the response body ends (EOF or Close), read the usage (the JSON
//     body's "usage", or the last SSE chunk carrying one) and call
//     l.Reconcile(now, d.Reservation, usage, found). If the answer reached
//     nobody (the caller had left, or the deadline had passed), also
//     RecordWasted with the cost Reconcile returned. If the gateway
//     cancelled the upstream call early, RecordSaved the estimate minus
//     what was spent. A deferred Cancel after that is harmless and
//     guarantees no reservation leaks on a path that was missed.
//
// # Ledger and scale-out
//
// The books live in a Ledger: spend per scope per minute bucket, nothing
// else — a reservation is spend booked at admission, corrected in place by
// its reconciliation (see Ledger). MemoryLedger is the in-process
// implementation; spendtest.Run is the suite any other must pass.
//
// A Redis ledger fits the same interface without a round trip per request:
// a minute bucket is a key (sluice:spend:{scope}:{minute}, INCRBY, expiring
// after MinRetention), read with MGET. The ledger keeps a MemoryLedger as
// its local view and answers Buckets and Sum from it; Add applies to the
// local view at once and queues the entries, which a background loop
// flushes in pipelined batches every few hundred milliseconds, then pulls
// the recent buckets of the scopes in use (others' spend). A replica's
// decisions therefore lag the others' spend by at most one sync interval,
// which the rate window (minutes) absorbs. Leased chunks bound that lag
// when it matters: each replica may spend at most a chunk of a scope's
// remaining headroom (e.g. headroom / replicas) between syncs, and refuses
// past it until the next sync grants more. When Redis is unreachable the
// ledger keeps serving from its local view, scaling its own spend up to a
// conservative share of the limits, and counts the failure; a replica that
// dies leaves only its reservations' estimates in the buckets, which age
// out of the window. Ledger errors that do reach the Limiter are counted
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
// decides when a call runs. Per-tenant fairness at the global ceiling is
// by rank only: a tenant without a budget of its own shares the ceiling's
// refusals with everyone of the same rank (TestRunawayWithoutBudget
// measures it), so give every tenant a budget.
package spend
