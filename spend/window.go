package spend

import "time"

// Spend is kept in minute buckets. A window of length W ending at time t
// covers (t−W, t]: the current minute's bucket counts in full (all of it was
// spent before t), the W/1m − 1 minutes before it in full, and the bucket of
// the minute W before the current one counts for the part of that minute
// still inside the window, on the assumption that spend within a minute was
// uniform. The sum therefore slides smoothly instead of dropping a whole
// minute of spend at each minute boundary, and it is piecewise linear in t,
// so the moment it falls below a threshold can be computed exactly: that is
// what RetryAfter reports.

// bucketWidth is the resolution of every window.
const bucketWidth = time.Minute

// minuteOf is the index of the minute containing t: Unix minutes, floored.
func minuteOf(t time.Time) int64 {
	s := t.Unix()
	m := s / 60
	if s%60 < 0 {
		m--
	}
	return m
}

// minuteStart is the start of minute m.
func minuteStart(m int64) time.Time { return time.Unix(m*60, 0) }

// phaseOf is how far into its minute t is, in [0, 1).
func phaseOf(t time.Time) float64 {
	return float64(t.Sub(minuteStart(minuteOf(t)))) / float64(bucketWidth)
}

// windowSpend is the spend in a window whose buckets are a, oldest first:
// a[len(a)-1] is the current minute, a[0] the minute leaving the window, of
// which the fraction 1−phase is still inside.
func windowSpend(a []int64, phase float64) float64 {
	var s int64
	for _, v := range a[1:] {
		s += v
	}
	return float64(s) + (1-phase)*float64(a[0])
}

// freeAfter is how long from now, with nothing more spent, until the spend
// of the window whose buckets are a (as for windowSpend) falls below
// target; zero when it already is. target must be positive, or the answer
// is the window's length (the most the window can take to empty).
//
// Walking forward minute by minute (m = current + k), the spend at phase φ
// of minute m is S(m) + (1−φ)·A(m), where S(m) is the sum of the W/1m
// buckets ending at m (future buckets are empty) and A(m) the bucket
// leaving the window. Within a minute it is linear in φ, so the crossing is
// found by one division.
func freeAfter(a []int64, phase, target float64) time.Duration {
	n := len(a) - 1 // minutes in the window
	if target <= 0 {
		return time.Duration(n) * bucketWidth
	}
	var s int64
	for _, v := range a[1:] {
		s += v
	}
	at := func(k int, phi float64) time.Duration {
		return time.Duration((float64(k) - phase + phi) * float64(bucketWidth))
	}
	for k := 0; k <= n+1; k++ {
		var leaving float64
		if k <= n {
			leaving = float64(a[k])
		}
		phi := 0.0
		if k == 0 {
			phi = phase
		}
		S := float64(s)
		if S+(1-phi)*leaving < target {
			return at(k, phi)
		}
		if leaving > 0 && S < target {
			return at(k, 1-(target-S)/leaving)
		}
		if k+1 <= n {
			s -= a[k+1]
		}
	}
	return time.Duration(n) * bucketWidth // unreachable: an empty window is below any positive target
}

// retryAfter turns the crossing time of freeAfter into a delay after which
// the window is certainly below its target: the first whole millisecond
// after the crossing plus a microsecond, the microsecond covering the float
// rounding of the crossing (a crossing computed a few nanoseconds early
// must not yield a delay at which the window is still exactly at its
// target). Never zero.
func retryAfter(d time.Duration) time.Duration {
	d += time.Microsecond
	if r := d.Truncate(time.Millisecond); r != d {
		return r + time.Millisecond
	}
	return d
}
