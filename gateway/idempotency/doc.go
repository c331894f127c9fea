// Package idempotency is the gateway's Idempotency-Key: requests of one
// tenant with the same key within the window make one upstream call and
// all get its answer (contract's HeaderIdempotencyKey). A retry that raced
// its own timeout is then billed once, not twice.
//
// The first request with a key leads: it goes through the chain and to the
// provider, and the answer is captured as it streams to its caller (a tee in
// the gateway's response body, Flight.Capture: nothing is held back from
// the caller). A duplicate that arrives while the leader is in flight waits
// for it, bounded by its own deadline and context, and is answered from the
// capture; one that arrives later is answered from the store. Duplicates
// never enter the chain: they cost nothing upstream and take no slot.
//
// Only answers the provider gave, and that say something about the request
// rather than about the moment, are stored (storableStatus). A refusal by
// sluice itself (429/503 from the gate), a provider 5xx or 429, a timeout or
// a broken stream are not: the entry is dropped, and a waiting duplicate
// (or a later retry) makes the call itself, which is what a retry is for.
//
// Streams: a duplicate of a stream still in flight is refused with 409 and
// Retry-After (the leader's deadline, by which the stream has ended),
// instead of waiting. Waiting would hold the duplicate's caller without a
// byte for the whole stream and then hand it everything at once, which
// defeats streaming; tailing the live stream would tie the leader's pace to
// the slowest duplicate's reader. Once the stream has ended, its bytes are
// replayed like any stored answer.
//
// A leader whose caller leaves (a client-side timeout, the very race the
// key is for) does not cancel its upstream call: the call runs on to the
// leader's deadline, its answer is read to the end, and the retry gets it.
// The slot is held meanwhile, as the provider's capacity is; a call
// without a key is cancelled as before.
//
// Bounds: stored answers are kept for the window after they complete, at
// most max_entries of them and max_bytes in all, the oldest evicted first.
// An answer larger than max_entry_bytes is not kept; only the fact that the
// key was used is, and a duplicate within the window gets 409 (the call was
// made and billed: making it again is what the caller asked not to happen).
// Entries in flight are not counted: they are bounded by the requests the
// gateway is serving.
//
// The gateway holds one Store (New), asks it about every request before
// admission (Store.Admit), and hands the leader's Flight the provider's
// answer as it passes (Flight.Respond, Capture, Complete; Abandon when the
// call ends any other way). It gives the store what it needs of itself as
// Deps; this package does not import the gateway.
package idempotency
