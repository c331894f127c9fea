package loghist

import (
	"testing"
	"time"
)

func TestRoundTripWithinResolution(t *testing.T) {
	for _, subBits := range []int{3, 7} {
		s := New(subBits, 42)
		tol := 1.0 / float64(int(1)<<subBits)
		for _, d := range []time.Duration{0, time.Microsecond, 7 * time.Microsecond, 200 * time.Microsecond,
			time.Millisecond, 1234 * time.Millisecond, time.Minute, 24 * time.Hour} {
			v := s.Value(s.Bucket(d))
			if diff := (v - d).Abs(); float64(diff) > tol*float64(d)+float64(time.Microsecond) {
				t.Errorf("subBits %d: %v lands in a bucket worth %v", subBits, d, v)
			}
		}
		if s.Bucket(-time.Second) != 0 || s.Bucket(1<<62) != s.Len()-1 {
			t.Errorf("subBits %d: out-of-range values must clamp to the end buckets", subBits)
		}
		// Buckets are ordered: a larger value never lands in a lower bucket.
		prev := 0
		for d := time.Microsecond; d < time.Hour; d = d*9/8 + time.Microsecond {
			b := s.Bucket(d)
			if b < prev {
				t.Fatalf("subBits %d: bucket of %v is %d, below %d", subBits, d, b, prev)
			}
			prev = b
		}
	}
}

func TestBadLayoutPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(0, 42) did not panic")
		}
	}()
	New(0, 42)
}
