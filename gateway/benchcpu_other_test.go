//go:build !unix

package gateway

// cpuNanos is not measured here: the benchmarks report wall time only.
func cpuNanos() int64 { return 0 }
