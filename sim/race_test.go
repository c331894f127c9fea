//go:build race

package sim

// raceEnabled: the race detector slows the simulator about tenfold, so the
// headline tests run fewer requests (and still assert).
const raceEnabled = true
