package spend_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// benchConfig is a realistic policy: a ceiling, and the tenant under test
// with both an hourly and a daily budget, so Admit reads the global rate,
// the tenant's rate and the tenant's day.
func benchConfig() spend.Config {
	cfg := testConfig()
	cfg.CeilingPerHour = 1e6
	cfg.Tenants["bench"] = spend.TenantBudget{PerHour: 1e5, PerDay: 1e6}
	return cfg
}

// BenchmarkAdmitReconcile is the per-request cost of the spend policy on the
// hot path: an admission (allowed) and its reconciliation from usage, with
// the clock moving 1ms per request so the windows roll.
func BenchmarkAdmitReconcile(b *testing.B) {
	l := newLimiter(b, benchConfig(), spend.Options{})
	req := spend.Request{Tenant: "bench", Model: "big", Rank: 4, EstimatedInputTokens: 1200, MaxOutputTokens: 400}
	u := contract.Usage{Input: 1200, CachedInput: 200, Output: 310}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		d, err := l.Admit(now, req)
		if err != nil || !d.Allow {
			b.Fatal(err, d.Err())
		}
		if _, err := l.Reconcile(now, d.Reservation, u, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmitReconcileParallel is the same under contention: GOMAXPROCS
// goroutines sharing one Limiter (one mutex) and one ledger.
func BenchmarkAdmitReconcileParallel(b *testing.B) {
	l := newLimiter(b, benchConfig(), spend.Options{})
	var clock atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := spend.Request{Tenant: "bench", Model: "big", Rank: 4, EstimatedInputTokens: 1200, MaxOutputTokens: 400}
		u := contract.Usage{Input: 1200, Output: 310}
		for pb.Next() {
			now := t0.Add(time.Duration(clock.Add(1)) * time.Millisecond)
			d, err := l.Admit(now, req)
			if err != nil || !d.Allow {
				b.Error(err, d.Err())
				return
			}
			if _, err := l.Reconcile(now, d.Reservation, u, true); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAdmitRefused is the refusal path with its honest RetryAfter:
// the tenant is over its daily budget, so RetryAfter walks a day of minute
// buckets.
func BenchmarkAdmitRefused(b *testing.B) {
	l := newLimiter(b, testConfig(), spend.Options{})
	for h := range 24 {
		spendUSD(b, l, t0.Add(time.Duration(h)*time.Hour), "daily", 0.08) // $1.92 of $2
	}
	now := t0.Add(23*time.Hour + 30*time.Minute)
	req := spend.Request{Tenant: "daily", Model: "unit", Rank: 1} // refused from 0.95
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Admit(now, req); d.Allow {
			b.Fatal("admitted")
		}
	}
}
