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
// Scaling the whole window by the level of its last few samples does not
// fix it: while the window turns over, its shape is that of a mixture of
// the two levels, wider than either, and its p95 overshoots the new level's
// (by half at a fourfold shift) for as long as the mixture lasts.
//
// So the window looks for the change point, and splits there. Its samples
// are two segments: cur, those since the last change point, and old, those
// before it still in the ring. The estimates are of old's shape moved to
// cur's level plus cur's own samples — old's histogram read off buckets
// later (or earlier) by the difference of the two segments' mean
// logarithms — the quantiles of the new level, not of a mixture, and they
// sharpen as cur grows: its level is the mean of all its samples, not of a
// short memory. Once old has left the ring the window is cur alone, exact.
//
// A change point is found by a two-sided CUSUM on each new sample's
// logarithm, standardised by the window's own spread (the segments' pooled
// standard deviation): the sum of how far the samples stand above the
// window's level, less a tolerance of half a deviation each, past a
// threshold of cusumLimit deviations. A dependency that slowed fourfold
// with a lognormal spread of σ 0.5 (2.8 deviations a sample) is found in
// about eight samples, one with an exponential's spread (1.1 deviations)
// in twenty-five or so; on a steady stream of any spread the sum stays
// below the threshold — it is in units of the spread, so a wider
// distribution needs a proportionally larger excursion, which a fixed
// factor did not ask (an exponential's short memory strays past any fixed
// threshold). Each
// standardised step is clipped to ±cusumClip so that a heavy tail (a
// logarithm of an exponential reaches far below its mean) cannot make one
// sample a change point. The segment found is the samples since the sum
// last stood at zero, where the excursion began; at a change point the
// samples of the segment before it are moved to its level for good (a
// walk of the ring, rare), so that old is always one level.
type window struct {
	ring []time.Duration
	bkts []int32 // each ring sample's bucket: its logarithm (see logOf)
	next int
	n    int

	old, cur segment
	// off is how many buckets old's samples lie below cur's level
	// (negative: above): the difference of their mean logarithms,
	// rounded; scale is 2^(off/8), the factor for old's mean.
	off   int
	scale float64

	follow bool
	// up and down are the CUSUM sums, upLen and downLen how many samples
	// each has summed since it last stood at zero; shifts counts the
	// change points found.
	up, down       float64
	upLen, downLen int
	shifts         int
	// refMean and refScale (one over the deviation) are reference's,
	// worked out again every recomputeEvery samples (refAge counts them)
	// and after a change point: the window's level and spread move
	// slowly, and a square root per sample is a tenth of an admission.
	refMean, refScale float64
	refAge            int

	stale         int // samples added since the quantiles were computed
	p50, p95, p99 time.Duration
}

// segment is a run of the window's samples: their count, sum, the sum and
// sum of squares of their logarithms (in buckets, exact integers) and
// their histogram.
type segment struct {
	n      int
	sum    time.Duration
	logSum int64
	logSq  int64
	counts []uint32
}

func (s *segment) add(d time.Duration, b int32) {
	s.n++
	s.sum += d
	s.logSum += int64(b)
	s.logSq += int64(b) * int64(b)
	s.counts[b]++
}

func (s *segment) remove(d time.Duration, b int32) {
	s.n--
	s.sum -= d
	s.logSum -= int64(b)
	s.logSq -= int64(b) * int64(b)
	s.counts[b]--
}

func (s *segment) reset() {
	s.n, s.sum, s.logSum, s.logSq = 0, 0, 0, 0
	clear(s.counts)
}

// ss is the segment's sum of squared deviations of its logarithms.
func (s *segment) ss() float64 {
	if s.n < 2 {
		return 0
	}
	return float64(s.logSq) - float64(s.logSum)*float64(s.logSum)/float64(s.n)
}

func (s *segment) meanLog() float64 { return float64(s.logSum) / float64(s.n) }

const (
	// cusumSlack is the tolerance a sample's standardised step is
	// reduced by: half a deviation, the usual choice for shifts of one
	// deviation and more.
	cusumSlack = 0.5
	// cusumLimit is the threshold, in deviations. With the reference
	// estimated from the window itself, 12 alarmed about once in 100,000
	// samples of steady exponential, uniform or lognormal streams, 16 not
	// once in 500,000 of each (and a fourfold slowdown of σ 0.5 is found
	// in 8 samples rather than 6, of an exponential in 26 rather than 20).
	cusumLimit = 16
	// cusumClip bounds one sample's standardised step.
	cusumClip = 3
	// minDeviation is the least spread the steps are measured in, a
	// bucket: a dependency of constant service time would otherwise see
	// a change point in every sample that lands in the next bucket.
	minDeviation = 1.0
	// detectFrom is how many samples the window needs before it looks
	// for change points: until then it is only the last samples anyway.
	detectFrom = 2 * recomputeEvery
)

// logOf is d's logarithm to the base 2^(1/8), to within a bucket: the
// index of its histogram bucket, which add computes anyway — a logarithm
// per sample would cost as much as the rest of an admission. Eight buckets
// to a power of two, each at most an eighth of its value wide: a sample's
// error is a few percent, its average over a segment far less.
func logOf(d time.Duration) int32 { return int32(bucketOf(d)) }

// newWindow returns a window of size samples; with follow, its estimates
// follow a level shift (see window), otherwise they are the window's alone.
func newWindow(size int, follow bool) *window {
	return &window{
		ring:   make([]time.Duration, size),
		bkts:   make([]int32, size),
		old:    segment{counts: make([]uint32, buckets.Len())},
		cur:    segment{counts: make([]uint32, buckets.Len())},
		scale:  1,
		follow: follow,
	}
}

