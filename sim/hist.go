package sim

import (
	"math/bits"
	"time"
)

// hist is a log-linear histogram of durations in microseconds: every power
// of two is split into 128 buckets, so a quantile read from it is within
// 0.4% of the true value (the bucket's midpoint is reported), in fixed
// memory whatever the number of samples. A million-request run keeps every
// latency it reports on without storing a million values.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histMaxExp  = 42 // 2^42 µs ≈ 51 days
	histBuckets = histSub + (histMaxExp-histSubBits+1)*histSub
)

type hist struct {
	counts []uint32
	n      int
}

func (h *hist) add(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint32, histBuckets)
	}
	h.counts[histBucket(d)]++
	h.n++
}

func histBucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - 1
	if e > histMaxExp {
		return histBuckets - 1
	}
	sub := int(us>>(e-histSubBits)) & (histSub - 1)
	return histSub + (e-histSubBits)*histSub + sub
}

func histValue(i int) time.Duration {
	if i < histSub {
		return time.Duration(i)*time.Microsecond + time.Microsecond/2
	}
	e := (i-histSub)/histSub + histSubBits
	sub := (i - histSub) % histSub
	lo := uint64(histSub+sub) << (e - histSubBits)
	width := uint64(1) << (e - histSubBits)
	return time.Duration(lo)*time.Microsecond + time.Duration(width)*time.Microsecond/2
}

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
	return histValue(histBuckets - 1)
}
