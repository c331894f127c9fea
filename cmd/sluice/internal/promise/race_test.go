//go:build race

package promise

// raceEnabled: the suite over HTTP measures the gateway's speed as much as
// its policy, and under the race detector it is several times slower: the
// HTTP run is left to the run without it (.ci/run).
const raceEnabled = true
