package sim

import (
	"time"

	"github.com/sluicehq/sluice/internal/loghist"
)

// hist is a log-linear histogram of durations in microseconds: every power
// of two is split into 128 buckets, so a quantile read from it is within
// 0.4% of the true value (the bucket's midpoint is reported), in fixed
// memory whatever the number of samples. A million-request run keeps every
// latency it reports on without storing a million values.
var histScale = loghist.New(7, 42) // up to 2^42 µs ≈ 51 days

type hist struct {
	counts []uint32
	n      int
}

func (h *hist) add(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint32, histScale.Len())
	}
	h.counts[histBucket(d)]++
	h.n++
}

func histBucket(d time.Duration) int { return histScale.Bucket(d) }
func histValue(i int) time.Duration  { return histScale.Value(i) }

// quantile returns the nearest-rank q-quantile, or 0 without samples.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := nearestRank(q, h.n)
	var cum uint64
	for i, c := range h.counts {
		cum += uint64(c)
		if cum >= rank {
			return histValue(i)
		}
	}
	return histValue(histScale.Len() - 1)
}

// nearestRank is the rank, 1..n, of the nearest-rank q-quantile of n > 0
// samples.
func nearestRank(q float64, n int) uint64 {
	rank := uint64(q*float64(n) + 0.999999)
	return min(max(rank, 1), uint64(n))
}

// fineLimit is where msHist's millisecond buckets end.
const fineLimit = time.Minute

// msHist is a histogram of durations to the millisecond below fineLimit,
// and as coarse as hist above it. Refusal times are read against deadlines
// of seconds and against the figures a policy is built from: a gateway
// that refuses at once must read 0 ms, not hist's bucket midpoint, and a
// 30 s queue timeout 30000 ms, not something within hist's 0.4% (120 ms)
// of it. Past a minute a caller has long given up on most deadlines, and
// 0.4% will do.
//
// A minute of 1 ms buckets is 240 KB of counts, too much to allocate for
// every class of every run of a sweep when most refusals come at once; the
// buckets grow only as far as the longest duration seen, so memory is
// bounded by that whatever the number of samples.
type msHist struct {
	fine []uint32 // fine[i] counts the durations that round to i ms
	over hist     // the durations of fineLimit and more
	n    int
}

func (h *msHist) add(d time.Duration) {
	h.n++
	i := int((max(d, 0) + time.Millisecond/2) / time.Millisecond)
	if i >= int(fineLimit/time.Millisecond) {
		h.over.add(d)
		return
	}
	if i >= len(h.fine) {
		// Doubling keeps the copies to a constant per sample on average.
		grown := make([]uint32, min(max(i+1, 2*len(h.fine), 64), int(fineLimit/time.Millisecond)))
		copy(grown, h.fine)
		h.fine = grown
	}
	h.fine[i]++
}

// quantile returns the nearest-rank q-quantile, or 0 without samples.
func (h *msHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := nearestRank(q, h.n)
	var cum uint64
	for i, c := range h.fine {
		cum += uint64(c)
		if cum >= rank {
			return time.Duration(i) * time.Millisecond
		}
	}
	// The rank is among the durations of a minute or more. hist's bucket
	// that holds fineLimit may have its midpoint below it; the clamp keeps
	// a coarse quantile from reading below a fine one.
	for i, c := range h.over.counts {
		cum += uint64(c)
		if cum >= rank {
			return max(histValue(i), fineLimit)
		}
	}
	return histValue(histScale.Len() - 1)
}
