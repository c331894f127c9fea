//go:build race

package gateway

// raceBuild: the learned-concurrency e2e tests measure throughput over
// real HTTP, which the race detector would measure instead: they run
// without it (.ci/run).
const raceBuild = true
