package spend

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestMinuteOf(t *testing.T) {
	for _, tc := range []struct {
		at    time.Time
		want  int64
		phase float64
	}{
		{time.Unix(0, 0), 0, 0},
		{time.Unix(59, 999_999_999), 0, 59.999999999 / 60},
		{time.Unix(60, 0), 1, 0},
		{time.Unix(-1, 0), -1, 59.0 / 60},
		{time.Unix(-60, 0), -1, 0},
		{time.Unix(-61, 0), -2, 59.0 / 60},
		{t0.Add(30 * time.Second), t0.Unix() / 60, 0.5},
	} {
		if got := minuteOf(tc.at); got != tc.want {
			t.Errorf("minuteOf(%v) = %d, want %d", tc.at.Unix(), got, tc.want)
		}
		if got := phaseOf(tc.at); math.Abs(got-tc.phase) > 1e-12 {
			t.Errorf("phaseOf(%v) = %v, want %v", tc.at.Unix(), got, tc.phase)
		}
	}
}

// spendAt is a second, independent statement of the window rule, by
// overlap of time intervals: the window is (T−W, T]; a bucket [s, s+1m)
// that contains T counts in full (its spend all happened by T), any other
// counts for the fraction of it inside the window. a is as for windowSpend,
// at time now; d is how far after now T is; buckets after now are empty.
func spendAt(a []int64, now time.Time, d time.Duration) float64 {
	n := len(a) - 1
	cur := minuteStart(minuteOf(now))
	T := now.Add(d)
	W := time.Duration(n) * time.Minute
	var s float64
	for i, v := range a {
		start := cur.Add(time.Duration(i-n) * time.Minute)
		end := start.Add(time.Minute)
		switch {
		case !T.Before(start) && T.Before(end):
			s += float64(v)
		case !end.After(T):
			lo := maxTime(start, T.Add(-W))
			if end.After(lo) {
				s += float64(v) * float64(end.Sub(lo)) / float64(time.Minute)
			}
		}
	}
	return s
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func TestWindowSpend(t *testing.T) {
	a := []int64{60, 10, 0, 0, 0, 5}
	for _, tc := range []struct {
		phase float64
		want  float64
	}{{0, 75}, {0.5, 45}, {0.75, 30}} {
		if got := windowSpend(a, tc.phase); got != tc.want {
			t.Errorf("windowSpend(phase %v) = %v, want %v", tc.phase, got, tc.want)
		}
		now := t0.Add(time.Duration(tc.phase * float64(time.Minute)))
		if got := spendAt(a, now, 0); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("reference at phase %v = %v, want %v", tc.phase, got, tc.want)
		}
	}
}

// TestFreeAfter checks the computed crossing against the reference rule:
// at the crossing the window is at its target, a millisecond before it is
// still at or above, and at now+retryAfter it is below.
func TestFreeAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		n := []int{1, 5, 60}[i%3]
		a := make([]int64, n+1)
		for j := range a {
			if rng.IntN(3) > 0 {
				a[j] = rng.Int64N(1_000_000)
			}
		}
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		full := spendAt(a, now, 0)
		target := full * rng.Float64() * 1.2
		if target <= 0 {
			continue
		}
		d := freeAfter(a, phaseOf(now), target)
		if full < target {
			if d != 0 {
				t.Fatalf("case %d: already below target, freeAfter = %v", i, d)
			}
			continue
		}
		if got := spendAt(a, now, d); math.Abs(got-target) > 1e-6*target+1 {
			t.Fatalf("case %d: at the crossing %v the window holds %v, want %v", i, d, got, target)
		}
		if d >= time.Millisecond {
			if got := spendAt(a, now, d-time.Millisecond); got < target {
				t.Fatalf("case %d: %v before the crossing the window is already below target (%v < %v)", i, time.Millisecond, got, target)
			}
		}
		ra := retryAfter(d)
		if ra <= d || ra > d+time.Millisecond+time.Microsecond || ra%time.Millisecond != 0 {
			t.Fatalf("case %d: retryAfter(%v) = %v", i, d, ra)
		}
		if got := spendAt(a, now, ra); got >= target {
			t.Fatalf("case %d: at now+retryAfter the window holds %v, not below %v", i, got, target)
		}
	}
}

func TestFreeAfterExamples(t *testing.T) {
	// $5 spent in the first minute of a 5-minute window, now 30s into the
	// fourth minute after it: the bucket starts leaving at minute 5 and is
	// half gone at 5m30s; the window is below $2.5 just after that.
	a := []int64{0, 5, 0, 0, 0, 0} // oldest leaving (t0−1m), t0, …, t0+4m (current)
	now := t0.Add(4*time.Minute + 30*time.Second)
	if got, want := freeAfter(a, phaseOf(now), 2.5), 60*time.Second; got != want {
		t.Errorf("freeAfter = %v, want %v", got, want)
	}
	if got := freeAfter(a, phaseOf(now), 0); got != 5*time.Minute {
		t.Errorf("a target of zero: %v, want the window length", got)
	}
}
