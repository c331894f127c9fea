package sim

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
)

// TestUnansweredCountsCallersWhoseTimeoutPassed: four callers willing to
// wait 1.5s arrive within 300ms at a one-slot upstream of 1s calls. The
// FIFO answers #1; #2 is in service when its caller leaves at 1.6s, #3 and
// #4 are still queued when theirs leave at 1.7s and 1.8s: three of four
// attempts unanswered. Sluice refuses the three at once instead: none
// unanswered, three refusals after 0 ms.
func TestUnansweredCountsCallersWhoseTimeoutPassed(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	arr := []int{0, 100, 200, 300}
	f := runScripted(t, sc, "fifo", arr)
	if f.Unanswered != 3 || f.UnansweredPct != 75 || f.Refused != 0 {
		t.Errorf("fifo: unanswered %d (%.1f%%), refused %d; want 3 (75%%), 0", f.Unanswered, f.UnansweredPct, f.Refused)
	}
	if c := f.Classes[0]; c.Unanswered != 3 || c.UnansweredPct != 75 {
		t.Errorf("fifo: class %s unanswered %d (%.1f%%), want 3 (75%%)", c.Name, c.Unanswered, c.UnansweredPct)
	}
	if s := f.Sources[0]; s.Unanswered != 3 {
		t.Errorf("fifo: source %s unanswered %d, want 3", s.Name, s.Unanswered)
	}
	s := runScripted(t, sc, "sluice", arr)
	if s.Unanswered != 0 || s.Refused != 3 || s.RefusalP50Ms != 0 || s.RefusalP99Ms != 0 {
		t.Errorf("sluice: unanswered %d, refused %d after p50 %vms p99 %vms; want 0, 3 at once",
			s.Unanswered, s.Refused, s.RefusalP50Ms, s.RefusalP99Ms)
	}
}

// TestRefusalTimesAreTheVirtualTimes: a refusal's time is from its
// attempt's send to its refusal, to the millisecond. A one-slot gate with
// no room to queue refuses at once (0 ms, where the latency histogram would
// say its first bucket's midpoint); a queue-timeout baseline refuses what
// waited its timeout, 437 ms (which the latency histogram would round to
// a bucket 2 ms wide).
func TestRefusalTimesAreTheVirtualTimes(t *testing.T) {
	sc := exact(1500 * time.Millisecond)
	sc.Baselines = scenario.Baselines{SmallQueue: 1, QueueTimeout: 437 * time.Millisecond}
	for _, tc := range []struct {
		policy   string
		arrivals []int
		refused  int
		p50, p99 float64
	}{
		// #2 and #3 cannot finish in time: refused on arrival.
		{"sluice", []int{0, 100, 200}, 2, 0, 0},
		// #2 waits in the queue of one; #3 finds it full.
		{"small-queue", []int{0, 100, 200}, 1, 0, 0},
		// #2 and #3 wait 437 ms and are dropped, before the slot frees at
		// 1s; #4 finds the upstream idle.
		{"queue-timeout", []int{0, 100, 200, 1200}, 2, 437, 437},
	} {
		r := runScripted(t, sc, tc.policy, tc.arrivals)
		if r.Refused != tc.refused || r.RefusalP50Ms != tc.p50 || r.RefusalP99Ms != tc.p99 {
			t.Errorf("%s: refused %d after p50 %vms p99 %vms; want %d after %vms, %vms",
				tc.policy, r.Refused, r.RefusalP50Ms, r.RefusalP99Ms, tc.refused, tc.p50, tc.p99)
		}
		if c := r.Classes[0]; c.Refused != r.Refused || c.RefusalP99Ms != r.RefusalP99Ms {
			t.Errorf("%s: class refused %d after p99 %vms; want the run's %d, %vms", tc.policy, c.Refused, c.RefusalP99Ms, r.Refused, r.RefusalP99Ms)
		}
	}
}

// TestRefusalTimeOfAQueueThatDropsLate: a refusal's time is taken from
// its attempt's send, not from its call's arrival, and past a minute it is
// read within 0.4%. One slot, calls of 1000s, naive callers with a 100s
// attempt timeout and two attempts, a 90s queue timeout: #2 is dropped at
// 90.1s and its retry at 180.1s; #1's first attempt, in service, is
// unanswered at 100s, and its retry dropped at 190s. Three refusals, each
// 90s after its attempt was sent.
func TestRefusalTimeOfAQueueThatDropsLate(t *testing.T) {
	sc := exact(200 * time.Second)
	sc.Upstream.Service.Lognormal.Median = 1000 * time.Second
	sc.Traffic[0].MaxAttempts = 2
	sc.Traffic[0].AttemptTimeout = 100 * time.Second
	sc.Baselines.QueueTimeout = 90 * time.Second
	s := scripted(t, sc, "queue-timeout", []int{0, 100})
	s.end = 5 * time.Minute
	r, err := s.run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused != 3 || r.Unanswered != 1 {
		t.Errorf("refused %d, unanswered %d; want 3 and 1", r.Refused, r.Unanswered)
	}
	for _, got := range []float64{r.RefusalP50Ms, r.RefusalP99Ms} {
		if got < 90_000*0.996 || got > 90_000*1.004 {
			t.Errorf("refusal p50 %vms p99 %vms, want 90000ms ± 0.4%%", r.RefusalP50Ms, r.RefusalP99Ms)
			break
		}
	}
}

