package sim

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
)

func storm(t *testing.T) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Load("../scenarios/retry-storm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestSameSeedSameResult: a run is a pure function of the scenario, the
// seed, the policy and the load.
func TestSameSeedSameResult(t *testing.T) {
	sc := storm(t)
	for _, p := range []string{"fifo", "sluice"} {
		opt := Options{Requests: 20_000, Trace: true}
		a, err := Run(t.Context(), sc, p, 5, opt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(t.Context(), sc, p, 5, opt)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs with seed %d differ:\n%+v\n%+v", p, sc.Seed, a, b)
		}
		other := *sc
		other.Seed++
		c, err := Run(t.Context(), &other, p, 5, opt)
		if err != nil {
			t.Fatal(err)
		}
		if c.Requests == a.Requests && c.OnTime == a.OnTime && c.Billed == a.Billed {
			t.Errorf("%s: seeds %d and %d gave the same run", p, sc.Seed, other.Seed)
		}
	}
}

// TestSweepIsDeterministicWhateverTheWorkers: runs in parallel give the
// results runs in series give.
func TestSweepIsDeterministicWhateverTheWorkers(t *testing.T) {
	sc := storm(t)
	opt := SweepOptions{Options: Options{Requests: 5000}, Loads: []float64{1, 5}, Policies: []string{"fifo", "small-queue", "sluice"}}
	opt.Workers = 1
	a, err := RunSweep(t.Context(), sc, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Workers = 4
	b, err := RunSweep(t.Context(), sc, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Results, b.Results) {
		t.Error("one worker and four workers disagree")
	}
	if r := a.Result(5, "sluice"); r == nil || r.Load != 5 || r.Policy != "sluice" {
		t.Errorf("Result(5, sluice) = %+v", r)
	}
	if a.Result(3, "sluice") != nil || a.Result(5, "nope") != nil {
		t.Error("Result of a load or policy not run is not nil")
	}
}

// TestArrivalsArePoissonAtTheOfferedRate: the window holds the requested
// number of arrivals on average, and bursts and steps shape the rate.
func TestArrivalsArePoissonAtTheOfferedRate(t *testing.T) {
	sc := storm(t)
	sc.Traffic[0].Bursts = []scenario.Burst{{At: scenario.TimePoint{F: 0.5, Fraction: true}, For: scenario.TimePoint{F: 0.1, Fraction: true}, Factor: 3}}
	sc.Traffic[0].Steps = []scenario.Step{{At: scenario.TimePoint{F: 0.8, Fraction: true}, Factor: 0.5}}
	const n = 200_000
	s, err := newSetup(sc, "fifo", 2, Options{Requests: n})
	if err != nil {
		t.Fatal(err)
	}
	// Expected: 0.5 + 0.1×3 + 0.2 + 0.2×0.5 = 1.1 window-lengths at the base rate.
	base := 2 * s.capacity
	if got, want := s.window.Seconds(), n/(1.1*base); math.Abs(got-want) > 0.001*want {
		t.Errorf("window %.1fs, want %.1fs", got, want)
	}
	var at []time.Duration
	src := s.sources[0]
	for {
		a, ok := src.next()
		if !ok {
			break
		}
		at = append(at, a)
	}
	if !slices.IsSorted(at) {
		t.Fatal("arrivals out of order")
	}
	if d := math.Abs(float64(len(at)) - n); d > 5*math.Sqrt(n) {
		t.Errorf("%d arrivals, want %d ± %.0f", len(at), n, 5*math.Sqrt(n))
	}
	count := func(from, to float64) float64 {
		lo, hi := time.Duration(from*float64(s.window)), time.Duration(to*float64(s.window))
		k := 0
		for _, a := range at {
			if a >= lo && a < hi {
				k++
			}
		}
		return float64(k) / ((to - from) * s.window.Seconds())
	}
	for _, c := range []struct{ from, to, factor float64 }{{0, 0.5, 1}, {0.5, 0.6, 3}, {0.6, 0.8, 1}, {0.8, 1, 0.5}} {
		got, want := count(c.from, c.to), c.factor*base
		if math.Abs(got-want) > 0.03*want {
			t.Errorf("rate in [%v, %v) of the window: %.2f/s, want %.2f/s", c.from, c.to, got, want)
		}
	}
}

// TestServiceTimes: the lognormal sampler has the configured median and
// mean, steps apply by start time, and empirical draws come from the list.
func TestServiceTimes(t *testing.T) {
	sm := newSampler(scenario.Service{Lognormal: &scenario.Lognormal{Median: time.Second, Sigma: 0.5}}, []resolvedStep{{at: time.Minute, factor: 4}})
	if d := sm.draw(0.5, 0, 1, 0, 0); d != time.Second {
		t.Errorf("draw at u=0.5 is %v, want the median", d)
	}
	if d := sm.draw(0.5, time.Minute, 1, 0, 0); d != 4*time.Second {
		t.Errorf("after the step, draw at u=0.5 is %v, want 4s", d)
	}
	if d := sm.draw(0.5, time.Minute, 0.5, 0, 0); d != 2*time.Second {
		t.Errorf("for a model twice as fast, after the step, draw at u=0.5 is %v, want 2s", d)
	}
	var sum float64
	const n = 200_000
	for i := range n {
		sum += float64(sm.draw(uniform(1, saltService, uint64(i), 0), 0, 1, 0, 0))
	}
	want := float64(scenario.Service{Lognormal: &scenario.Lognormal{Median: time.Second, Sigma: 0.5}}.Mean())
	if got := sum / n; math.Abs(got-want) > 0.01*want {
		t.Errorf("mean draw %v, want %v", time.Duration(got), time.Duration(want))
	}
	emp := []time.Duration{time.Second, 3 * time.Second}
	es := newSampler(scenario.Service{Empirical: emp}, nil)
	seen := map[time.Duration]int{}
	for i := range 1000 {
		seen[es.draw(uniform(2, saltService, uint64(i), 0), 0, 1, 0, 0)]++
	}
	if len(seen) != 2 || seen[time.Second] < 400 || seen[3*time.Second] < 400 {
		t.Errorf("empirical draws %v, want the two samples about equally", seen)
	}
	if m := (scenario.Service{Empirical: emp}).Mean(); m != 2*time.Second {
		t.Errorf("empirical mean %v", m)
	}
}

// TestCommonRandomNumbers: a request's service time does not depend on the
// policy, so policies are compared on the same draws.
func TestCommonRandomNumbers(t *testing.T) {
	if uniform(1, saltService, 42, 0) != uniform(1, saltService, 42, 0) {
		t.Fatal("uniform is not a function of its arguments")
	}
	if uniform(1, saltService, 42, 0) == uniform(1, saltService, 42, 1) || uniform(1, saltService, 42, 0) == uniform(2, saltService, 42, 0) {
		t.Fatal("attempts or seeds share draws")
	}
	sc := storm(t)
	a, _ := Run(t.Context(), sc, "small-queue", 0.5, Options{Requests: 5000})
	b, _ := Run(t.Context(), sc, "sluice", 0.5, Options{Requests: 5000})
	// At half load nothing is refused or queued for long: both policies
	// serve every request once, with the same service times.
	if a.OnTime != b.OnTime || a.P50Ms != b.P50Ms {
		t.Errorf("at 0.5× the policies should agree: %d/%v vs %d/%v", a.OnTime, a.P50Ms, b.OnTime, b.P50Ms)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h hist
	if h.quantile(0.5) != 0 {
		t.Error("empty histogram")
	}
	for i := 1; i <= 10000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, q := range []float64{0.01, 0.5, 0.99, 1} {
		got, want := h.quantile(q), time.Duration(q*10000)*time.Millisecond
		if math.Abs(float64(got-want)) > 0.005*float64(want) {
			t.Errorf("q%v = %v, want %v ± 0.5%%", q, got, want)
		}
	}
}

// TestRecoveryDefinition feeds the recovery measure made-up output: none
// for 3s after the step, then the capacity. A later collapse moves the
// recovery after it; one that lasts to the end means no recovery.
func TestRecoveryDefinition(t *testing.T) {
	sc, err := scenario.Load("../scenarios/service-step.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSetup(sc, "sluice", 1, Options{Requests: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	step := s.sampler.steps[0].at
	first := int(step / s.bucket)
	perBucket := float64(sc.Upstream.Concurrency) / (s.mean.Seconds() * 4) // the new capacity
	fill := func(m *metrics, from, to int, rate float64) {
		for k := from; k < to && k < len(m.goodAfter); k++ {
			m.goodAfter[k] = int32(math.Round(rate))
		}
	}
	end := int(s.window / s.bucket)
	m := newMetrics(s)
	fill(m, first+3, end, perBucket)
	r := m.recovery()
	want := (time.Duration(first+3)*s.bucket - step).Seconds()
	if !r.Recovered || r.Seconds != want {
		t.Errorf("recovery %+v, want %.2fs", r, want)
	}
	fill(m, first+100, first+140, 0) // a 40s collapse
	if r := m.recovery(); !r.Recovered || r.Seconds <= 100 {
		t.Errorf("recovery %+v, want after the collapse", r)
	}
	fill(m, first+100, end, 0)
	if r := m.recovery(); r.Recovered {
		t.Errorf("recovery %+v, want none", r)
	}
}
