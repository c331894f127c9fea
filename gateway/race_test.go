//go:build race

package gateway

// raceBuild: the e2e tests that measure throughput over real HTTP — the
// learned concurrency, and the goodput floors of several deployments —
// would measure the race detector instead (and, in the race run of every
// package at once, the other packages' tests beside them): they skip
// under it, and .ci/run runs them without it.
const raceBuild = true
