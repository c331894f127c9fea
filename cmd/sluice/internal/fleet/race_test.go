//go:build race

package fleet

import "time"

// The race detector makes every request several times dearer: under it the
// tests' provider is slower, so that the same multiple of its capacity is
// a quarter of the requests.
const median = time.Second

// maxWaste is the share of billed calls the storm test lets be wasted.
// Under the race detector the gateways' own work, slowed and starved on
// two shared cores, outruns the wait estimates: a few callers leave while
// their calls run (3–4% in runs beside the rest of the suite, against 0%
// without it; docs/perf.md).
const maxWaste = 0.05
