package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store/redistest"
)

// TestBatchAppliedOnce: a batch whose write reached Redis but whose answer
// was lost (a timeout) is written again at the next sync — and counted
// once, by its marker. Without the marker the bucket would read double.
func TestBatchAppliedOnce(t *testing.T) {
	srv := redistest.Start(t)
	r := newRedis(t, srv, clusterName(t), Options{})
	l := newLedger(t, r, LedgerOptions{})
	ctx := context.Background()
	now := time.Now()
	if err := l.Add(ctx, now, []spend.Entry{{Scope: "s", At: now, Amount: 7}}); err != nil {
		t.Fatal(err)
	}
	// The first attempt: taken from the queue and applied by Redis, its
	// acknowledgement lost — the batch stays in flight.
	l.mu.Lock()
	b := l.takeLocked()
	l.mu.inflight = b
	l.mu.Unlock()
	keys := append([]string{r.Key("batch", l.replica, b.id)}, b.keys...)
	args := append([]any{markerTTL.Milliseconds(), int64(bucketTTL / time.Second)}, b.amounts...)
	if err := r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		return flushScript.Run(ctx, c, keys, args...).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx); err != nil { // the retry
		t.Fatal(err)
	}
	var got int64
	if err := r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		got, err = c.Get(ctx, l.bucketKey("s", minuteOf(now))).Int64()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got != 7 {
		t.Errorf("bucket after a retried batch: %d, want 7", got)
	}
	var ttl time.Duration
	_ = r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		ttl, err = c.TTL(ctx, l.bucketKey("s", minuteOf(now))).Result()
		return err
	})
	if ttl < spend.MinRetention {
		t.Errorf("bucket TTL %v, want at least MinRetention %v", ttl, spend.MinRetention)
	}
	if s, _ := l.Sum(ctx, "s", now, now); s != 7 || l.Queued() != 0 {
		t.Errorf("view %d, queued %d; want 7 and 0", s, l.Queued())
	}
}

// BenchmarkLedgerAdd is the request path's cost of the shared ledger: one
// Add of the three scopes a call books (global, tenant, model), against a
// Redis that is never called (the loop is not running).
func BenchmarkLedgerAdd(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	r, err := NewRedis(Options{Client: c, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	l, err := NewLedger(r, LedgerOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	entries := []spend.Entry{
		{Scope: spend.GlobalScope, At: now, Amount: 1},
		{Scope: spend.TenantScope("a"), At: now, Amount: 1},
		{Scope: spend.ModelScope("m"), At: now, Amount: 1},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = l.Add(ctx, now, entries)
		}
	})
}

// BenchmarkMemoryLedgerAdd is the same Add on the in-process ledger alone.
func BenchmarkMemoryLedgerAdd(b *testing.B) {
	l := spend.NewMemoryLedger()
	ctx := context.Background()
	now := time.Now()
	entries := []spend.Entry{
		{Scope: spend.GlobalScope, At: now, Amount: 1},
		{Scope: spend.TenantScope("a"), At: now, Amount: 1},
		{Scope: spend.ModelScope("m"), At: now, Amount: 1},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = l.Add(ctx, now, entries)
		}
	})
}
