package adaptive

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/yamlpath"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// provider is a deterministic provider of slots slots and service time
// service, FIFO beyond them, seen through the controller: a fluid model
// in which every call of a window at concurrency L takes
// service·max(1, L/slots), with a ±10% wobble so that windows differ.
type provider struct {
	slots   int
	service time.Duration
	refuse  bool // refuse (429) beyond the slots instead of queueing
	exhaust bool // say remaining 0 on the call that takes the last slot
}

// run feeds c answers for d of virtual time from now and returns the
// time reached and the limits seen after each answer.
func (p *provider) run(c *Concurrency, now time.Time, d time.Duration) (time.Time, []int) {
	var limits []int
	end := now.Add(d)
	for i := 0; now.Before(end); i++ {
		l := c.Limit()
		inflight := l
		lat := p.service
		if l > p.slots {
			if p.refuse {
				// One call in l is the one beyond the slots, refused at once.
				if i%l == 0 {
					c.Observe(now, Sample{Sent: now, Answered: now, InFlight: l, Refused: true})
					continue
				}
				inflight = p.slots
			} else {
				lat = time.Duration(float64(p.service) * float64(l) / float64(p.slots))
			}
		}
		lat = time.Duration(float64(lat) * (0.9 + 0.2*float64(i%5)/4))
		// Answers come at rate inflight/lat.
		step := lat / time.Duration(max(inflight, 1))
		now = now.Add(step)
		s := Sample{Sent: now.Add(-lat), Answered: now, InFlight: inflight}
		if p.exhaust && inflight >= p.slots {
			s.Exhausted = true
		}
		limits = append(limits, c.Observe(now, s))
	}
	return now, limits
}

