package retrybudget

import (
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks hand the budget precomputed times so that they measure the
// budget, not the clock; a caller that reads time.Now for each call pays that
// on top (a few tens of ns on Linux).

func newBench(b *testing.B) *Budget {
	bud, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	return bud
}

func BenchmarkDeposit(b *testing.B) {
	bud := newBench(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bud.Deposit(t0.Add(time.Duration(i)))
	}
}

// BenchmarkTryWithdraw mixes grants and refusals: at 1µs a call the floor
// earns a token every 100,000 calls, so most calls are refused, which is the
// path taken under overload when the budget matters.
func BenchmarkTryWithdraw(b *testing.B) {
	bud := newBench(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bud.TryWithdraw(t0.Add(time.Duration(i) * time.Microsecond))
	}
}

// BenchmarkRequest is what a client does per request: a deposit for the
// first attempt and, for one request in ten, a retry.
func BenchmarkRequest(b *testing.B) {
	bud := newBench(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		bud.Deposit(now)
		if i%10 == 0 {
			bud.TryWithdraw(now)
		}
	}
}

func BenchmarkDepositParallel(b *testing.B) {
	bud := newBench(b)
	var clock atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bud.Deposit(t0.Add(time.Duration(clock.Add(1))))
		}
	})
}

func BenchmarkTryWithdrawParallel(b *testing.B) {
	bud := newBench(b)
	var clock atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bud.TryWithdraw(t0.Add(time.Duration(clock.Add(1)) * time.Microsecond))
		}
	})
}

func BenchmarkRequestParallel(b *testing.B) {
	bud := newBench(b)
	var clock atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			now := t0.Add(time.Duration(clock.Add(1)) * time.Microsecond)
			bud.Deposit(now)
			if i%10 == 0 {
				bud.TryWithdraw(now)
			}
		}
	})
}
