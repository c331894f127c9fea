//go:build unix

package gateway

import "syscall"

// cpuNanos is the CPU time (user and system) the process has used so far:
// on a shared machine it measures the work of a benchmark — the client's,
// the gateway's and the provider's, all in this process — far more steadily
// than the wall clock, which counts the time other processes held the CPU.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
