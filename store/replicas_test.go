package store

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store/redistest"
)

// unitConfig prices "unit" at $0.001 per input token: a request's
// EstimatedInputTokens is its cost in tenths of a cent.
func unitConfig() spend.Config {
	return spend.Config{
		Prices:  map[string]spend.Price{"unit": {InputPerMTok: 1000}},
		Tenants: map[string]spend.TenantBudget{"t": {PerDay: 10}},
	}
}

func newLimiter(t *testing.T, cfg spend.Config, l spend.Ledger) *spend.Limiter {
	t.Helper()
	s, err := spend.New(cfg, spend.Options{Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// call admits and settles one call of tokens/1000 USD for tenant t at the
// top rank (refused last, at 100% of the budget). It reports whether it
// was admitted; a ledger error reaching the Limiter fails the test.
func call(t *testing.T, l *spend.Limiter, now time.Time, tokens int64) bool {
	d, err := l.Admit(now, spend.Request{Tenant: "t", Model: "unit", Rank: 5, EstimatedInputTokens: tokens})
	if err != nil {
		t.Error(err)
		return false
	}
	if !d.Allow {
		return false
	}
	if _, err := l.Reconcile(now, d.Reservation, contract.Usage{Input: tokens}, true); err != nil {
		t.Error(err)
	}
	return true
}

// TestThreeReplicasKeepOneBudget: three Limiters (replicas) on one Redis,
// four workers each calling concurrently, keep tenant t's $10 daily budget
// — and, in a config with no tenant budget, the global ceiling of $120 an
// hour, $10 in its 5-minute window with the clock held still — within 5%,
// each replica admitting at most eight calls ($0.08) between two syncs. The
// same load on three replicas with books of their own spends three times
// the limit: the control shows the harness measures the sharing.
func TestThreeReplicasKeepOneBudget(t *testing.T) {
	srv := redistest.Start(t)
	const replicas, workers, perSync, tokens = 3, 4, 2, 10 // $0.01 a call
	now := time.Now()
	ceiling := spend.Config{Prices: unitConfig().Prices, CeilingPerHour: 120}
	load := func(t *testing.T, cfg spend.Config, ledgers []spend.Ledger, syncAll func()) float64 {
		limiters := make([]*spend.Limiter, len(ledgers))
		for i := range limiters {
			limiters[i] = newLimiter(t, cfg, ledgers[i])
		}
		var admitted atomic.Int64
		for round := 0; ; round++ {
			var wg sync.WaitGroup
			before := admitted.Load()
			for _, l := range limiters {
				for range workers {
					wg.Go(func() {
						for range perSync {
							if call(t, l, now, tokens) {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			syncAll()
			if admitted.Load() == before || round > 10_000 {
				break
			}
		}
		return float64(admitted.Load()*tokens) / 1000
	}
	for _, tc := range []struct {
		name string
		cfg  spend.Config
	}{{"TenantBudget", unitConfig()}, {"GlobalCeiling", ceiling}} {
		t.Run(tc.name+"/Shared", func(t *testing.T) {
			cluster := clusterName(t)
			clk := &clock{t: now}
			ledgers := make([]*Ledger, replicas)
			shared := make([]spend.Ledger, replicas)
			for i := range ledgers {
				ledgers[i] = newLedger(t, newRedis(t, srv, cluster, Options{}), LedgerOptions{Now: clk.Now})
				shared[i] = ledgers[i]
			}
			spent := load(t, tc.cfg, shared, func() {
				var wg sync.WaitGroup
				for _, l := range ledgers {
					wg.Go(func() {
						if err := l.Sync(context.Background()); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
			})
			t.Logf("%d replicas sharing a $10 limit spent $%.2f", replicas, spent)
			if spent > 10*1.05 || spent < 10*0.95 {
				t.Errorf("%d replicas spent $%.2f of a $10 limit, want within 5%%", replicas, spent)
			}
		})
		t.Run(tc.name+"/Control", func(t *testing.T) {
			own := make([]spend.Ledger, replicas)
			for i := range own {
				own[i] = spend.NewMemoryLedger()
			}
			spent := load(t, tc.cfg, own, func() {})
			if spent < 10*replicas*0.95 {
				t.Errorf("%d replicas with books of their own spent $%.2f, want about %d times the $10 limit", replicas, spent, replicas)
			}
		})
	}
}

func daySum(t *testing.T, l *Ledger, now time.Time) int64 {
	s, err := l.Sum(context.Background(), spend.TenantScope("t"), now.Add(-24*time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRedisDownAndBack: with Redis stopped mid-run, both replicas keep
// admitting from their local views, no error reaches the Limiter, and
// sluice_store_up reads 0; when Redis is back, the spend each booked
// meanwhile reaches the shared books and both views agree within 2s —
// with the default sync interval and breaker.
func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	cluster := clusterName(t)
	ra := newRedis(t, srv, cluster, Options{Timeout: DefaultTimeout})
	rb := newRedis(t, srv, cluster, Options{Timeout: DefaultTimeout})
	a, b := newLedger(t, ra, LedgerOptions{}), newLedger(t, rb, LedgerOptions{})
	run(t, a)
	run(t, b)
	la, lb := newLimiter(t, unitConfig(), a), newLimiter(t, unitConfig(), b)
	// Nano-dollars of one call of 10 tokens ($0.01).
	const callNano = 10_000_000
	book := func(n int) {
		for range n {
			if !call(t, la, time.Now(), 10) || !call(t, lb, time.Now(), 10) {
				t.Fatal("a call under the budget was refused")
			}
		}
	}
	agree := func(want int64) func() bool {
		return func() bool {
			now := time.Now()
			return daySum(t, a, now) == want && daySum(t, b, now) == want && a.Queued() == 0 && b.Queued() == 0
		}
	}
	book(5)
	testkit.EventuallyWithin(t, 5*time.Second, "the replicas agree on 10 calls", agree(10*callNano))

	srv.Stop()
	book(20)
	testkit.EventuallyWithin(t, 5*time.Second, "sluice_store_up 0 on both replicas", func() bool {
		return testutilValue(ra.up) == 0 && testutilValue(rb.up) == 0
	})
	book(20)
	now := time.Now()
	if got := daySum(t, a, now); got != 50*callNano {
		t.Errorf("with Redis down, replica a's view = %d, want its own 50 calls %d", got, 50*callNano)
	}
	if a.Queued() == 0 || b.Queued() == 0 {
		t.Errorf("with Redis down, queued %d and %d, want the spend booked meanwhile", a.Queued(), b.Queued())
	}
	for _, l := range []*spend.Limiter{la, lb} {
		if n := l.Snapshot(now).LedgerErrors; n != 0 {
			t.Errorf("ledger errors reached the Limiter: %d", n)
		}
	}

	srv.Restart()
	took := testkit.EventuallyWithin(t, 2*time.Second, "the replicas agree on all 90 calls", agree(90*callNano))
	t.Logf("converged %v after Redis came back", took.Round(time.Millisecond))
	if testutilValue(ra.up) != 1 {
		t.Error("sluice_store_up stays 0 after Redis came back")
	}
}

// TestAlertOncePerCluster: both replicas see the global rate cross its
// alert threshold, and the webhook hears of it once; once for its
// resolution, and once again when it fires again. With Redis unreachable
// each replica delivers its own.
func TestAlertOncePerCluster(t *testing.T) {
	srv := redistest.Start(t)
	var posts atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posts.Add(1) }))
	defer hook.Close()
	cfg := unitConfig()
	cfg.AlertPerHour = 1 // $1/h: $0.0834 in the 5-minute window
	cfg.AlertWebhook = hook.URL
	cluster := clusterName(t)
	now := time.Now()
	clk := &clock{t: now}
	var ledgers []*Ledger
	var alerters []*spend.Alerter
	var limiters []*spend.Limiter
	for i := range 2 {
		r := newRedis(t, srv, cluster, Options{})
		l := newLedger(t, r, LedgerOptions{Now: clk.Now})
		s := newLimiter(t, cfg, l)
		s.Snapshot(now) // reads every scope, as a replica's first request would
		ledgers, limiters = append(ledgers, l), append(limiters, s)
		alerters = append(alerters, spend.NewAlerter(s, spend.AlerterOptions{Logger: quiet, Claim: AlertClaim(r, string(rune('a'+i)))}))
	}
	step := func(at time.Time, wantPosts int64, wantEvents string) {
		t.Helper()
		clk.Set(at)
		// Twice: the first round writes each replica's spend, the second
		// brings it to the other.
		for _, l := range append(ledgers, ledgers...) {
			if err := l.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for i, a := range alerters {
			evs, err := a.Tick(context.Background(), at)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].State != wantEvents {
				t.Fatalf("replica %d at %v: events %+v, want one %s", i, at, evs, wantEvents)
			}
		}
		if got := posts.Load(); got != wantPosts {
			t.Errorf("at %v: %d webhook posts, want %d", at.Sub(now), got, wantPosts)
		}
	}
	if !call(t, limiters[0], now, 100) { // $0.10 on replica 0 only
		t.Fatal("refused")
	}
	step(now, 1, spend.AlertFired)
	step(now.Add(10*time.Minute), 2, spend.AlertResolved)
	if !call(t, limiters[1], now.Add(11*time.Minute), 100) {
		t.Fatal("refused")
	}
	step(now.Add(11*time.Minute), 3, spend.AlertFired)

	srv.Stop()
	for _, a := range alerters {
		if _, err := a.Tick(context.Background(), now.Add(30*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if got := posts.Load(); got != 5 {
		t.Errorf("with Redis down: %d webhook posts in all, want 5 (each replica its own resolution)", got)
	}
}
