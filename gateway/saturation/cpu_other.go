//go:build !unix

package saturation

import "time"

// processCPU cannot be read here: the Sampler then reports the process as
// busy, and the scheduling delay alone decides.
func processCPU() (time.Duration, bool) { return 0, false }
