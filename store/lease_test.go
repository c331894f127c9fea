package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/redistest"
)

// Ranks in these tests: 0 speculative, 1 batch, 2 interactive (a higher
// rank is served first, as in package admission).
func TestDivide(t *testing.T) {
	for _, tc := range []struct {
		name   string
		total  int
		demand [][]int
		want   []int
	}{
		{"nobody", 16, nil, []int{}},
		{"alone, idle: every slot", 16, [][]int{{0, 0, 0}}, []int{16}},
		{"alone, busy", 16, [][]int{{100, 0, 0}}, []int{16}},
		{"three idle: spread evenly, the remainder by order", 16, [][]int{{}, {}, {}}, []int{6, 5, 5}},
		{"ranks first: interactive on B before speculative on A", 16,
			[][]int{{100, 0, 0}, {0, 0, 10}}, []int{6, 10}},
		{"interactive demand beyond the slots takes them all but A's floor", 16,
			[][]int{{100, 0, 0}, {0, 0, 40}}, []int{1, 15}},
		{"max-min within a rank", 16,
			[][]int{{0, 0, 2}, {0, 0, 30}, {0, 0, 30}}, []int{2, 7, 7}},
		{"max-min, the remainder in order", 16,
			[][]int{{0, 0, 30}, {0, 0, 30}, {0, 0, 30}}, []int{6, 5, 5}},
		{"a rank below gets what the one above leaves", 16,
			[][]int{{0, 20, 4}, {50, 0, 4}}, []int{12, 4}},
		{"idle slots spread so a quiet replica has some", 16,
			[][]int{{0, 0, 4}, {0, 0, 0}, {0, 0, 0}}, []int{8, 4, 4}},
		{"more replicas than slots: one each all the same", 2,
			[][]int{{5}, {5}, {5}}, []int{1, 1, 1}},
		{"ranks of different lengths", 10, [][]int{{3}, {0, 0, 0, 9}}, []int{1, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Divide(tc.total, tc.demand)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Divide(%d, %v) = %v, want %v", tc.total, tc.demand, got, tc.want)
			}
			sum := 0
			for _, g := range got {
				sum += g
			}
			if len(got) > 0 && sum != max(tc.total, len(got)) {
				t.Fatalf("the division hands out %d slots, want %d", sum, max(tc.total, len(got)))
			}
		})
	}
}

var lt0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func lat(ms int) time.Time { return lt0.Add(time.Duration(ms) * time.Millisecond) }

// step is one renewal and the lease the table must answer (0: not checked).
type step struct {
	q    LeaseRequest
	want int
}

func renew(id string, ms int, demand []int, inFlight, current int) LeaseRequest {
	return LeaseRequest{ID: id, Now: lat(ms), TTL: 3 * time.Second, Demand: demand, InFlight: inFlight, Current: current, Limit: 16}
}

// leaseStory is a cluster's life in renewals: A alone, B joins with
// interactive work, A gives slots up only as its calls drain, C joins with
// a lower limit (a 429 it saw), B dies and its slots come back to the
// others after the TTL, and a replica back from its local share asks no
// more than Max.
func leaseStory() []step {
	limited := renew("C", 600, []int{0, 0, 0}, 0, 1)
	limited.Limit = 8
	capped := renew("B", 9000, []int{0, 0, 40}, 0, 5)
	capped.Max = 5
	return []step{
		{renew("A", 0, []int{100, 0, 0}, 0, 1), 16},
		// B joins: its floor slot, though A holds all 16 (the bound's +1).
		{renew("B", 10, []int{0, 0, 10}, 0, 1), 1},
		// A's target is 6, its lease 6; its calls in flight still hold 16.
		{renew("A", 200, []int{100, 0, 0}, 16, 16), 6},
		// B's target is 10, but A's 16 in flight leave none: 1.
		{renew("B", 210, []int{0, 0, 10}, 1, 1), 1},
		// A's calls drained to its lease: B gets its 10.
		{renew("A", 400, []int{60, 0, 0}, 6, 6), 6},
		{renew("B", 410, []int{0, 0, 10}, 1, 1), 10},
		// C joins having seen a 429: the cluster divides 8.
		{limited, 1},
		{renew("B", 610, []int{0, 0, 10}, 10, 10), 1},
		{renew("A", 620, []int{60, 0, 0}, 6, 6), 1},
		// B stops renewing (dead); after its 3s TTL A and C share.
		{renew("A", 3000, []int{60, 0, 0}, 1, 1), 1},
		{renew("A", 3700, []int{60, 0, 0}, 1, 1), 0},
		{renew("C", 3800, []int{60, 0, 0}, 0, 1), 0},
		{renew("A", 4000, []int{60, 0, 0}, 1, 1), 0},
		// C gone too (its row expires at 6800); A alone gets all 16 again.
		{renew("A", 7000, []int{60, 0, 0}, 4, 4), 16},
		// B back from a local share of 5: at most 5 however much it wants.
		{capped, 1},
		{renew("A", 9100, []int{60, 0, 0}, 16, 16), 1},
	}
}

