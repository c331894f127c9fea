package spend_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

func TestReconcileReplacesTheEstimate(t *testing.T) {
	ledger := spend.NewMemoryLedger()
	l := newLimiter(t, testConfig(), spend.Options{Ledger: ledger})
	d := admit(t, l, t0, spend.Request{Tenant: "acme", Model: "big", Rank: 4, EstimatedInputTokens: 2000, MaxOutputTokens: 1000})
	wantEst := (2000*2.5 + 1000*10) / 1e6
	if !near(d.EstimatedUSD, wantEst, 1e-12) || !near(d.Reservation.EstimatedUSD(), wantEst, 1e-12) {
		t.Fatalf("estimate $%v, want $%v", d.EstimatedUSD, wantEst)
	}
	if s := l.Snapshot(t0); s.Reservations != 1 || !near(s.ReservedUSD, wantEst, 1e-12) || !near(s.Global.LastHourUSD, wantEst, 1e-12) {
		t.Fatalf("while in flight: %d reservations, $%v reserved, $%v in the hour", s.Reservations, s.ReservedUSD, s.Global.LastHourUSD)
	}
	// 1500 input tokens of which 1000 cached, 300 output; settled two
	// minutes later, into the reservation's minute.
	later := t0.Add(2 * time.Minute)
	cost, err := l.Reconcile(later, d.Reservation, contract.Usage{Input: 1500, CachedInput: 1000, Output: 300}, true)
	want := (500*2.5 + 1000*1.25 + 300*10) / 1e6
	if err != nil || !near(cost, want, 1e-12) {
		t.Fatalf("Reconcile = %v, %v; want $%v", cost, err, want)
	}
	for _, scope := range []string{spend.GlobalScope, spend.TenantScope("acme"), spend.ModelScope("big")} {
		b := make([]int64, 3)
		if err := ledger.Buckets(context.Background(), scope, later, b); err != nil {
			t.Fatal(err)
		}
		if b[0] != int64(want*1e9+0.5) || b[1] != 0 || b[2] != 0 {
			t.Errorf("%s buckets %v, want the actual cost in the reservation's minute", scope, b)
		}
	}
	s := l.Snapshot(later)
	if s.Reservations != 0 || s.ReservedUSD != 0 || !near(s.Global.ActualUSD, want, 1e-12) || s.Global.KnownCalls != 1 {
		t.Fatalf("after reconcile: %+v", s)
	}
	// Idempotent: nothing more happens however often it is settled again.
	for range 3 {
		if c, err := l.Reconcile(later, d.Reservation, contract.Usage{Input: 1e6}, true); c != 0 || err != nil {
			t.Fatalf("second Reconcile = %v, %v", c, err)
		}
		l.Cancel(later, d.Reservation)
	}
	if s2 := l.Snapshot(later); s2.Global != s.Global || s2.Reservations != 0 {
		t.Fatalf("settling twice changed the books: %+v → %+v", s.Global, s2.Global)
	}
}