func (w *window) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	b := logOf(d)
	alarm := w.follow && w.n >= detectFrom && w.step(b)
	if w.n == len(w.ring) {
		s := &w.cur
		if w.old.n > 0 {
			s = &w.old // the oldest samples are old's
		}
		s.remove(w.ring[w.next], w.bkts[w.next])
	} else {
		w.n++
	}
	w.ring[w.next], w.bkts[w.next] = d, b
	w.cur.add(d, b)
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
	w.stale++
	if alarm {
		w.split(max(w.upLen, w.downLen))
	}
	w.relevel()
}

// step adds a sample's logarithm b to the CUSUM sums and reports whether
// either passed the threshold. (Plain comparisons rather than min and max:
// those order NaNs and signed zeros, and this is the hot path.)
func (w *window) step(b int32) bool {
	if w.refAge == 0 {
		mean, dev := w.reference()
		w.refMean, w.refScale, w.refAge = mean, 1/dev, recomputeEvery
	}
	w.refAge--
	z := (float64(b) - w.refMean) * w.refScale
	if z > cusumClip {
		z = cusumClip
	} else if z < -cusumClip {
		z = -cusumClip
	}
	if w.up += z - cusumSlack; w.up > 0 {
		w.upLen++
	} else {
		w.up, w.upLen = 0, 0
	}
	if w.down -= z + cusumSlack; w.down > 0 {
		w.downLen++
	} else {
		w.down, w.downLen = 0, 0
	}
	return w.up > cusumLimit || w.down > cusumLimit
}

// reference returns the window's mean logarithm at cur's level and the
// segments' pooled standard deviation of logarithms, in buckets.
func (w *window) reference() (mean, dev float64) {
	n := float64(w.old.n + w.cur.n)
	mean = (float64(w.old.logSum) + float64(w.off)*float64(w.old.n) + float64(w.cur.logSum)) / n
	df := n - 1
	if w.old.n > 0 && w.cur.n > 0 {
		df--
	}
	dev = minDeviation
	if df > 0 {
		dev = max(math.Sqrt(max(w.old.ss()+w.cur.ss(), 0)/df), minDeviation)
	}
	return mean, dev
}

// split makes the last k samples (k ≥ 1) the current segment and all
// before them the old one, moving old's samples to cur's level first so
// that the window's samples before the change point are one level.
// It walks the ring, which is rare: a change point, not a sample.
func (w *window) split(k int) {
	k = min(max(k, 1), w.n)
	first := w.next - w.n // the oldest sample's index, maybe negative
	if first < 0 {
		first += len(w.ring)
	}
	oldN := w.old.n
	w.old.reset()
	w.cur.reset()
	for i := range w.n {
		j := first + i
		if j >= len(w.ring) {
			j -= len(w.ring)
		}
		if i < oldN && w.off != 0 {
			w.bkts[j] = min(max(w.bkts[j]+int32(w.off), 0), int32(buckets.Len()-1))
			w.ring[j] = time.Duration(min(float64(w.ring[j])*w.scale, float64(maxSample)))
		}
		if i < w.n-k {
			w.old.add(w.ring[j], w.bkts[j])
		} else {
			w.cur.add(w.ring[j], w.bkts[j])
		}
	}
	w.off, w.scale = 0, 1
	w.up, w.down, w.upLen, w.downLen = 0, 0, 0, 0
	w.refAge, w.stale = 0, recomputeEvery
	w.shifts++
}

// relevel works out off and scale from the segments, and marks the
// quantiles stale when off moved.
func (w *window) relevel() {
	off := 0
	if w.old.n > 0 && w.cur.n > 0 {
		off = int(math.Round(w.cur.meanLog() - w.old.meanLog()))
	}
	if off != w.off {
		w.off, w.scale = off, math.Exp2(float64(off)/8)
		w.stale = recomputeEvery
	}
}

func (w *window) count() int { return w.n }

// reset empties the window for reuse, keeping its memory.
func (w *window) reset() {
	w.old.reset()
	w.cur.reset()
	*w = window{ring: w.ring, bkts: w.bkts, old: w.old, cur: w.cur, scale: 1, follow: w.follow}
}

func (w *window) mean() time.Duration {
	if w.n == 0 {
		return 0
	}
	sum := w.cur.sum
	if w.old.n > 0 {
		sum += time.Duration(min(float64(w.old.sum)*w.scale, float64(maxSample)*float64(w.old.n)))
	}
	return min(sum/time.Duration(w.n), maxSample)
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

// walk reads the quantiles off cur's histogram and old's moved by off
// buckets (old's buckets moved past either end count at that end).
func (w *window) walk() {
	// The q-quantile is the sample of rank ceil(q·n) in sorted order.
	r50 := uint32((w.n*50 + 99) / 100)
	r95 := uint32((w.n*95 + 99) / 100)
	r99 := uint32((w.n*99 + 99) / 100)
	last := len(w.cur.counts) - 1
	var cum uint32
	got50, got95 := false, false
	for i := range w.cur.counts {
		cum += w.cur.counts[i]
		if w.old.n > 0 {
			cum += w.oldAt(i, last)
		}
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

// oldAt is old's count at bucket i once moved by off.
func (w *window) oldAt(i, last int) uint32 {
	j := i - w.off
	switch {
	case i == 0 && j > 0, i == last && j < last:
		var c uint32
		lo, hi := 0, j
		if i == last {
			lo, hi = j, last
		}
		for k := max(lo, 0); k <= min(hi, last); k++ {
			c += w.old.counts[k]
		}
		return c
	case j < 0 || j > last:
		return 0
	}
	return w.old.counts[j]
}