// TestLeaseTable pins the story's leases: ranks first, slots handed over
// only as the calls holding them drain, the smallest limit divided, a dead
// replica's slots back after its TTL, Max respected.
func TestLeaseTable(t *testing.T) {
	var tab LeaseTable
	for i, s := range leaseStory() {
		g, err := tab.Renew(s.q)
		if err != nil {
			t.Fatal(err)
		}
		if s.want != 0 && g.Lease != s.want {
			t.Fatalf("step %d (%s at %v): lease %d (target %d, total %d, live %d), want %d",
				i, s.q.ID, s.q.Now.Sub(lt0), g.Lease, g.Target, g.Total, g.Live, s.want)
		}
	}
}

// TestLeaseTTL: a replica that stops renewing keeps its row for exactly
// the TTL; then the others' targets take its slots back.
func TestLeaseTTL(t *testing.T) {
	var tab LeaseTable
	mustRenew := func(q LeaseRequest) LeaseGrant {
		t.Helper()
		g, err := tab.Renew(q)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
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

func TestLeaseRequestValidation(t *testing.T) {
	var tab LeaseTable
	ok := renew("a", 0, []int{1}, 0, 1)
	for _, mut := range []func(*LeaseRequest){
		func(q *LeaseRequest) { q.ID = "" },
		func(q *LeaseRequest) { q.ID = "a b" },
		func(q *LeaseRequest) { q.TTL = 0 },
		func(q *LeaseRequest) { q.Limit = 0 },
		func(q *LeaseRequest) { q.Demand = make([]int, MaxLeaseRanks+1) },
		func(q *LeaseRequest) { q.Demand = []int{-1} },
		func(q *LeaseRequest) { q.InFlight = -1 },
		func(q *LeaseRequest) { q.Now = time.Time{} },
	} {
		q := ok
		mut(&q)
		if _, err := tab.Renew(q); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
}

// randomStory is n renewals by a handful of replicas at random times,
// demands, limits and caps.
func randomStory(seed uint64, n int) []LeaseRequest {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids := []string{"a", "B", "c-1", "c.2", "z", "aa"}
	ms := 0
	var out []LeaseRequest
	for range n {
		ms += rng.IntN(900)
		q := renew(ids[rng.IntN(len(ids))], ms, nil, rng.IntN(20), 1+rng.IntN(16))
		for range rng.IntN(5) {
			q.Demand = append(q.Demand, []int{0, 0, 1, 3, 50}[rng.IntN(5)])
		}
		q.Limit = []int{16, 16, 16, 8, 3, 1}[rng.IntN(6)]
		if rng.IntN(5) == 0 {
			q.Max = 1 + rng.IntN(6)
		}
		q.TTL = time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		out = append(out, q)
	}
	return out
}

// TestLeaseScriptMatchesGo: the Lua script on a real Redis answers every
// renewal of the story and of random stories exactly as LeaseTable does.
func TestLeaseScriptMatchesGo(t *testing.T) {
	srv := redistest.Start(t)
	var stories [][]LeaseRequest
	var story []LeaseRequest
	for _, s := range leaseStory() {
		story = append(story, s.q)
	}
	stories = append(stories, story)
	for seed := range uint64(20) {
		stories = append(stories, randomStory(seed, 60))
	}
	ctx := context.Background()
	for i, st := range stories {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			l := NewLeases(newRedis(t, srv, clusterName(t), Options{}))
			var tab LeaseTable
			for j, q := range st {
				want, err := tab.Renew(q)
				if err != nil {
					t.Fatal(err)
				}
				got, err := l.Renew(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("renewal %d %+v: Redis %+v, Go %+v", j, q, got, want)
				}
			}
		})
	}
}

// TestLeasesOnRedis: rows and the table expire on Redis's own clock (Now
// zero), Release frees a row at once, and the key has a TTL.
func TestLeasesOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	r := newRedis(t, srv, clusterName(t), Options{})
	l := NewLeases(r)
	ctx := context.Background()
	q := LeaseRequest{ID: "a", TTL: 300 * time.Millisecond, Demand: []int{0, 5}, Current: 1, Limit: 16}
	if g, err := l.Renew(ctx, q); err != nil || g.Lease != 16 || g.Live != 1 {
		t.Fatalf("%+v %v", g, err)
	}
	q.ID = "b"
	if g, err := l.Renew(ctx, q); err != nil || g.Live != 2 {
		t.Fatalf("%+v %v", g, err)
	}
	ttl, err := r.client.PTTL(ctx, r.Key("leases")).Result()
	if err != nil || ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("the table's TTL is %v (%v), want (0, 300ms]", ttl, err)
	}
	if err := l.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if rows, err := l.Rows(ctx); err != nil || len(rows) != 1 || rows["b"] == 0 {
		t.Fatalf("rows after a's release: %v %v", rows, err)
	}
	// Nobody renews: the table is gone after the TTL.
	eventually(t, 5*time.Second, "the lease table expired", func() bool {
		n, err := r.client.Exists(ctx, r.Key("leases")).Result()
		return err == nil && n == 0
	})
}
