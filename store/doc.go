// Package store keeps what replicas of the gateway share in Redis, and one
// process's books on disk.
//
// # Model
//
// Redis wraps a go-redis client with a timeout on every call and a circuit
// breaker: after Failures consecutive failures it stops calling Redis for a
// backoff, then lets one probe through; the probe's success closes it, its
// failure doubles the backoff (up to MaxBackoff). Each transition is logged
// once. State says which state it is in — up, down or probing — and since
// when: for down and probing, since Redis stopped answering, which the
// probes do not move. A call Redis does not answer (refused by the open
// breaker, a connection refused or dropped, past its timeout, Redis
// loading or failing over) fails with an *UnavailableError, which matches
// ErrUnavailable and says since when and when the next probe is, so that
// a caller that cannot do without Redis (the Batch API) says so and when
// to retry instead of waiting; any other failure (a reply that is an error,
// data that does not parse) does not match it. Every key is
// prefix + "{cluster}:" + …, the cluster name being a
// Redis Cluster hash tag so that a fleet's keys share a slot and a script
// may touch several.
//
// Ledger is a spend.Ledger shared through Redis without a round trip on any
// request. A spend.MemoryLedger is the local view and answers every read.
// Add applies to the view and queues the change, aggregated per bucket
// (scope and minute); Sync — run by Run every SyncInterval — writes the
// queue in batches, each one Lua script that INCRBYs its buckets (spend:
// {scope}:{minute}, nano-dollars, expiring 26 hours after the last write),
// guarded by a marker key so that a batch retried after an ambiguous failure
// is applied once; then it reads (MGET) the last ten minutes of every scope
// in use, and a few scopes' whole retention each sync, and sets the view of
// each bucket to Redis's value plus what this replica still has queued for
// it. The view lags the other replicas by about one SyncInterval.
//
// While Redis is unreachable the view keeps serving this replica's own
// spend, the queue grows up to MaxQueued buckets — past it the oldest
// minute's are dropped and counted — and it is written when Redis answers
// again. Run writes what is queued once more when it stops.
//
// AlertClaim lets one replica of many deliver each spend alert: the first to
// SET NX the transition's key posts the webhook. With Redis unreachable,
// every replica posts its own.
//
// Leases is the lease table of the cluster's concurrency on Redis: each
// replica renews its lease every interval in one Lua script that does what
// lease.Table.Renew does — package lease states the division — on a hash
// that expires a TTL after the last renewal, by Redis's clock unless the
// renewal brings its own. The tests run the script and lease.Table on the
// same renewals (package leasetest) and require the same grants.
//
// Jobs is a batch.JobStore on Redis Streams, shared by a fleet: each
// batch's items a stream read by one consumer group (a replica per
// consumer), each result written once by a script that acknowledges the
// item, lapsed claims handed over with XCLAIM by the callers' clock, and
// every key either deleted when its batch ends or kept for a retention.
//
// Snapshots write a MemoryLedger to a file (a temporary file renamed over
// it) every interval and at shutdown, and read it at start: one process's
// books surviving a restart without Redis.
//
// # Non-goals
//
// Exact limits across replicas between two syncs (a fleet may overshoot a
// budget by what it admits in one interval), books that survive a Redis that
// loses its data (run it with persistence), and a provider's calls in
// flight within its slots at every instant of a replica's joining (see
// package lease).
package store
