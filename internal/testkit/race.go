//go:build race

package testkit

// Race is true when the test binary is built with the race detector
// (-race). The detector slows every goroutine several-fold, so a test
// that measures speed (a latency bound, a throughput floor) would measure
// the detector: such a test skips the bound, or runs a smaller load, when
// Race is set, and .ci/run runs it again without the detector.
const Race = true
