// Package store keeps what replicas of the gateway share in Redis, and one
// process's books on disk.
//
// # Model
//
// Redis wraps a go-redis client with a timeout on every call and a circuit
// breaker: after Failures consecutive failures it stops calling Redis for a
// backoff, then lets one probe through; the probe's success closes it, its
// failure doubles the backoff (up to MaxBackoff). Each transition is logged
// once. Every key is prefix + "{cluster}:" + …, the cluster name being a
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
// Leases is the lease table of the cluster's concurrency: each replica
// renews its lease every interval in one Lua script, publishing its demand
// by rank; the script drops the rows past their TTL, divides the smallest
// published limit among the live replicas (Divide: a floor of one slot
// each, then rank by rank max-min, then the idle slots spread), and grants
// the caller its share less what the others still hold (so that slots
// move between replicas only as calls drain). LeaseTable is the same in Go,
// time an input, for the simulator and as the script's reference: the
// tests run both on the same renewals.
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
// loses its data (run it with persistence), and a provider's in-flight
// calls within its slots at every instant of a replica's joining (one
// floor slot per replica that joins while every slot is held; see
// docs/replicas.md).
package store
