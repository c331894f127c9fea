package chain

import (
	"math"
	"sync"
	"time"
)

// bucket is a provider's rate limit as the providers keep it: a capacity
// of limit units per minute, full at first, refilled continuously at
// limit/60 per second (OpenAI's and Anthropic's tokens- and
// requests-per-minute limits are both this). Admission reserves a call's
// charge from it; the level may go below zero, and the time until it is
// back at zero is the wait before the call may be sent — the pacing that
// keeps the provider from refusing it. Time is an input; safe for
// concurrent use.
type bucket struct {
	mu      sync.Mutex
	limit   float64 // units per minute: this replica's share of base
	base    float64 // the deployment's limit, for every replica
	share   float64 // this replica's part of it, in (0, 1]
	level   float64 // units available at at; negative: owed
	at      time.Time
	learned bool // built from the provider's headers, not the config
}

func newBucket(perMinute int64, now time.Time) *bucket {
	return &bucket{limit: float64(perMinute), base: float64(perMinute), share: 1, level: float64(perMinute), at: now}
}

// setShare makes the bucket this replica's share of the deployment's
// limit, when replicas share it (the level is cut to the new capacity).
func (b *bucket) setShare(now time.Time, share float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	b.share = share
	b.limit = b.base * share
	b.level = math.Min(b.level, b.limit)
}

// rate is the refill in units per second (b.mu held).
func (b *bucket) rate() float64 { return b.limit / 60 }

// refill is how long the bucket takes to refill n units.
func (b *bucket) refill(n float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit <= 0 {
		return 0
	}
	return time.Duration(n / b.rate() * float64(time.Second))
}

// refillLocked brings the level to now.
func (b *bucket) refillLocked(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.level = math.Min(b.limit, b.level+d.Seconds()*b.rate())
		b.at = now
	}
}

// waitLocked is how long until n units are available, with the level
// brought to now.
func (b *bucket) waitLocked(n float64) time.Duration {
	short := n - b.level
	if short <= 0 {
		return 0
	}
	if n > b.limit {
		// A charge above the capacity can never be met in full: it waits
		// until the bucket is full, as the provider would admit it then
		// (or refuse it whatever sluice does).
		short = b.limit - b.level
	}
	return time.Duration(math.Ceil(short / b.rate() * float64(time.Second)))
}

// wait is how long a charge of n would wait at now, taking nothing.
func (b *bucket) wait(now time.Time, n float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	return b.waitLocked(n)
}

// reserve takes n at now and returns how long the call must wait before it
// is sent.
func (b *bucket) reserve(now time.Time, n float64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	w := b.waitLocked(n)
	b.level -= n
	return w
}

// give returns n (negative: takes more) at now, never above the capacity.
func (b *bucket) give(now time.Time, n float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	b.level = math.Min(b.limit, b.level+n)
}

// observe aligns the bucket on the provider's count: remaining units at
// now (limit, when positive, is the provider's capacity). The provider's
// count is the truth about what it will accept, so the level is never
// above it; it is not raised to it either, since calls reserved here may
// not have reached the provider yet.
func (b *bucket) observe(now time.Time, limit, remaining int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	if limit > 0 && b.learned && float64(limit) != b.base {
		b.base = float64(limit)
		b.limit = b.base * b.share
	}
	b.level = math.Min(b.level, float64(remaining))
}

// available is the level at now, for metrics.
func (b *bucket) available(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	return b.level
}

// headroom is the bucket in a provider's rate-limit terms at now: its limit
// per minute, what is available (never below zero), and how long until it
// is full again.
func (b *bucket) headroom(now time.Time) (limit, remaining int64, reset time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	level := max(b.level, 0)
	if b.limit > 0 && b.level < b.limit {
		reset = time.Duration((b.limit - b.level) / b.rate() * float64(time.Second))
	}
	return int64(b.limit), int64(level), reset
}