// TestMsHist pins the histogram's resolution and its memory: exact
// milliseconds below a minute, 0.4% above, and fine buckets that grow only
// as far as the longest duration below a minute.
func TestMsHist(t *testing.T) {
	var h msHist
	for range 1000 {
		h.add(0)
	}
	if h.quantile(0.99) != 0 || len(h.fine) > 64 {
		t.Errorf("a thousand refusals at once: p99 %v, %d fine buckets; want 0 and a few", h.quantile(0.99), len(h.fine))
	}
	for _, tc := range []struct {
		d, want time.Duration
	}{
		{437*time.Millisecond + 400*time.Microsecond, 437 * time.Millisecond},
		{437*time.Millisecond + 600*time.Microsecond, 438 * time.Millisecond},
		{59_999 * time.Millisecond, 59_999 * time.Millisecond},
	} {
		var h msHist
		h.add(tc.d)
		if got := h.quantile(0.5); got != tc.want {
			t.Errorf("%v reads %v, want %v", tc.d, got, tc.want)
		}
	}
	for _, d := range []time.Duration{time.Minute, 90 * time.Second, time.Hour} {
		var h msHist
		h.add(d)
		if got := h.quantile(0.5); got < time.Minute || (got-d).Abs() > d/250 {
			t.Errorf("%v reads %v, want it within 0.4%% and not below a minute", d, got)
		}
	}
	// Quantiles rank across the seam: 99 at once, one after an hour.
	h = msHist{}
	for range 99 {
		h.add(0)
	}
	h.add(time.Hour)
	if h.quantile(0.99) != 0 || h.quantile(1) < 59*time.Minute {
		t.Errorf("p99 %v, max %v; want 0 and about an hour", h.quantile(0.99), h.quantile(1))
	}
	if len(h.fine) > 64 {
		t.Errorf("%d fine buckets for durations of 0 and an hour", len(h.fine))
	}
	h = msHist{}
	for i := range 200_000 {
		h.add(time.Duration(i) * time.Millisecond)
	}
	if len(h.fine) != int(fineLimit/time.Millisecond) {
		t.Errorf("%d fine buckets, want a minute's (%d)", len(h.fine), fineLimit/time.Millisecond)
	}
}

// TestFeltIsDeterministicAndAddsUp: the same seed gives the same figures
// (the whole Result, as JSON), and they add up: Unanswered is the caller
// timeouts of Refusals, Refused the server refusals a caller heard — all
// of them but the queue-timeout baseline's, which drops what waited its
// timeout long after the caller left — and the classes' and sources'
// shares sum to the run's.
func TestFeltIsDeterministicAndAddsUp(t *testing.T) {
	sc, err := scenario.Load("../scenarios/mixed-deadlines.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Traffic[0].Client = "naive" // so that some attempts go unanswered under sluice too
	for _, p := range []string{"fifo", "queue-timeout", "sluice"} {
		var runs [2][]byte
		var r *Result
		for i := range runs {
			if r, err = Run(t.Context(), sc, p, 5, Options{Requests: 5000}); err != nil {
				t.Fatal(err)
			}
			if runs[i], err = json.Marshal(r); err != nil {
				t.Fatal(err)
			}
		}
		if string(runs[0]) != string(runs[1]) {
			t.Errorf("%s: two runs of seed %d differ:\n%s\n%s", p, sc.Seed, runs[0], runs[1])
		}
		t.Logf("%s: unanswered %d (%.1f%%), refused %d after p50 %vms p99 %vms", p, r.Unanswered, r.UnansweredPct, r.Refused, r.RefusalP50Ms, r.RefusalP99Ms)
		if r.Unanswered == 0 {
			t.Errorf("%s: nothing unanswered at 5×: the test no longer tests it", p)
		}
		if p == "sluice" && (r.Refused == 0 || r.RefusalP99Ms == 0) {
			t.Errorf("%s: refused %d after p99 %vms: the test no longer tests refusal times", p, r.Refused, r.RefusalP99Ms)
		}
		server := 0
		for why, n := range r.Refusals {
			if why != refTimeout.String() {
				server += n
			}
		}
		heard := server
		if p == "queue-timeout" {
			heard = 0 // every caller had left: 30s of queue timeout, 2s and 30s deadlines
		}
		if r.Unanswered != r.Refusals[refTimeout.String()] || r.Refused != heard {
			t.Errorf("%s: unanswered %d refused %d, refusals %v", p, r.Unanswered, r.Refused, r.Refusals)
		}
		for _, shares := range [][]ClassResult{r.Classes, r.Sources} {
			unanswered, refused := 0, 0
			maxP99 := 0.0
			for _, c := range shares {
				unanswered += c.Unanswered
				refused += c.Refused
				maxP99 = max(maxP99, c.RefusalP99Ms)
			}
			if unanswered != r.Unanswered || refused != r.Refused || maxP99 < r.RefusalP99Ms {
				t.Errorf("%s: shares unanswered %d refused %d (p99 ≤ %vms); want %d, %d (p99 %vms)",
					p, unanswered, refused, maxP99, r.Unanswered, r.Refused, r.RefusalP99Ms)
			}
		}
	}
}
