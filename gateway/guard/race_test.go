//go:build race

package guard_test

// raceEnabled: the race detector slows every goroutine several-fold, the
// flood's included, so that a latency measured under it is the detector's;
// TestBehindHAProxy then checks everything but its latency bound, which
// .ci/run checks in a run of its own without the detector.
const raceEnabled = true
