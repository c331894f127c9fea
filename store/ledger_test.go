package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/spend/spendtest"
	"github.com/sluicehq/sluice/store/redistest"
)

func newLedger(t *testing.T, r *Redis, o LedgerOptions) *Ledger {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	l, err := NewLedger(r, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// run runs l's loop until the test ends.
func run(t *testing.T, l *Ledger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// TestLedgerSuite runs the shared Ledger suite twice: against one Redis
// ledger whose loop syncs every millisecond while the suite writes and
// reads (the view must stay exact while Redis's values are merged into
// it), and against a pair of replicas, writing through one and reading
// through the other, so that every bucket the suite reads came from Redis.
func TestLedgerSuite(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("Syncing", func(t *testing.T) {
		spendtest.Run(t, func(t *testing.T) spend.Ledger {
			l := newLedger(t, newRedis(t, srv, clusterName(t), Options{}), LedgerOptions{SyncInterval: time.Millisecond})
			run(t, l)
			return l
		})
	})
	t.Run("ThroughRedis", func(t *testing.T) {
		spendtest.Run(t, func(t *testing.T) spend.Ledger {
			clk := &clock{}
			r := newRedis(t, srv, clusterName(t), Options{})
			return &pair{t: t, w: newLedger(t, r, LedgerOptions{Now: clk.Now}), redis: r, clk: clk}
		})
	})
}

// pair is two replicas as one Ledger: Add writes through one and syncs it;
// each read is answered by a new replica, whose first sync pulled the
// scope from Redis. The replicas' clock follows the suite's now.
type pair struct {
	t     *testing.T
	w     *Ledger
	redis *Redis
	clk   *clock
	mu    sync.Mutex // the suite's concurrent adds: one write-and-sync at a time
}

func (p *pair) Add(ctx context.Context, now time.Time, entries []spend.Entry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clk.Set(now)
	if err := p.w.Add(ctx, now, entries); err != nil {
		return err
	}
	if err := p.w.Sync(ctx); err != nil {
		p.t.Errorf("writer Sync: %v", err)
	}
	return nil
}

// reader is a new replica that has pulled scope.
func (p *pair) reader(ctx context.Context, scope string) *Ledger {
	r := newLedger(p.t, p.redis, LedgerOptions{Now: p.clk.Now})
	_ = r.Buckets(ctx, scope, time.Time{}, nil) // a read puts the scope in use
	if err := r.Sync(ctx); err != nil {
		p.t.Errorf("reader Sync: %v", err)
	}
	return r
}

func (p *pair) Buckets(ctx context.Context, scope string, last time.Time, dst []int64) error {
	if scope == "" {
		return p.w.Buckets(ctx, scope, last, dst)
	}
	return p.reader(ctx, scope).Buckets(ctx, scope, last, dst)
}

func (p *pair) Sum(ctx context.Context, scope string, first, last time.Time) (int64, error) {
	if scope == "" {
		return p.w.Sum(ctx, scope, first, last)
	}
	return p.reader(ctx, scope).Sum(ctx, scope, first, last)
}
