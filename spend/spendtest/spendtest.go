// Package spendtest is the shared test suite every spend.Ledger must pass:
// the in-memory ledger today, a Redis ledger next. It pins what the Limiter
// relies on — minute buckets, exact integer sums, negative corrections,
// independent scopes, a day of retention, no aliasing of reused storage,
// concurrent adds — so a new implementation is correct when it passes.
package spendtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// t0 is an arbitrary minute boundary the tests count from.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Run runs the suite. newLedger must return a new, empty ledger each time
// it is called (each subtest calls it once); it may use t for cleanup.
func Run(t *testing.T, newLedger func(t *testing.T) spend.Ledger) {
	tests := []struct {
		name string
		f    func(t *testing.T, l spend.Ledger)
	}{
		{"EmptyReadsZero", testEmpty},
		{"MinuteBoundaries", testBoundaries},
		{"NegativeCorrections", testNegative},
		{"ScopesAreIndependent", testScopes},
		{"SumMatchesBuckets", testSumMatchesBuckets},
		{"KeepsMinRetention", testRetention},
		{"NoAliasing", testNoAliasing},
		{"BeforeTheEpoch", testBeforeEpoch},
		{"BadInput", testBadInput},
		{"ConcurrentAdds", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.f(t, newLedger(t))
		})
	}
}

var ctx = context.Background()

func add(t *testing.T, l spend.Ledger, now time.Time, entries ...spend.Entry) {
	t.Helper()
	if err := l.Add(ctx, now, entries); err != nil {
		t.Fatalf("Add: %v", err)
	}
}

func buckets(t *testing.T, l spend.Ledger, scope string, last time.Time, n int) []int64 {
	t.Helper()
	dst := make([]int64, n)
	for i := range dst {
		dst[i] = -12345 // must be overwritten, zeros included
	}
	if err := l.Buckets(ctx, scope, last, dst); err != nil {
		t.Fatalf("Buckets: %v", err)
	}
	return dst
}

