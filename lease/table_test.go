package lease_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/leasetest"
)

// TestTable pins the story's leases: ranks first, slots handed over only
// as the calls holding them drain, the smallest limit divided, a dead
// replica's slots back after its TTL, Max respected.
func TestTable(t *testing.T) {
	var tab lease.Table
	for i, s := range leasetest.Story() {
		g, err := tab.Renew(s.Request)
		if err != nil {
			t.Fatal(err)
		}
		if s.Want != 0 && g.Lease != s.Want {
			t.Fatalf("step %d (%s at %v): lease %d (target %d, total %d, live %d), want %d",
				i, s.Request.ID, s.Request.Now.Sub(leasetest.T0), g.Lease, g.Target, g.Total, g.Live, s.Want)
		}
	}
}

// TestTTL: a replica that stops renewing keeps its row for exactly the
// TTL; then the others' targets take its slots back.
func TestTTL(t *testing.T) {
	var tab lease.Table
	mustRenew := func(q lease.Request) lease.Grant {
		t.Helper()
		g, err := tab.Renew(q)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	renew := leasetest.Renewal
	mustRenew(renew("dead", 0, []int{0, 0, 8}, 8, 8))
	if g := mustRenew(renew("live", 2999, []int{0, 0, 16}, 0, 1)); g.Live != 2 || g.Target != 8 {
		t.Fatalf("before the TTL: %+v, want 2 live, a target of 8", g)
	}
	if g := mustRenew(renew("live", 3000, []int{0, 0, 16}, 1, 1)); g.Live != 1 || g.Lease != 16 {
		t.Fatalf("at the TTL: %+v, want 1 live and all 16 slots", g)
	}
	tab.Release("live")
	if g := mustRenew(renew("other", 3001, nil, 0, 1)); g.Live != 1 || g.Lease != 16 {
		t.Fatalf("after a release: %+v", g)
	}
}

func TestRequestValidation(t *testing.T) {
	var tab lease.Table
	ok := leasetest.Renewal("a", 0, []int{1}, 0, 1)
	for _, mut := range []func(*lease.Request){
		func(q *lease.Request) { q.ID = "" },
		func(q *lease.Request) { q.ID = "a b" },
		func(q *lease.Request) { q.TTL = 0 },
		func(q *lease.Request) { q.Limit = 0 },
		func(q *lease.Request) { q.Demand = make([]int, lease.MaxRanks+1) },
		func(q *lease.Request) { q.Demand = []int{-1} },
		func(q *lease.Request) { q.InFlight = -1 },
		func(q *lease.Request) { q.Now = time.Time{} },
	} {
		q := ok
		mut(&q)
		if _, err := tab.Renew(q); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
}
