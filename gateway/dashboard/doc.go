// Package dashboard is the admin listener's live dashboard: the page at /,
// its assets under /dashboard/ (embedded in the binary, loading nothing
// from elsewhere), and the data it draws — /admin/v1/history and the
// server-sent events of /admin/v1/events.
//
// # What it shows
//
// One sample a second of the last 15 minutes (a Sample): goodput, the
// capacity (concurrency ÷ mean service time), what is in flight and
// queued, the queue's depth and estimated wait by rank, refusals by reason
// and by class (those for want of capacity apart), each model's service
// time (p50, p95), the retry budget, the spend rate against its ceiling and
// alert level (and by tenant), the money wasted on answers nobody read,
// with upstreams:, each pool's gate, tokens and whether it is down; and,
// with store.redis, Redis's state (up, down, probing) and since when.
// At the top, a status line (Status) says in plain words the most urgent
// finding of the last 5 minutes: the highest class shed, a spend alert or
// ceiling stage, lower classes shed, retries refused, a pool down, Redis
// unreachable, draining — or that all is clear. Meta is what does not
// change while the gateway runs: the classes' ranks and default
// deadlines, the spend ceiling's stages (SetSpend replaces them on a
// reload).
//
// # Model
//
// A Board keeps a fixed ring of 900 samples, so its memory never grows.
// Run takes a Reading from its Source once a second — the gateway's gauges
// and totals at that moment, which the gateway builds from its own state —
// and derives the interval's rates (goodput, refusals, waste) from the
// previous reading, then the status; the request path pays nothing. Every
// page connected to /admin/v1/events gets the history, then each new
// sample; one that has not taken the last second's skips the next. The
// streams end when Run does.
//
// The gateway supplies the Source, the classes and the spend section, and
// mounts the routes (Board.Mount) on its admin mux; this package does not
// import the gateway.
package dashboard