func TestReconcileWithoutUsageKeepsTheEstimate(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	d := admit(t, l, t0, spend.Request{Tenant: "acme", Model: "unit", EstimatedInputTokens: 40})
	cost, err := l.Reconcile(t0, d.Reservation, contract.Usage{Input: 1}, false)
	if err != nil || !near(cost, 0.04, 1e-12) {
		t.Fatalf("Reconcile(known=false) = %v, %v; want the estimate $0.04", cost, err)
	}
	g := l.Snapshot(t0).Global
	if !near(g.EstimatedUSD, 0.04, 1e-12) || g.ActualUSD != 0 || g.EstimatedCalls != 1 || !near(g.LastHourUSD, 0.04, 1e-12) {
		t.Fatalf("%+v", g)
	}
	// An impossible usage is reported, and settled at the estimate too.
	d = admit(t, l, t0, spend.Request{Tenant: "acme", Model: "unit", EstimatedInputTokens: 10})
	cost, err = l.Reconcile(t0, d.Reservation, contract.Usage{Input: 5, CachedInput: 6}, true)
	if !errors.Is(err, spend.ErrInvalidUsage) || !near(cost, 0.01, 1e-12) {
		t.Fatalf("impossible usage: %v, %v", cost, err)
	}
	if s := l.Snapshot(t0); s.Reservations != 0 || s.Global.EstimatedCalls != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestCancel(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	d := admit(t, l, t0, spend.Request{Model: "unit", EstimatedInputTokens: 500})
	l.Cancel(t0.Add(time.Second), d.Reservation)
	l.Cancel(t0.Add(time.Second), d.Reservation)
	if c, _ := l.Reconcile(t0, d.Reservation, contract.Usage{Input: 500}, true); c != 0 {
		t.Errorf("Reconcile after Cancel counted $%v", c)
	}
	l.Cancel(t0, nil)
	if c, err := l.Reconcile(t0, nil, contract.Usage{}, true); c != 0 || err != nil {
		t.Errorf("Reconcile(nil) = %v, %v", c, err)
	}
	s := l.Snapshot(t0)
	if s.Reservations != 0 || s.Global.LastHourUSD != 0 || s.Global.SpentUSD != 0 {
		t.Fatalf("after cancel: %+v", s)
	}
	other := newLimiter(t, testConfig(), spend.Options{})
	d = admit(t, l, t0, spend.Request{Model: "unit", EstimatedInputTokens: 1})
	if _, err := other.Reconcile(t0, d.Reservation, contract.Usage{}, true); !errors.Is(err, spend.ErrForeignReservation) {
		t.Errorf("foreign reservation: %v", err)
	}
	other.Cancel(t0, d.Reservation)
	if s := l.Snapshot(t0); s.Reservations != 1 {
		t.Error("another Limiter cancelled the reservation")
	}
}

// TestBooksBalance runs random admissions, reconciliations (with and
// without usage), cancellations and double settlements from several
// goroutines, then checks that no reservation is leaked or released twice:
// nothing is reserved, the ledger's global, tenant and model sums each
// equal the costs Reconcile returned, and the counters agree.
func TestBooksBalance(t *testing.T) {
	ledger := spend.NewMemoryLedger()
	cfg := testConfig()
	cfg.CeilingPerHour = 0 // nothing refused: every path is exercised
	cfg.Tenants = nil
	l := newLimiter(t, cfg, spend.Options{Ledger: ledger})
	tenants := []string{"a", "b", "c"}
	models := []string{"big", "small", "tiny", "unit"}
	const workers, each = 4, 500
	var (
		mu       sync.Mutex
		settled  int64 // nano-dollars Reconcile returned
		byTenant = map[string]int64{}
		byModel  = map[string]int64{}
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var open []*spend.Reservation
			settle := func(i int) {
				r := open[i]
				open = append(open[:i], open[i+1:]...)
				at := t0.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
				var cost float64
				switch rng.IntN(4) {
				case 0:
					l.Cancel(at, r)
				case 1:
					cost, _ = l.Reconcile(at, r, contract.Usage{}, false)
				default:
					in := rng.Int64N(5000)
					cost, _ = l.Reconcile(at, r, contract.Usage{Input: in, CachedInput: rng.Int64N(in + 1), Output: rng.Int64N(2000)}, true)
				}
				// A second settlement, of any kind, must change nothing.
				if c, _ := l.Reconcile(at, r, contract.Usage{Input: 99}, true); c != 0 {
					t.Errorf("second settlement counted $%v", c)
				}
				l.Cancel(at, r)
				n := int64(cost*1e9 + 0.5)
				mu.Lock()
				settled += n
				byTenant[r.Tenant()] += n
				byModel[r.Model()] += n
				mu.Unlock()
			}
			for range each {
				if len(open) > 0 && rng.IntN(2) == 0 {
					settle(rng.IntN(len(open)))
					continue
				}
				at := t0.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
				d, err := l.Admit(at, spend.Request{
					Tenant: tenants[rng.IntN(len(tenants))], Model: models[rng.IntN(len(models))], Rank: rng.IntN(6),
					EstimatedInputTokens: rng.Int64N(4000), MaxOutputTokens: rng.Int64N(1500),
				})
				if err != nil || !d.Allow {
					t.Errorf("admit: %v %v", err, d.Err())
					return
				}
				open = append(open, d.Reservation)
			}
			for len(open) > 0 {
				settle(0)
			}
		})
	}
	wg.Wait()
	end := t0.Add(3 * time.Hour)
	s := l.Snapshot(end)
	if s.Reservations != 0 || s.ReservedUSD != 0 {
		t.Fatalf("leaked: %d reservations, $%v reserved", s.Reservations, s.ReservedUSD)
	}
	sum := func(scope string) int64 {
		v, err := ledger.Sum(context.Background(), scope, t0.Add(-time.Minute), end)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := sum(spend.GlobalScope); got != settled {
		t.Errorf("global ledger %d n$, settled %d n$", got, settled)
	}
	for name, want := range byTenant {
		if got := sum(spend.TenantScope(name)); got != want {
			t.Errorf("tenant %s: ledger %d, settled %d", name, got, want)
		}
	}
	for name, want := range byModel {
		if got := sum(spend.ModelScope(name)); got != want {
			t.Errorf("model %s: ledger %d, settled %d", name, got, want)
		}
	}
	if !near(s.Global.SpentUSD, float64(settled)/1e9, 1e-6) {
		t.Errorf("counters: spent $%v, settled $%v", s.Global.SpentUSD, float64(settled)/1e9)
	}
}

func TestWastedAndSaved(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	if err := l.RecordWasted(t0, "acme", "big", 0.25); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordSaved(t0, "acme", "big", 0.5); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordSaved(t0, "", "", 0.125); err != nil {
		t.Fatal(err)
	}
	s := l.Snapshot(t0)
	acme, big, anon := findScope(s.Tenants, "acme"), findScope(s.Models, "big"), findScope(s.Tenants, contract.AnonymousTenant)
	if s.Global.WastedUSD != 0.25 || s.Global.SavedUSD != 0.625 || acme.WastedUSD != 0.25 || acme.SavedUSD != 0.5 ||
		big.WastedUSD != 0.25 || anon.SavedUSD != 0.125 {
		t.Fatalf("global %+v, acme %+v, big %+v", s.Global, acme, big)
	}
	if s.Global.SpentUSD != 0 || s.Global.LastHourUSD != 0 {
		t.Error("wasted and saved spend must classify spend, not add to it")
	}
}