func tail(l []int, n int) (lo, hi int) {
	lo, hi = 1<<30, 0
	for _, v := range l[max(0, len(l)-n):] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// TestFindsAQueueingProvider: from 4, the limit finds a provider of 16
// slots that queues beyond them, and then stays within its bounds: below
// the slots only for a probe (three quarters of them), never more than 5
// above (calls would wait there).
func TestFindsAQueueingProvider(t *testing.T) {
	c, err := New(Config{}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{slots: 16, service: 200 * time.Millisecond}
	now, limits := p.run(c, epoch, 60*time.Second)
	lo, hi := tail(limits, 2000)
	if lo < 11 || hi > 21 {
		t.Errorf("limit over the last 2000 answers in [%d, %d], want within [11, 21]; state %+v", lo, hi, c.State())
	}
	// The provider halves its slots: the limit follows.
	p.slots = 8
	_, limits = p.run(c, now, 30*time.Second)
	// A probe goes to three quarters of the capacity estimated, rounded
	// down: 5 for an estimate just under 8.
	if lo, hi := tail(limits, 1000); lo < 5 || hi > 13 {
		t.Errorf("after halving the slots, limit in [%d, %d], want within [5, 13]; state %+v", lo, hi, c.State())
	}
}

// TestASlowerProviderKeepsItsSlots: every call taking twice as long is
// not a queue: the limit comes back to the slots once the controller
// sees that cutting it did not shorten the latency.
func TestASlowerProviderKeepsItsSlots(t *testing.T) {
	c, _ := New(Config{}, epoch)
	p := &provider{slots: 16, service: 200 * time.Millisecond}
	now, _ := p.run(c, epoch, 60*time.Second)
	p.service *= 2
	_, limits := p.run(c, now, 30*time.Second)
	if lo, hi := tail(limits, 1000); lo < 11 || hi > 21 {
		t.Errorf("after the slowdown, limit in [%d, %d], want within [11, 21]; state %+v", lo, hi, c.State())
	}
	if c.State().Slowdowns == 0 {
		t.Errorf("no slowdown told apart from a queue: %+v", c.State())
	}
}

// TestAFourTimesSlowerProviderIsCutByAQuarter: every call four times as
// long reads, to Little's law, as a queue of three quarters of the limit,
// and a queue's cut goes to its capacity — a quarter of the slots here.
// The first cut of a run goes a quarter down at most: it is the test
// that tells the slowdown (the latency does not fall) from a queue, and
// at a quarter of the slots the provider would idle three quarters of
// them while it ran (the promise suite's slowdown-4x, learnt: 9 of 16
// for the rest of its run).
func TestAFourTimesSlowerProviderIsCutByAQuarter(t *testing.T) {
	c, _ := New(Config{}, epoch)
	p := &provider{slots: 16, service: 200 * time.Millisecond}
	now, limits := p.run(c, epoch, 60*time.Second)
	before := limits[len(limits)-1]
	p.service *= 4
	// Until the slowdown is told (a probe may follow it, at three
	// quarters of the capacity).
	lowest, end := before, now.Add(30*time.Second)
	for c.State().Slowdowns == 0 && now.Before(end) {
		var l []int
		now, l = p.run(c, now, 50*time.Millisecond)
		lowest = min(lowest, slices.Min(append(l, lowest)))
	}
	if float64(lowest) < 0.75*float64(before)-1 {
		t.Errorf("before the slowdown was told, the limit fell from %d to %d, want at most a quarter down; state %+v", before, lowest, c.State())
	}
	_, limits = p.run(c, now, 30*time.Second)
	// The slots kept, a probe (three quarters of the capacity) aside.
	if lo, hi := tail(limits, 300); lo < 10 || hi > 21 {
		t.Errorf("after the slowdown, limit in [%d, %d], want within [10, 21]; state %+v", lo, hi, c.State())
	}
}

// TestARefusingProviderIsHeldAtItsSlots: a provider that refuses beyond
// its slots and says when it is full holds the limit at its slots, with
// few refusals.
func TestARefusingProviderIsHeldAtItsSlots(t *testing.T) {
	c, _ := New(Config{}, epoch)
	p := &provider{slots: 16, service: 200 * time.Millisecond, refuse: true, exhaust: true}
	_, limits := p.run(c, epoch, 60*time.Second)
	if lo, hi := tail(limits, 2000); lo < 11 || hi > 17 {
		t.Errorf("limit in [%d, %d], want within [11, 17]; state %+v", lo, hi, c.State())
	}
	if r := c.State().Refusals; r > 3 {
		t.Errorf("%d refusals in a minute, want at most 3: the exhausted answers hold the limit", r)
	}
}

// TestBounds: the limit never leaves [min, max], a lowered max cuts it at
// once, and a refusal lowers it at most once a baseline.
func TestBounds(t *testing.T) {
	c, _ := New(Config{Min: 2, Max: 10, Initial: 8}, epoch)
	p := &provider{slots: 64, service: 100 * time.Millisecond}
	now, limits := p.run(c, epoch, 20*time.Second)
	if _, hi := tail(limits, len(limits)); hi > 10 {
		t.Errorf("limit reached %d, above max 10", hi)
	}
	c.SetMax(now, 5)
	if c.Limit() != 5 {
		t.Errorf("after SetMax(5), limit %d", c.Limit())
	}
	c.Observe(now, Sample{Sent: now, Answered: now, InFlight: 5, Refused: true})
	c.Observe(now, Sample{Sent: now, Answered: now, InFlight: 4, Refused: true})
	if got := c.Limit(); got != 4 { // 5 × 0.9, once
		t.Errorf("after two refusals at once, limit %d, want 4 (one cut)", got)
	}
	for range 100 {
		now = now.Add(2 * time.Second)
		c.Observe(now, Sample{Sent: now, Answered: now, InFlight: 1, Refused: true})
	}
	if got := c.Limit(); got != 2 {
		t.Errorf("after many refusals, limit %d, want min 2", got)
	}
}

// TestConfigNamesTheField: a bad bound is an error naming its key.
func TestConfigNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Min: -1}, "min"},
		{Config{Max: MaxLimit + 1}, "max"},
		{Config{Min: 5, Max: 4}, "min"},
		{Config{Min: 3, Initial: 2}, "initial"},
		{Config{Max: 8, Initial: 9}, "initial"},
	} {
		err := tc.cfg.Validate()
		var fe *yamlpath.FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
	if got := (Config{}).WithDefaults(12); got.Max != 12 || got.Initial != 4 || got.Min != 1 {
		t.Errorf("defaults under a ceiling of 12: %+v", got)
	}
	if got := (Config{Max: 50, Initial: 30}).WithDefaults(20); got.Max != 20 || got.Initial != 20 {
		t.Errorf("a ceiling of 20 caps max and initial: %+v", got)
	}
}

