// Package lease divides a cluster's concurrency among the replicas of the
// gateway that share it: the lease table's algorithm, in Go with time an
// input and nothing of Redis.
//
// # Model
//
// A cluster's concurrency is the provider's: so many calls at once for all
// the replicas together. Each replica renews a lease of slots every
// interval, publishing its demand by rank — its calls in flight and
// queued, a higher rank served first as in package admission — and the
// limit it sees. The table keeps each replica's row for a TTL, so that a
// replica that dies gives its slots back; on each renewal it drops the
// rows past their TTL, divides the smallest published limit among the
// live replicas (Divide: a floor of one slot each, then rank by rank
// max-min, then the idle slots spread), and grants the caller its share
// less what the others still hold, so that slots move between replicas
// only as calls drain.
//
// Table is that division in memory, for the simulator (package sim) and
// as the reference of store.Leases, which runs the same in one Lua script
// on Redis for the gateway. The two are pinned to each other by the same
// renewals (package leasetest): store's tests run both on them and
// require the same grants.
//
// # Non-goals
//
// A provider's calls in flight within its slots at every instant of a
// replica's joining: a replica that joins while every slot is held gets
// its floor slot at once, one slot over the concurrency until the others
// drain (see docs/replicas.md). Exact shares between two renewals: demand
// is what each replica published at its last one.
package lease
