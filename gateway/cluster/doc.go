// Package cluster is what a gateway's replicas share, and how: where the
// spend books live, and each replica's lease of the provider's
// concurrency.
//
// # Model
//
// Books is the YAML `store:` section opened: the spend books in memory
// (the Limiter's own, or a MemoryLedger snapshotted to a file every
// interval and once more at shutdown, read back at start — a corrupt
// snapshot stops the gateway rather than forgetting the day's spend), or
// on Redis (package store's Ledger, synced every interval). With Redis,
// one connection serves the books, the lease, the batch jobs and the
// spend alerts' claim (each alert delivered by one replica). Books.Run
// keeps all of it until its context ends, then writes what is queued,
// releases the lease and closes the connection.
//
// Lease is a replica's side of the Redis lease table (package lease
// divides, package store keeps the table): every interval it publishes
// its demand rank by rank, its calls in flight and its adaptive limit's
// level, and gives the gate the lease Redis grants. With one pool (an
// `upstream:`) the replicas lease its slots by demand; with several, each
// pool's limits (its concurrency, request and token buckets) are divided
// between the live replicas instead — leasing each pool's slots would be
// a round trip per pool. A lowered adaptive limit is renewed at once.
//
// The lease's modes, in the state dump (ClusterState) and the logs:
// joining (no answer yet: one slot), shared (the lease Redis granted),
// held (Redis unreachable: the lease, at most the local share, until it
// expires) and local (Redis unreachable past the lease: the local share).
//
// # When Redis is down
//
// The books keep serving from the local view and queue their writes (the
// store's mode is "degraded"); they are written once Redis is back. The
// lease is kept, capped at the local share — the cluster's concurrency
// (as the adaptive limit has it) divided by the larger of
// store.redis.lease.replicas and the last count of live replicas — until
// it would have expired, then the local share alone: the smaller of the
// two first, so that a replica with a small lease does not grow while one
// with a large lease is still draining; the share after the TTL, when the
// leases the others held have expired too. Back on Redis, a replica asks
// for no more than its local share until every replica it last saw has
// renewed, or a TTL has passed, so that the first one back does not take
// the whole cluster while the others still run on their shares. Lowering
// a gate's concurrency never cuts a call: those in flight finish, and new
// ones wait.
//
// # Goals and non-goals
//
// The same books and the same cluster-wide concurrency on every replica,
// and a replica that keeps serving, within its share, when Redis does not
// answer. The gateway gives a Lease what it needs of its pools as Pools
// and serves StoreState in its state dump; this package does not import
// the gateway. Dividing the concurrency is package lease's; Redis's
// protocol, breaker and scripts are package store's.
package cluster
