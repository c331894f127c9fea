//go:build unix

package saturation

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used so
// far, and whether it could be read.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
