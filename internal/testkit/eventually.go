package testkit

import (
	"testing"
	"time"
)

// eventuallyLimit is Eventually's limit: generous, because under the race
// detector on two shared cores a provider's answer can take seconds, and
// free while the test passes, since the wait ends as soon as the condition
// holds.
const eventuallyLimit = 10 * time.Second

// pollEvery is how long a wait sleeps between two looks at its condition:
// short beside the events waited for, long enough that the polling does
// not compete with them for the CPU.
const pollEvery = 5 * time.Millisecond

// Eventually waits up to 10 s for cond, polling it, and fails the test,
// naming what, if cond does not hold by then.
//
// It is for conditions another process makes true — a provider over real
// HTTP, a Redis over real TCP, a server's goroutine writing its log after
// the client has its answer — at a moment the test cannot observe
// directly. A unit test does not poll: it runs its blocking paths in a
// testing/synctest bubble, or takes time as an input, and knows when.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, eventuallyLimit, what, cond)
}

// EventuallyWithin is Eventually with a limit of the caller's, for a test
// whose limit is part of what it asserts ("the replicas agree within
// 2s"). It returns how long cond took to hold, for the test to log.
func EventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(start)
}
