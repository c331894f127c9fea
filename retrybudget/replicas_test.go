package retrybudget

import (
	"fmt"
	"testing"
	"time"
)

// TestReplicasCompose: N budgets, one per gateway replica, fed round-robin
// by a load balancer, with every first attempt followed by as many retries
// as the budgets allow. Each budget starts empty and spends only what it
// earned, so each replica's retries are at most Ratio × its first attempts
// + MinPerSecond × the elapsed time, and the cluster's at most Ratio × all
// first attempts + N × MinPerSecond × the time: the ratio composes across
// replicas, the floor adds up. The totals reach the bound (less the tokens
// left over at the end), so the bound is what a fleet should plan for.
// docs/replicas.md states it.
func TestReplicasCompose(t *testing.T) {
	const (
		ratio    = 0.1
		floor    = 2.0 // tokens per second per replica
		rps      = 500 // first attempts per second, the whole fleet
		duration = 60 * time.Second
		retries  = 3 // each failing request tries this many retries
	)
	first := int(rps * duration.Seconds())
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprint(n, "replicas"), func(t *testing.T) {
			budgets := make([]*Budget, n)
			for i := range budgets {
				b, err := New(Config{Ratio: ratio, MinPerSecond: floor, MaxTokens: 1000})
				if err != nil {
					t.Fatal(err)
				}
				budgets[i] = b
			}
			allowed := 0
			for k := range first {
				now := t0.Add(time.Duration(k) * time.Second / rps)
				b := budgets[k%n] // round-robin
				b.Deposit(now)
				for range retries {
					if b.TryWithdraw(now) {
						allowed++
					}
				}
			}
			elapsed := time.Duration(first-1) * time.Second / rps
			bound := ratio*float64(first) + float64(n)*floor*elapsed.Seconds()
			t.Logf("%d replicas: %d retries for %d first attempts; bound %.0f (ratio part %.0f, floor part %d × %.0f/s × %v)",
				n, allowed, first, bound, ratio*float64(first), n, floor, elapsed)
			if float64(allowed) > bound {
				t.Errorf("%d retries, over the bound %.1f", allowed, bound)
			}
			// Each budget ends with less than one token unspent.
			if float64(allowed) < bound-float64(n) {
				t.Errorf("%d retries, want the bound %.1f less at most %d leftover tokens", allowed, bound, n)
			}
		})
	}
}
