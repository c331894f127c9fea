package loadgen

import (
	"math"
	"testing"
	"time"
)

// take returns the arrivals of the schedule before horizon.
func take(seed uint64, rate float64, classes []Class, horizon time.Duration) []Arrival {
	var out []Arrival
	for a := range Arrivals(seed, rate, classes) {
		if a.At >= horizon {
			break
		}
		out = append(out, a)
	}
	return out
}

func TestArrivalCountIsPoisson(t *testing.T) {
	// Over 200s at 50/s a Poisson count has mean 10000 and standard
	// deviation 100; four deviations is a tolerance no correct generator
	// misses for these fixed seeds, and a rate error of 5% always does.
	const rate, horizon = 50.0, 200 * time.Second
	for seed := uint64(1); seed <= 5; seed++ {
		n := len(take(seed, rate, nil, horizon))
		if math.Abs(float64(n)-10000) > 400 {
			t.Errorf("seed %d: %d arrivals in %v at %v/s, want 10000 ± 400", seed, n, horizon, rate)
		}
	}
}

func TestInterArrivalTimesAreExponential(t *testing.T) {
	// A fixed-interval (or uniform) generator has the right count but the
	// wrong shape: exponential gaps have a coefficient of variation of 1 and
	// about 1/e of them exceed the mean.
	arr := take(7, 20, nil, 1000*time.Second)
	n := float64(len(arr) - 1)
	var sum, sumSq float64
	over := 0
	mean := 1.0 / 20
	for i := 1; i < len(arr); i++ {
		g := (arr[i].At - arr[i-1].At).Seconds()
		sum += g
		sumSq += g * g
		if g > mean {
			over++
		}
	}
	m := sum / n
	sd := math.Sqrt(sumSq/n - m*m)
	if cv := sd / m; cv < 0.95 || cv > 1.05 {
		t.Errorf("coefficient of variation = %.3f, want ≈ 1", cv)
	}
	if frac := float64(over) / n; math.Abs(frac-math.Exp(-1)) > 0.02 {
		t.Errorf("share of gaps above the mean = %.3f, want ≈ %.3f", frac, math.Exp(-1))
	}
	if math.Abs(m-mean)/mean > 0.03 {
		t.Errorf("mean gap = %.4fs, want ≈ %.4fs", m, mean)
	}
}

func TestArrivalsAreReproducible(t *testing.T) {
	a := take(42, 30, nil, 10*time.Second)
	b := take(42, 30, nil, 10*time.Second)
	c := take(43, 30, nil, 10*time.Second)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("same seed gave %d and %d arrivals", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("arrival %d differs for the same seed: %+v vs %+v", i, a[i], b[i])
		}
		if a[i].Seq != i {
			t.Fatalf("arrival %d has Seq %d", i, a[i].Seq)
		}
		if i > 0 && a[i].At < a[i-1].At {
			t.Fatalf("arrival %d goes back in time", i)
		}
	}
	same := len(a) == len(c)
	for i := 0; same && i < len(a); i++ {
		same = a[i] == c[i]
	}
	if same {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
}

func TestClassMixFollowsWeights(t *testing.T) {
	classes := []Class{
		{Name: "a", Weight: 7, Deadline: time.Second}, // weights need not sum to 1
		{Name: "never", Weight: 0, Deadline: time.Second},
		{Name: "b", Weight: 2, Deadline: time.Second},
		{Name: "c", Weight: 1, Deadline: time.Second},
	}
	counts := make([]int, len(classes))
	n := 0
	for a := range Arrivals(5, 100, classes) {
		if n == 20000 {
			break
		}
		counts[a.Class]++
		n++
	}
	// Binomial standard deviations for 20000 draws: a 65, b 57, c 42.
	for i, want := range []float64{14000, 0, 4000, 2000} {
		if math.Abs(float64(counts[i])-want) > 300 {
			t.Errorf("class %s drawn %d times of %d, want ≈ %.0f", classes[i].Name, counts[i], n, want)
		}
	}
	if counts[1] != 0 {
		t.Errorf("zero-weight class drawn %d times", counts[1])
	}
}

func TestArrivalsDefaultMix(t *testing.T) {
	counts := map[int]int{}
	for _, a := range take(1, 100, nil, 100*time.Second) {
		counts[a.Class]++
	}
	total := float64(counts[0] + counts[1] + counts[2])
	for i, want := range []float64{0.7, 0.2, 0.1} {
		if got := float64(counts[i]) / total; math.Abs(got-want) > 0.02 {
			t.Errorf("default class %d share %.3f, want %.1f", i, got, want)
		}
	}
}

func TestArrivalsWithoutRateYieldNothing(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN()} {
		for range Arrivals(1, rate, nil) {
			t.Fatalf("rate %v yielded an arrival", rate)
		}
	}
}
