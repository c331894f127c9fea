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

// TestWindowFollowsALevelShiftToTheNewQuantiles: when a lognormal
// dependency (σ 0.5) slows fourfold, the window's p50 and p95 are those of
// the new level — those of a window that knew the shift (its samples from
// before it four times as long) — not those of a mixture of the two levels,
// whose p95 overshoots the new level's by half or more while the window
// turns over. From 32 slowed samples of 256 on, until the window has turned
// over, they are within 10% of the knowing window's at nine checks in ten
// or more and never off by a third: the new level is the mean logarithm of
// the samples since the change, whose error over 32 samples is 9%.
func TestWindowFollowsALevelShiftToTheNewQuantiles(t *testing.T) {
	median := 100 * time.Millisecond
	var checks, within int
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 24))
		w, knowing := newWindow(256, true), newWindow(256, false)
		for range 1000 {
			d := lognormal(rng, median, 0.5)
			w.add(d)
			knowing.add(4 * d)
		}
		for i := range 256 {
			d := lognormal(rng, 4*median, 0.5)
			w.add(d)
			knowing.add(d)
			if i+1 < 32 {
				continue
			}
			p50, p95 := w.quantiles()
			k50, k95 := knowing.quantiles()
			off := func(got, want time.Duration, by float64) bool { return float64((got - want).Abs()) > by*float64(want) }
			checks++
			if !off(p50, k50, 0.1) && !off(p95, k95, 0.1) {
				within++
			}
			if off(p50, k50, 1.0/3) || off(p95, k95, 1.0/3) {
				t.Errorf("seed %d, %d samples after a fourfold slowdown: p50 %v p95 %v, want %v and %v within a third",
					seed, i+1, p50, p95, k50, k95)
				break
			}
		}
	}
	if within < checks*9/10 {
		t.Errorf("p50 and p95 within 10%% of the new level's at %d of %d checks, want nine in ten", within, checks)
	}
}

// TestWindowHoldsStillOnSteadyNoise: on long steady streams of noisy
// distributions — exponential, lognormal of σ 0.5 and 1 — the following
// window's quantiles are the plain window's (its samples' own) at all but
// a few of 100,000 samples, and no change point is found: the test's
// threshold is in units of the observed spread, so an exponential's noise
// is not a level shift.
func TestWindowHoldsStillOnSteadyNoise(t *testing.T) {
	for _, tc := range []struct {
		name string
		draw func(*rand.Rand) time.Duration
	}{
		{"exponential", func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(200*time.Millisecond)) }},
		{"lognormal σ 0.5", func(r *rand.Rand) time.Duration { return lognormal(r, 200*time.Millisecond, 0.5) }},
		{"lognormal σ 1", func(r *rand.Rand) time.Duration { return lognormal(r, 200*time.Millisecond, 1) }},
	} {
		rng := rand.New(rand.NewPCG(7, 24))
		follow, plain := newWindow(256, true), newWindow(256, false)
		const n = 100_000
		moved := 0
		for range n {
			d := tc.draw(rng)
			follow.add(d)
			plain.add(d)
			f50, f95 := follow.quantiles()
			p50, p95 := plain.quantiles()
			if (f50-p50).Abs() > p50/10 || (f95-p95).Abs() > p95/10 {
				moved++
			}
		}
		if follow.shifts != 0 {
			t.Errorf("%s: %d change points found in a steady stream of %d samples, want none", tc.name, follow.shifts, n)
		}
		if moved > n/1000 {
			t.Errorf("%s: the following window's p50 or p95 strayed more than 10%% from the window's own at %d of %d samples, want ≤ 0.1%%",
				tc.name, moved, n)
		}
	}
}
