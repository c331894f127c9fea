package admission

import (
	"math"
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
//
// A window of hundreds of samples is a steady estimate, and a slow one: when
// the dependency slows down fourfold, its samples turn over only as slowly
// as the slowed calls complete — a quarter of a minute at the rates this
// gate sees — and meanwhile every wait it estimates is a quarter of the
// truth, every call it admits to wait is promised a start it will not get.
// So the window also keeps a short memory, an exponentially weighted mean
// of the last samples' logarithms (about the last 16), and compares it with
// the window's own mean logarithm: once they differ by more than the noise
// of a few samples of a typical spread (a quarter), the window's level has
// shifted, and its mean and quantiles are scaled by the shift (see level).
// The shape of the distribution is the window's, its level the last few
// samples'. Logarithms, because service times are skewed: a level shift
// multiplies them.
type window struct {
	ring   []time.Duration
	next   int
	n      int
	sum    time.Duration
	counts []uint32
	// logs are the ring's samples' logarithms — their histogram buckets,
	// eighths of a power of two (see logOf) — logSum their sum, recent
	// the short memory of them once there is a sample, and shift the
	// factor level found when the last sample was added.
	logs   []float64
	logSum float64
	recent float64
	shift  float64
	follow bool

	stale         int // samples added since the quantiles were computed
	p50, p95, p99 time.Duration
}

// recentWeight is the short memory's weight of a new sample: 1/16, about
// the last 16 samples.
const recentWeight = 1.0 / 16

// levelShift is how far, as a factor, the last samples' level must be from
// the window's before it counts: a quarter. The short memory of a
// lognormal of σ 0.5 strays by about 9% (one standard deviation), so a
// quarter is rarely noise, and a dependency that slowed fourfold passes it
// within three samples.
const levelShift = 1.25

// logOf is d's logarithm to the base 2^(1/8), to within a bucket: the
// index of its histogram bucket, which add computes anyway — a logarithm
// per sample would cost as much as the rest of an admission. Eight buckets
// to a power of two, each at most an eighth of its value wide: a sample's
// error is a few percent, its average over the short memory far less.
func logOf(d time.Duration) float64 { return float64(bucketOf(d)) }

// shiftBuckets is levelShift in those units: 8·log2(levelShift).
var shiftBuckets = 8 * math.Log2(levelShift)

// level is the factor the window's mean and quantiles are scaled by: the
// last samples' level over the window's, when it has shifted by more than
// levelShift either way, and 1 otherwise. It only changes as samples come,
// and is kept from the last one.
func (w *window) level() float64 { return w.shift }

func (w *window) findLevel() float64 {
	if !w.follow || w.n < 2*recomputeEvery {
		return 1 // the window is the last samples
	}
	// recent − logSum/n beyond ±shiftBuckets, without the division.
	n := float64(w.n)
	if d := w.recent*n - w.logSum; d > shiftBuckets*n || d < -shiftBuckets*n {
		return math.Exp2(d / n / 8)
	}
	return 1
}

func scaleBy(d time.Duration, f float64) time.Duration {
	if f == 1 {
		return d
	}
	return time.Duration(min(float64(d)*f, float64(maxSample)))
}

// newWindow returns a window of size samples; with follow, its estimates
// follow a level shift (see window), otherwise they are the window's alone.
func newWindow(size int, follow bool) *window {
	return &window{ring: make([]time.Duration, size), logs: make([]float64, size), counts: make([]uint32, buckets.Len()), shift: 1, follow: follow}
}

func (w *window) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	l := logOf(d)
	if w.n == len(w.ring) {
		old := w.ring[w.next]
		w.sum -= old
		w.logSum -= w.logs[w.next]
		w.counts[bucketOf(old)]--
	} else {
		w.n++
	}
	w.logs[w.next] = l
	if w.n == 1 {
		w.recent = l
	} else {
		w.recent += recentWeight * (l - w.recent)
	}
	w.logSum += l
	w.ring[w.next] = d
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
	w.sum += d
	w.counts[bucketOf(d)]++
	w.stale++
	w.shift = w.findLevel()
}

func (w *window) count() int { return w.n }

func (w *window) mean() time.Duration {
	if w.n == 0 {
		return 0
	}
	return scaleBy(w.sum/time.Duration(w.n), w.level())
}

// quantiles returns p50 and p95, recomputing them when enough samples arrived
// since the last walk (always while the window is small).
func (w *window) quantiles() (p50, p95 time.Duration) {
	w.refresh()
	f := w.level()
	return scaleBy(w.p50, f), scaleBy(w.p95, f)
}

// tail returns p99.
func (w *window) tail() time.Duration {
	w.refresh()
	return scaleBy(w.p99, w.level())
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
