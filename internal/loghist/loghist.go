// Package loghist maps durations onto log-linear buckets: values below
// 2^SubBits microseconds get a bucket each, and above that every power of two
// is split into 2^SubBits buckets, so a value read back from its bucket (the
// midpoint) is within 2^-SubBits of the truth whatever its magnitude. It is
// the arithmetic shared by the admission gate's service-time window and the
// simulator's latency histograms; each keeps its own counts.
package loghist

import (
	"math/bits"
	"time"
)

// Scale is a bucket layout. The zero Scale is not usable; use New.
type Scale struct {
	subBits, maxExp int
	sub, n          int
}

// New returns the layout with 2^subBits buckets per power of two, up to
// 2^maxExp microseconds (larger values share the last bucket). subBits must
// be 1..16 and maxExp in subBits..62; New panics otherwise, as the layouts
// are constants of the code that uses them, never input.
func New(subBits, maxExp int) Scale {
	if subBits < 1 || subBits > 16 || maxExp < subBits || maxExp > 62 {
		panic("loghist: bad layout")
	}
	sub := 1 << subBits
	return Scale{subBits: subBits, maxExp: maxExp, sub: sub, n: sub + (maxExp-subBits+1)*sub}
}

// Len is the number of buckets.
func (s Scale) Len() int { return s.n }

// Bucket returns the bucket of d; negative durations go to bucket 0.
func (s Scale) Bucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < uint64(s.sub) {
		return int(us)
	}
	e := bits.Len64(us) - 1 // ≥ subBits
	if e > s.maxExp {
		return s.n - 1
	}
	sub := int(us>>(e-s.subBits)) & (s.sub - 1)
	return s.sub + (e-s.subBits)*s.sub + sub
}

// Value is a representative value of bucket i: its midpoint.
func (s Scale) Value(i int) time.Duration {
	if i < s.sub {
		return time.Duration(i)*time.Microsecond + time.Microsecond/2
	}
	e := (i-s.sub)/s.sub + s.subBits
	sub := (i - s.sub) % s.sub
	lo := uint64(s.sub+sub) << (e - s.subBits)
	width := uint64(1) << (e - s.subBits)
	return time.Duration(lo)*time.Microsecond + time.Duration(width)*time.Microsecond/2
}
