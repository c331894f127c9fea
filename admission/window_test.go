package admission

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 7 * time.Microsecond, 8 * time.Microsecond,
		time.Millisecond, 1234 * time.Millisecond, time.Minute, 24 * time.Hour} {
		v := bucketValue(bucketOf(d))
		if diff := (v - d).Abs(); float64(diff) > float64(d)/8+float64(time.Microsecond) {
			t.Errorf("%v lands in a bucket worth %v", d, v)
		}
	}
	if bucketOf(-time.Second) != 0 || bucketOf(1<<62) != buckets.Len()-1 {
		t.Error("out-of-range values must clamp to the end buckets")
	}
}

func TestWindowQuantilesAndMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := newWindow(1000, true)
	var all []time.Duration
	for range 5000 {
		d := time.Duration(rng.ExpFloat64() * float64(time.Second))
		w.add(d)
		all = append(all, d)
	}
	recent := slices.Clone(all[len(all)-1000:])
	slices.Sort(recent)
	var sum time.Duration
	for _, d := range recent {
		sum += d
	}
	p50, p95 := w.quantiles()
	within := func(name string, got, want time.Duration) {
		if diff := (got - want).Abs(); float64(diff) > 0.07*float64(want) {
			t.Errorf("%s = %v, exact %v", name, got, want)
		}
	}
	within("p50", p50, recent[499])
	within("p95", p95, recent[949])
	if got, want := w.mean(), sum/1000; got != want {
		t.Errorf("mean = %v, exact %v", got, want)
	}
	if w.count() != 1000 {
		t.Errorf("count = %d, want the window size", w.count())
	}
}

func TestWindowForgetsOldSamples(t *testing.T) {
	w := newWindow(64, true)
	for range 64 {
		w.add(10 * time.Second)
	}
	for range 64 {
		w.add(time.Second)
	}
	p50, p95 := w.quantiles()
	if p50 > 1100*time.Millisecond || p95 > 1100*time.Millisecond || w.mean() != time.Second {
		t.Fatalf("old samples still count: p50 %v p95 %v mean %v", p50, p95, w.mean())
	}
}