// TestSlowStartIsClockedByAnswers: from 4, in front of a provider of 16
// slots at 200 ms whose every slot the callers would fill, the limit is
// at 16 within a second and a half — each answer sent at the limit adds
// half a slot, where a step a window (at least 24 answers, and the calls
// sent before the step discarded) took four seconds — and the slow start
// ends near the slots. While it grows, Settled stays at the limit its
// window started at, and once it tracks, at the limit.
func TestSlowStartIsClockedByAnswers(t *testing.T) {
	c, _ := New(Config{}, epoch)
	p := &provider{slots: 16, service: 200 * time.Millisecond}
	now, limits := p.run(c, epoch, 1500*time.Millisecond)
	if hi := slices.Max(limits); hi < 16 {
		t.Errorf("limit at most %d within 1.5s, want 16 (the provider's slots); state %+v", hi, c.State())
	}
	sawTrial := false
	for c.State().Phase == Starting && now.Before(epoch.Add(10*time.Second)) {
		var l []int
		now, l = p.run(c, now, 50*time.Millisecond)
		if len(l) == 0 {
			continue
		}
		if s := c.Settled(); s > c.Limit() {
			t.Fatalf("settled %d above the limit %d", s, c.Limit())
		} else if s < c.Limit() {
			sawTrial = true
		}
	}
	if !sawTrial {
		t.Error("Settled never below the limit while starting: the slow start's growth was counted on")
	}
	if st := c.State(); st.Phase == Starting || st.Limit > 24 || st.Limit < 12 {
		t.Errorf("after the slow start: %+v, want tracking between 12 and 24", st)
	}
	if c.Settled() != c.Limit() {
		t.Errorf("tracking, settled %d, want the limit %d", c.Settled(), c.Limit())
	}
}

// TestASlowdownDoesNotRestoreTheSlowStartsTrial: the slow start overshoots
// a provider of 16 slots (up to about twice them, grown by the answer
// within a round trip) and ends with a cut to near the slots. That cut
// is no run of cuts to judge: if the provider then gets slower (every
// call twice as long) in the very next window, the controller tells the
// slowdown from a queue and keeps its slots, but must not go back to the
// slow start's trial, which would queue some fifteen calls at the
// provider (seen over HTTP: 18 back to 32).
func TestASlowdownDoesNotRestoreTheSlowStartsTrial(t *testing.T) {
	// A provider whose answers come a round trip late (lagProvider),
	// with the first seed whose slow start overshoots by half.
	var (
		c         *Concurrency
		p         *lagProvider
		now       time.Time
		peak      int
		overshoot bool
	)
	for seed := uint64(1); seed <= 20 && !overshoot; seed++ {
		c, _ = New(Config{}, epoch)
		p = newLagProvider(16, 200*time.Millisecond, 0.5, seed)
		now, peak = epoch, 0
		for c.State().Phase == Starting && now.Before(epoch.Add(10*time.Second)) {
			var l []int
			now, l = p.run(c, now, 50*time.Millisecond)
			peak = max(peak, slices.Max(append(l, 0)))
		}
		overshoot = c.State().Phase != Starting && peak >= 24 && c.Limit() <= 21
	}
	if !overshoot {
		t.Fatalf("no seed's slow start reached 24 and ended at most at 21 (last: peak %d, then %+v): the scenario needs one", peak, c.State())
	}
	// The slowdown, within the window that follows the slow start's cut
	// (50 ms of answers past it, of a window of about a second).
	p.median *= 2
	_, limits := p.run(c, now, 30*time.Second)
	if hi := slices.Max(limits); hi > 21 {
		t.Errorf("after the slowdown the limit reached %d, want at most 21: the slow start's trial (peak %d) was restored; state %+v", hi, peak, c.State())
	}
	if lo, hi := tail(limits, 1000); lo < 11 || hi > 21 {
		t.Errorf("after the slowdown, limit in [%d, %d], want within [11, 21]; state %+v", lo, hi, c.State())
	}
	if c.State().Slowdowns == 0 {
		t.Errorf("no slowdown told apart from a queue: %+v", c.State())
	}
}
