package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/leasetest"
	"github.com/sluicehq/sluice/store/redistest"
)

// TestLeaseScriptMatchesGo: the Lua script on a real Redis answers every
// renewal of the story and of random stories exactly as lease.Table does.
func TestLeaseScriptMatchesGo(t *testing.T) {
	srv := redistest.Start(t)
	var stories [][]lease.Request
	var story []lease.Request
	for _, s := range leasetest.Story() {
		story = append(story, s.Request)
	}
	stories = append(stories, story)
	for seed := range uint64(20) {
		stories = append(stories, leasetest.Random(seed, 60))
	}
	ctx := context.Background()
	for i, st := range stories {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			l := NewLeases(newRedis(t, srv, clusterName(t), Options{}))
			var tab lease.Table
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
	q := lease.Request{ID: "a", TTL: 300 * time.Millisecond, Demand: []int{0, 5}, Current: 1, Limit: 16}
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
	testkit.EventuallyWithin(t, 5*time.Second, "the lease table expired", func() bool {
		n, err := r.client.Exists(ctx, r.Key("leases")).Result()
		return err == nil && n == 0
	})
}
