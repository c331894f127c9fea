package sim

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
)

// TestClientCallersRunTheClientsRetrier: a client caller refused without a
// Retry-After waits exactly what client.Retrier says for the simulator's
// draw, so that a change to the client's defaults or rules is measured by
// the simulator rather than drifting from a copy of them.
//
// One slot, calls of a quarter of DefaultBackoff, a queue of one: #0 and
// #1 arrive at 0 and are served back to back; #2 finds the queue full, and
// its retry, at least half of DefaultBackoff later, finds the slot free and
// is answered one call later. A deadline that ends at that answer is met;
// one a millisecond earlier is not. (Were the simulator's caller a copy of
// the client with other constants, its retry would come at another time and
// one of the two would fail.)
func TestClientCallersRunTheClientsRetrier(t *testing.T) {
	service := client.DefaultBackoff / 4
	r, err := client.NewRetrier(client.Config{ThrottleK: client.DefaultThrottleK})
	if err != nil {
		t.Fatal(err)
	}
	r.Begin(epoch, 0)
	const seq = 2 // the third call of source 0
	wait, stop := r.Next(epoch, client.Failure{U: uniform(0, saltJitter, seq, 0)})
	if stop != "" || wait <= 2*service {
		t.Fatalf("the client would retry after %v (%q): the test wants a retry after the slot frees at %v", wait, stop, 2*service)
	}
	for _, tc := range []struct {
		deadline       time.Duration
		onTime, wasted int
		refusals       map[string]int
	}{
		{deadline: wait + service, onTime: 3, refusals: map[string]int{"queue_full": 1}},
		// The caller leaves while the retry is served: it times out, and
		// the answer is billed for nothing.
		{deadline: wait + service - time.Millisecond, onTime: 2, wasted: 1, refusals: map[string]int{"queue_full": 1, "timeout": 1}},
	} {
		sc := exact(tc.deadline)
		sc.Seed = 0
		sc.Upstream.Service.Lognormal.Median = service
		sc.Traffic[0].Client = "client"
		sc.Traffic[0].MaxAttempts = 3
		sc.Baselines.SmallQueue = 1
		check(t, runScripted(t, sc, "small-queue", []int{0, 0, 0}),
			want{onTime: tc.onTime, billed: 3, attempts: 4, wasted: tc.wasted, refusals: tc.refusals})
	}
}
