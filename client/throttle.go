package client

import (
	"sync"
	"time"
)

// throttleBuckets is how many slices the throttling window is kept in. Counts
// leave the window one slice at a time (every 2s with the default window),
// which is smooth enough for a probability and keeps the state a fixed size.
const throttleBuckets = 60

// throttle is adaptive client-side throttling, after the SRE book: a client
// whose requests are mostly being rejected stops sending a share of them,
// because an overloaded backend spends capacity even on saying no. With K=2
// nothing is refused until the backend rejects half of what it is sent; from
// there the local refusal rate rises so that roughly K×accepts requests reach
// the backend per window. Counting local refusals as requests is what lets
// the probability fall again: while the client refuses, accepts stay level
// and requests grow, but once the backend recovers every sent request is
// accepted and K×accepts overtakes requests.
//
// A throttle is safe for concurrent use.
type throttle struct {
	k     float64
	width time.Duration // of one bucket: window / throttleBuckets

	mu struct {
		sync.Mutex
		buckets [throttleBuckets]throttleBucket
	}
}

type throttleBucket struct {
	idx      int64 // which slice of time this bucket counts; see index
	requests int64
	accepts  int64
}

func newThrottle(k float64, window time.Duration) *throttle {
	return &throttle{k: k, width: window / throttleBuckets}
}

// index numbers the bucket-wide slices of time.
func (t *throttle) index(now time.Time) int64 {
	n, w := now.UnixNano(), int64(t.width)
	if n < 0 && n%w != 0 {
		return n/w - 1 // floor, for clocks before 1970
	}
	return n / w
}

// probability returns the share of requests to refuse at now.
func (t *throttle) probability(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.probabilityLocked(t.index(now))
}

func (t *throttle) probabilityLocked(cur int64) float64 {
	var requests, accepts int64
	for _, b := range t.mu.buckets {
		if b.idx > cur-throttleBuckets && b.idx <= cur {
			requests += b.requests
			accepts += b.accepts
		}
	}
	return max(0, (float64(requests)-t.k*float64(accepts))/float64(requests+1))
}

// admit decides whether to send a request at now, given u drawn uniformly
// from [0, 1). A refusal is counted as a request that was not accepted.
func (t *throttle) admit(now time.Time, u float64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.index(now)
	if u >= t.probabilityLocked(cur) {
		return true
	}
	t.observeLocked(cur, false)
	return false
}

// observe counts a request sent at now and whether the backend accepted it.
func (t *throttle) observe(now time.Time, accepted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observeLocked(t.index(now), accepted)
}

func (t *throttle) observeLocked(cur int64, accepted bool) {
	slot := cur % throttleBuckets
	if slot < 0 {
		slot += throttleBuckets
	}
	b := &t.mu.buckets[slot]
	switch {
	case b.idx == cur:
	case b.idx < cur:
		*b = throttleBucket{idx: cur}
	default:
		// The slot already counts a later slice: now is more than a window
		// older than a time already seen, and out of the window anyway.
		return
	}
	b.requests++
	if accepted {
		b.accepts++
	}
}