func sum(t *testing.T, l spend.Ledger, scope string, first, last time.Time) int64 {
	t.Helper()
	s, err := l.Sum(ctx, scope, first, last)
	if err != nil {
		t.Fatalf("Sum(%v, %v): %v", first, last, err)
	}
	return s
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testEmpty(t *testing.T, l spend.Ledger) {
	if got := buckets(t, l, "global", t0, 6); !equal(got, make([]int64, 6)) {
		t.Errorf("empty ledger: Buckets = %v, want zeros", got)
	}
	if got := sum(t, l, "global", t0.Add(-24*time.Hour), t0); got != 0 {
		t.Errorf("empty ledger: Sum = %d, want 0", got)
	}
	add(t, l, t0) // no entries: a no-op
}

func testBoundaries(t *testing.T, l spend.Ledger) {
	add(t, l, t0.Add(2*time.Minute),
		spend.Entry{Scope: "s", At: t0, Amount: 1},
		spend.Entry{Scope: "s", At: t0.Add(time.Minute - time.Nanosecond), Amount: 10},
		spend.Entry{Scope: "s", At: t0.Add(time.Minute), Amount: 100},
		spend.Entry{Scope: "s", At: t0.Add(-time.Nanosecond), Amount: 1000},
	)
	// The minute containing last is the last bucket, whatever the second.
	for _, last := range []time.Time{t0.Add(time.Minute), t0.Add(2*time.Minute - time.Nanosecond)} {
		got := buckets(t, l, "s", last, 4)
		if want := []int64{0, 1000, 11, 100}; !equal(got, want) {
			t.Errorf("Buckets(last %v) = %v, want %v", last.Format(time.TimeOnly), got, want)
		}
	}
	if got := sum(t, l, "s", t0, t0.Add(time.Minute)); got != 111 {
		t.Errorf("Sum over the two minutes = %d, want 111", got)
	}
	if got := sum(t, l, "s", t0.Add(59*time.Second), t0.Add(59*time.Second)); got != 11 {
		t.Errorf("Sum of one minute = %d, want 11", got)
	}
}

func testNegative(t *testing.T, l spend.Ledger) {
	add(t, l, t0, spend.Entry{Scope: "s", At: t0, Amount: 5_000})
	add(t, l, t0.Add(3*time.Minute), spend.Entry{Scope: "s", At: t0, Amount: -3_000}) // a reconcile, later, into the same bucket
	if got := buckets(t, l, "s", t0.Add(3*time.Minute), 4); !equal(got, []int64{2_000, 0, 0, 0}) {
		t.Errorf("Buckets = %v, want the corrected amount in the reservation's minute", got)
	}
	add(t, l, t0, spend.Entry{Scope: "s", At: t0, Amount: -2_000})
	if got := sum(t, l, "s", t0, t0); got != 0 {
		t.Errorf("after a cancel, Sum = %d, want 0", got)
	}
}

func testScopes(t *testing.T, l spend.Ledger) {
	add(t, l, t0,
		spend.Entry{Scope: spend.GlobalScope, At: t0, Amount: 7},
		spend.Entry{Scope: spend.TenantScope("a"), At: t0, Amount: 3},
		spend.Entry{Scope: spend.TenantScope("b"), At: t0, Amount: 4},
		spend.Entry{Scope: spend.ModelScope("a"), At: t0, Amount: 9},
	)
	for scope, want := range map[string]int64{
		spend.GlobalScope: 7, spend.TenantScope("a"): 3, spend.TenantScope("b"): 4,
		spend.ModelScope("a"): 9, spend.TenantScope("c"): 0,
	} {
		if got := sum(t, l, scope, t0, t0); got != want {
			t.Errorf("scope %q: Sum = %d, want %d", scope, got, want)
		}
	}
}

// testSumMatchesBuckets adds random amounts over 25 hours and compares
// Buckets and Sum with a model, for random ranges (whole hours, partial
// hours, single minutes).
func testSumMatchesBuckets(t *testing.T, l spend.Ledger) {
	rng := rand.New(rand.NewPCG(1, 2))
	const span = 25 * 60 // minutes, all within MinRetention of the last
	start := t0
	end := start.Add(span * time.Minute)
	model := map[int]int64{}
	batch := make([]spend.Entry, 0, 64)
	for i := range 3000 {
		m := rng.IntN(span)
		v := rng.Int64N(2_000_000) - 500_000
		at := start.Add(time.Duration(m)*time.Minute + time.Duration(rng.Int64N(int64(time.Minute))))
		model[m] += v
		batch = append(batch, spend.Entry{Scope: "s", At: at, Amount: v})
		if len(batch) == cap(batch) || i == 2999 {
			add(t, l, end, batch...)
			batch = batch[:0]
		}
	}
	all := buckets(t, l, "s", end.Add(-time.Minute), span)
	for m := range span {
		if all[m] != model[m] {
			t.Fatalf("minute %d: bucket %d, want %d", m, all[m], model[m])
		}
	}
	for range 300 {
		a := rng.IntN(span)
		b := a + rng.IntN(span-a)
		var want int64
		for m := a; m <= b; m++ {
			want += model[m]
		}
		first := start.Add(time.Duration(a)*time.Minute + time.Duration(rng.Int64N(int64(time.Minute))))
		last := start.Add(time.Duration(b)*time.Minute + time.Duration(rng.Int64N(int64(time.Minute))))
		if got := sum(t, l, "s", first, last); got != want {
			t.Fatalf("Sum(minute %d, minute %d) = %d, want %d", a, b, got, want)
		}
	}
}

func testRetention(t *testing.T, l spend.Ledger) {
	now := t0.Add(48 * time.Hour)
	old := now.Add(-spend.MinRetention + time.Minute)
	add(t, l, old, spend.Entry{Scope: "s", At: old, Amount: 42})
	// Later traffic must not push it out early.
	for m := time.Duration(0); m < spend.MinRetention; m += 7 * time.Minute {
		at := old.Add(m + time.Minute)
		add(t, l, at, spend.Entry{Scope: "s", At: at, Amount: 1})
	}
	add(t, l, now, spend.Entry{Scope: "s", At: now, Amount: 1})
	if got := buckets(t, l, "s", old, 1)[0]; got != 42 {
		t.Errorf("a bucket MinRetention−1m old reads %d, want 42", got)
	}
	day := sum(t, l, "s", old, old.Add(59*time.Second))
	if day != 42 {
		t.Errorf("Sum of the old minute = %d, want 42", day)
	}
}

// testNoAliasing: storage reused for a later time must never show an
// earlier time's amount, and an entry too old to keep must not land in a
// later bucket.
func testNoAliasing(t *testing.T, l spend.Ledger) {
	add(t, l, t0, spend.Entry{Scope: "s", At: t0, Amount: 5})
	for _, later := range []time.Duration{
		spend.MinRetention + time.Hour, 1536 * time.Minute, 32 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
	} {
		at := t0.Add(later)
		if got := buckets(t, l, "s", at, 1)[0]; got != 0 {
			t.Errorf("minute %v after a write reads %d, want 0", later, got)
		}
		if got := sum(t, l, "s", at.Add(-time.Hour), at); got != 0 {
			t.Errorf("hour ending %v after a write sums %d, want 0", later, got)
		}
	}
	late := t0.Add(30 * 24 * time.Hour)
	add(t, l, late, spend.Entry{Scope: "s", At: late, Amount: 7})
	add(t, l, late, spend.Entry{Scope: "s", At: late.Add(-29 * 24 * time.Hour), Amount: 1000}) // far too old
	if got := buckets(t, l, "s", late, 1)[0]; got != 7 {
		t.Errorf("after an entry too old to keep, the current bucket reads %d, want 7", got)
	}
	if got := sum(t, l, "s", late.Add(-24*time.Hour), late); got != 7 {
		t.Errorf("after an entry too old to keep, the day sums %d, want 7", got)
	}
}

func testBeforeEpoch(t *testing.T, l spend.Ledger) {
	at := time.Unix(-30, 0) // in the minute [-60s, 0)
	add(t, l, at, spend.Entry{Scope: "s", At: at, Amount: 3}, spend.Entry{Scope: "s", At: time.Unix(0, 0), Amount: 4})
	if got := buckets(t, l, "s", time.Unix(1, 0), 3); !equal(got, []int64{0, 3, 4}) {
		t.Errorf("Buckets around the epoch = %v, want [0 3 4]", got)
	}
}

func testBadInput(t *testing.T, l spend.Ledger) {
	if err := l.Add(ctx, t0, []spend.Entry{{Scope: "", At: t0, Amount: 1}}); !errors.Is(err, spend.ErrEmptyScope) {
		t.Errorf("Add with an empty scope: %v, want ErrEmptyScope", err)
	}
	if err := l.Buckets(ctx, "", t0, make([]int64, 1)); !errors.Is(err, spend.ErrEmptyScope) {
		t.Errorf("Buckets with an empty scope: %v, want ErrEmptyScope", err)
	}
	if _, err := l.Sum(ctx, "", t0, t0); !errors.Is(err, spend.ErrEmptyScope) {
		t.Errorf("Sum with an empty scope: %v, want ErrEmptyScope", err)
	}
	if _, err := l.Sum(ctx, "s", t0.Add(time.Minute), t0); err == nil {
		t.Error("Sum with first after last: no error")
	}
}

func testConcurrent(t *testing.T, l spend.Ledger) {
	const workers, each = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				at := t0.Add(time.Duration(i%5) * time.Minute)
				e := []spend.Entry{{Scope: "s", At: at, Amount: int64(w + 1)}, {Scope: "g", At: at, Amount: 1}}
				if err := l.Add(ctx, at, e); err != nil {
					t.Error(err)
					return
				}
				if err := l.Buckets(ctx, "s", at, make([]int64, 5)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var want int64
	for w := range workers {
		want += int64(w+1) * each
	}
	if got := sum(t, l, "s", t0, t0.Add(4*time.Minute)); got != want {
		t.Errorf("after concurrent adds, Sum = %d, want %d", got, want)
	}
	if got := sum(t, l, "g", t0, t0.Add(4*time.Minute)); got != workers*each {
		t.Errorf("after concurrent adds, Sum(g) = %d, want %d", got, workers*each)
	}
}
