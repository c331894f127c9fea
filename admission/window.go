package admission

import (
	"time"

	"github.com/sluicehq/sluice/internal/loghist"
)

// The service-time window keeps the last N samples in a ring (for an exact
// mean and to know which sample leaves) and a histogram of those same samples
// over log-linear buckets (for quantiles): each power of two is split in 8,
// so a quantile is off by at most 1/8 (12.5%) of its value — far below the
// spread of LLM latencies — and memory is fixed whatever the traffic.
var buckets = loghist.New(3, 42) // up to 2^42 µs ≈ 51 days

// recomputeEvery bounds how stale the cached quantiles may get: they are
// recomputed on read once this many samples arrived since the last time. A
// walk of the histogram costs a few hundred nanoseconds; amortising it keeps
// admission cheap while the quantiles lag by at most a few samples of a
// window of hundreds.
const recomputeEvery = 8

func bucketOf(d time.Duration) int    { return buckets.Bucket(d) }
func bucketValue(i int) time.Duration { return buckets.Value(i) }

// window is a bounded record of recent service times. Not safe for
// concurrent use; the Core's owner serialises access.
type window struct {
	ring   []time.Duration
	next   int
	n      int
	sum    time.Duration
	counts []uint32

	stale         int // samples added since the quantiles were computed
	p50, p95, p99 time.Duration
}

func newWindow(size int) *window {
	return &window{ring: make([]time.Duration, size), counts: make([]uint32, buckets.Len())}
}

func (w *window) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if w.n == len(w.ring) {
		old := w.ring[w.next]
		w.sum -= old
		w.counts[bucketOf(old)]--
	} else {
		w.n++
	}
	w.ring[w.next] = d
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
	w.sum += d
	w.counts[bucketOf(d)]++
	w.stale++
}

func (w *window) count() int { return w.n }

func (w *window) mean() time.Duration {
	if w.n == 0 {
		return 0
	}
	return w.sum / time.Duration(w.n)
}

// quantiles returns p50 and p95, recomputing them when enough samples arrived
// since the last walk (always while the window is small).
func (w *window) quantiles() (p50, p95 time.Duration) {
	w.refresh()
	return w.p50, w.p95
}

// tail returns p99.
func (w *window) tail() time.Duration {
	w.refresh()
	return w.p99
}

func (w *window) refresh() {
	if w.stale >= recomputeEvery || w.n <= 2*recomputeEvery && w.stale > 0 {
		w.walk()
	}
}

func (w *window) walk() {
	// The q-quantile is the sample of rank ceil(q·n) in sorted order.
	r50 := uint32((w.n*50 + 99) / 100)
	r95 := uint32((w.n*95 + 99) / 100)
	r99 := uint32((w.n*99 + 99) / 100)
	var cum uint32
	got50, got95 := false, false
	for i := range w.counts {
		cum += w.counts[i]
		if !got50 && cum >= r50 {
			w.p50 = bucketValue(i)
			got50 = true
		}
		if !got95 && cum >= r95 {
			w.p95 = bucketValue(i)
			got95 = true
		}
		if cum >= r99 {
			w.p99 = bucketValue(i)
			break
		}
	}
	w.stale = 0
}
