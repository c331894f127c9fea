package chain

import (
	"sync"
	"testing"
	"time"
)

// A bucket of 60 a minute refills at one a second from where it stands,
// never above its capacity; a charge waits for the deficit at that rate,
// and reserving past zero goes into debt that later charges wait behind.
func TestBucketRefillCapWaitDebt(t *testing.T) {
	b := newBucket(60, t0)
	if got := b.available(t0); got != 60 {
		t.Fatalf("a new bucket holds %v, want full (60)", got)
	}
	if w := b.reserve(t0, 60); w != 0 {
		t.Fatalf("reserving the whole bucket waits %v, want 0", w)
	}
	if got := b.available(t0.Add(10 * time.Second)); got != 10 {
		t.Fatalf("10s after emptying: %v, want 10 (1/s)", got)
	}
	if got := b.available(t0.Add(5 * time.Minute)); got != 60 {
		t.Fatalf("long after: %v, want capped at 60", got)
	}

	b = newBucket(60, t0)
	b.reserve(t0, 60)
	if w := b.wait(t0, 10); w != 10*time.Second {
		t.Fatalf("wait for 10 at an empty bucket: %v, want 10s", w)
	}
	if got := b.available(t0); got != 0 {
		t.Fatalf("wait took something: level %v, want 0", got)
	}
	// Into debt: the first waits 30s, the next behind it 40s.
	if w := b.reserve(t0, 30); w != 30*time.Second {
		t.Fatalf("reserve 30 at empty: wait %v, want 30s", w)
	}
	if got := b.available(t0); got != -30 {
		t.Fatalf("level after reserving into debt: %v, want -30", got)
	}
	if w := b.reserve(t0, 10); w != 40*time.Second {
		t.Fatalf("reserve 10 behind a debt of 30: wait %v, want 40s", w)
	}
	// Half-way through the wait the debt has halved: even a charge of
	// nothing waits for it to be paid.
	if w := b.wait(t0.Add(20*time.Second), 0); w != 20*time.Second {
		t.Fatalf("a charge of nothing behind a debt of 20 waits %v, want 20s", w)
	}
	if w := b.wait(t0.Add(20*time.Second), 10); w != 30*time.Second {
		t.Fatalf("20s later, 10 more waits %v, want 30s", w)
	}
}

// A charge above the capacity can never be met in full: it waits until
// the bucket is full, not for ever.
func TestBucketChargeAboveCapacity(t *testing.T) {
	b := newBucket(60, t0)
	if w := b.wait(t0, 100); w != 0 {
		t.Fatalf("100 from a full bucket of 60: wait %v, want 0 (full is as good as it gets)", w)
	}
	if w := b.reserve(t0, 100); w != 0 {
		t.Fatalf("reserve 100 from full: %v, want 0", w)
	}
	// Level -40: the next 100 waits until full again, 100s.
	if w := b.wait(t0, 100); w != 100*time.Second {
		t.Fatalf("100 at level -40: wait %v, want 100s (until full)", w)
	}
}

// give returns a charge, never above the capacity; a negative give takes
// more.
func TestBucketGive(t *testing.T) {
	b := newBucket(60, t0)
	b.reserve(t0, 50)
	b.give(t0, 20)
	if got := b.available(t0); got != 30 {
		t.Fatalf("after give 20: %v, want 30", got)
	}
	b.give(t0, 1000)
	if got := b.available(t0); got != 60 {
		t.Fatalf("give past the capacity: %v, want 60", got)
	}
	b.give(t0, -70)
	if got := b.available(t0); got != -10 {
		t.Fatalf("give -70: %v, want -10", got)
	}
}

// observe lowers the level to the provider's remaining count, never raises
// it; a configured bucket keeps its capacity, a learned one takes the
// provider's.
func TestBucketObserve(t *testing.T) {
	b := newBucket(60, t0)
	b.observe(t0, 600, 12)
	if got := b.available(t0); got != 12 {
		t.Fatalf("observe remaining 12: level %v, want 12", got)
	}
	b.observe(t0, 600, 50)
	if got := b.available(t0); got != 12 {
		t.Fatalf("observe remaining 50 raised the level to %v, want kept at 12", got)
	}
	if b.limit != 60 {
		t.Fatalf("a configured bucket took the provider's limit: %v, want 60", b.limit)
	}
	if got := b.available(t0.Add(time.Minute)); got != 60 {
		t.Fatalf("a minute later: %v, want 60 (its own capacity)", got)
	}

	l := newBucket(60, t0)
	l.learned = true
	l.observe(t0, 120, 30)
	if l.limit != 120 {
		t.Fatalf("a learned bucket kept limit %v, want the provider's 120", l.limit)
	}
	if got := l.available(t0); got != 30 {
		t.Fatalf("learned bucket level %v, want 30", got)
	}
	if got := l.available(t0.Add(30 * time.Second)); got != 90 {
		t.Fatalf("30s later at 2/s: %v, want 90", got)
	}
	l.observe(t0.Add(30*time.Second), 0, 10) // no limit sent: the capacity stays
	if l.limit != 120 {
		t.Fatalf("an observation without a limit changed it to %v", l.limit)
	}
}

// The bucket is safe for concurrent use: what is reserved and given back
// in parallel balances.
func TestBucketConcurrent(t *testing.T) {
	b := newBucket(6000, t0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.reserve(t0, 7)
				b.wait(t0, 1)
				b.give(t0, 7)
			}
		})
	}
	wg.Wait()
	if got := b.available(t0); got != 6000 {
		t.Fatalf("after balanced reserves and gives: %v, want 6000", got)
	}
}
