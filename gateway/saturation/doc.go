// Package saturation sheds new calls when the gateway's own CPU, not the
// provider, is the bottleneck.
//
// Admission (package admission) refuses by the provider's capacity: slots,
// the waiting room, deadlines. When the gateway's cores are saturated —
// thousands of short calls a second on a small machine — every request is
// read, parsed, admitted and proxied late, and the latency of all of them
// grows together: a queue nobody bounds, in front of the CPU. This package
// bounds it the way the gate bounds the provider's: by time, refusing early
// and cheaply.
//
// # The signal: scheduling delay
//
// The Go runtime's /sched/latencies:seconds histogram (runtime/metrics) is
// the time runnable goroutines waited for a core. It is near zero while
// there is CPU to spare and grows as soon as there is not, whatever took
// the CPU (the gateway's own work, or another process on the machine); it
// is what saturation costs every request. CPU utilisation would not do:
// two cores at 100% with short run queues serve well, and a neighbour's
// use does not show. The Sampler turns the cumulative histogram into a
// quantile per window (the p99 of the delays of the last window).
//
// The delay counts as the saturation of the gateway's calls only while the
// process used at least MinBusy (a quarter) of the cores GOMAXPROCS gives
// it, and is handling at least MinCallsPerCore calls a core (in flight and
// waiting for a slot): a gateway doing little on a machine a neighbour has
// saturated, or whose CPU goes to other work than calls (a flood of
// connections its guard refuses), would shed its callers and relieve
// nothing. Otherwise nothing is cut and what was is given back: on a
// crowded machine the gateway keeps at least that share of its cores busy
// serving.
//
// # The rule: AIMD on the admitted fraction
//
// A Shedder keeps the fraction of new calls it admits. After a second
// window in a row whose delay is above the target (one alone may be a
// garbage collection's or a burst's), the fraction is cut by a fifth, or
// in the ratio of the target to the delay when that is deeper, at most by
// half (an overload that feeds itself must be stopped within windows) —
// unless the delay fell by a fifth or more since the window before: the
// backlog the last cut left is draining, and cutting again for it would
// shed far more than the overload. After a window below half the target
// the fraction grows by a fiftieth of the whole; between the two it holds
// (the hysteresis keeps it from chattering around the target). It never sheds more than MaxShed of the calls: some calls are
// always served, so the latency keeps being measured and callers keep
// being answered. A probabilistic shed keeps no per-client state and is
// fair across clients by construction.
//
// # Who is shed: lowest rank first
//
// The shed fraction is taken from the lowest ranks first — the gate's
// ranks, from the headers (class, declared attempt, the tenant's tier):
// speculative, then retries, then low tiers and batch, interactive last.
// The Shedder counts the arrivals of each rank in a window and, for the
// next, sheds every call of the lowest ranks and a share of the rank where
// the fraction runs out.
//
// # Where
//
// The gateway asks before it reads the body, so a refusal costs the
// headers already read and an answer of a few hundred bytes: a 503
// queue_full with Retry-After. Open streams are never shed: they cost a
// chunk's copy each, and cutting them would waste what the provider has
// already spent.
//
// Time is an input: Shedder.Observe takes the window's delay and CPU
// share, Sampler.Read the time; only Run reads the clock.
package saturation
