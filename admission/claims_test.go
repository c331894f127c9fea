package admission

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestTenantsShareARankFairly: tenant a sends ten times its share of
// capacity, tenant b stays within its share. Round-robin service within the
// rank, fair eviction at the bound and a fairness-aware wait estimate keep b's
// success rate at what it gets alone.
func TestTenantsShareARankFairly(t *testing.T) {
	const (
		slots   = 4
		service = 100 * time.Millisecond // capacity 40/s
		dur     = 60 * time.Second
	)
	run := func(withFlood bool) (bSuccess float64, aServed int) {
		c := newCore(t, Config{Concurrency: slots, MaxQueue: 100})
		h := &harness{t: t, c: c, service: func(string) time.Duration { return service }}
		rng := rand.New(rand.NewPCG(7, 7))
		deadline := func(as []*arrival) []*arrival {
			for _, a := range as {
				a.req.Deadline = a.at.Add(time.Second)
			}
			return as
		}
		b := deadline(poisson(rng, t0, 15, dur, Request{Tenant: "b"})) // within its half: 20/s
		all := b
		var a []*arrival
		if withFlood {
			a = deadline(poisson(rng, t0, 200, dur, Request{Tenant: "a"})) // 10× its half
			all = merge(a, b)
		}
		h.run(all)
		ok := 0
		for _, x := range b {
			if x.success() {
				ok++
			}
		}
		for _, x := range a {
			if x.success() {
				aServed++
			}
		}
		return float64(ok) / float64(len(b)), aServed
	}
	alone, _ := run(false)
	shared, aServed := run(true)
	t.Logf("b's success alone %.3f, beside a's flood %.3f; a's successes %d", alone, shared, aServed)
	if shared < alone-0.01 {
		t.Errorf("b's success rate fell from %.3f to %.3f beside a's flood", alone, shared)
	}
	if aServed == 0 {
		t.Error("the flooding tenant got nothing: fairness must not starve it")
	}
}

// waitError runs a saturated FIFO queue with lognormal service times and
// returns the mean absolute error of the estimated wait told at arrival
// against the wait each queued request really had, relative to the mean real
// wait.
func waitError(t *testing.T, est WaitEstimator, sigma float64, seed uint64) (relErr, bias float64) {
	const slots = 8
	median := time.Second
	c := newCore(t, Config{Concurrency: slots, MaxQueue: 400, FIFOOnly: true, WaitEstimator: est})
	rng := rand.New(rand.NewPCG(seed, 1))
	h := &harness{t: t, c: c, service: func(string) time.Duration { return lognormal(rng, median, sigma) }}
	// Warm the estimator with the same distribution, then offer 95% of capacity.
	for range 256 {
		c.record(time.Time{}, "", 0, 0, Outcome{ServiceTime: lognormal(rng, median, sigma)})
	}
	meanService := float64(c.all.mean())
	rate := 0.95 * slots / (meanService / float64(time.Second))
	arrivals := poisson(rng, t0, rate, 2*time.Hour, Request{})
	h.run(arrivals)
	var sumErr, sumBias, sumWait float64
	n := 0
	for _, a := range arrivals {
		if a.decision.Verdict != Queued || a.granted.IsZero() {
			continue
		}
		real := float64(a.granted.Sub(a.at))
		guess := float64(a.decision.EstimatedWait)
		sumErr += abs(guess - real)
		sumBias += guess - real
		sumWait += real
		n++
	}
	if n < 1000 {
		t.Fatalf("only %d queued requests: the load is too light to compare", n)
	}
	return sumErr / sumWait, sumBias / sumWait
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestWaitEstimatorAccuracy measures which statistic of service time predicts
// real queueing delay better: Little's law asks for the mean, the common rule
// of thumb uses the median. For symmetric service times they agree; for the right-skewed
// latencies of LLM calls (lognormal, sigma 0.8–1) the median underestimates
// every wait by the ratio mean/median, so the mean is the default.
func TestWaitEstimatorAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	for _, sigma := range []float64{0.25, 1.0} {
		mean, meanBias := waitError(t, ByMean, sigma, 42)
		median, medianBias := waitError(t, ByMedian, sigma, 42)
		t.Logf("sigma %.2f: relative error by mean %.3f (bias %+.3f), by median %.3f (bias %+.3f)",
			sigma, mean, meanBias, median, medianBias)
		if sigma >= 1 && !(mean < median) {
			t.Errorf("sigma %.2f: mean-based error %.3f is not below median-based %.3f", sigma, mean, median)
		}
	}
}
