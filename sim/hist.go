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
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), uint64(h.n))
	var cum uint64
	for i, c := range h.counts {
		cum += uint64(c)
		if cum >= rank {
			return histValue(i)
		}
	}
	return histValue(histScale.Len() - 1)
}
