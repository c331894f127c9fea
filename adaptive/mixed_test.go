package adaptive

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// mixedProvider is a provider of slots slots, first come first served
// beyond them, serving two kinds of call of very different sizes, as a
// chat service and a code-completion service calling one model: a third
// of the calls answer 13 tokens or so (a median 26 ms of decoding, 80 ms
// in all), two thirds 129 or so, up to 1,000 (a median 330 ms, up to two
// seconds) — answers ten times longer than others. Callers always have a
// call to send. With tell, each call's Sample carries its expected time as
// a share of the mean call's (Units), as a gate that keeps statistics by
// shape gives it; the shell counts each call with Sent, as the gateway
// does.
type mixedProvider struct {
	slots   int
	tell    bool
	rng     *rand.Rand
	free    []time.Time
	pending []mixedCall
	idle    time.Duration // slot-time the provider idled, a slot at a time
	last    time.Time
	// blindFirst is how many of the first calls carry no units, as a
	// gate's first calls do before it has statistics by shape.
	blindFirst int
	sent       int
}

type mixedCall struct {
	sent, answered time.Time
	inflight       int
	window         uint64
	units          float64
}

// The two sizes' mean times and the mean call's: what a gate's shape
// statistics give.
const (
	shortMean = 0.136
	longMean  = 0.49
	mixMean   = shortMean/3 + 2*longMean/3
)

func newMixedProvider(slots int, tell bool, seed uint64) *mixedProvider {
	return &mixedProvider{slots: slots, tell: tell, rng: rand.New(rand.NewPCG(seed, 0x313)), free: make([]time.Time, slots)}
}

func (p *mixedProvider) tokens(median, sigma, limit float64) float64 {
	return min(limit, math.Round(median*math.Exp(sigma*p.rng.NormFloat64())))
}

// send starts a call at now on the slot free first.
func (p *mixedProvider) send(c *Concurrency, now time.Time) {
	i := 0
	for j := range p.free {
		if p.free[j].Before(p.free[i]) {
			i = j
		}
	}
	start := p.free[i]
	if start.Before(now) {
		p.idle += now.Sub(start)
		start = now
	}
	base, units := 0.08+0.002*p.tokens(13, 1.25, 256), shortMean/mixMean
	if p.rng.Float64() < 2.0/3 {
		base, units = 0.07+0.002*p.tokens(129, 1, 1000), longMean/mixMean
	}
	service := time.Duration(base * math.Exp(0.2*p.rng.NormFloat64()) * float64(time.Second))
	p.free[i] = start.Add(service)
	call := mixedCall{sent: now, answered: p.free[i], inflight: len(p.pending) + 1, window: c.Sent(now)}
	if p.sent++; p.tell && p.sent > p.blindFirst {
		call.units = units
	}
	at, _ := slices.BinarySearchFunc(p.pending, call, func(a, b mixedCall) int { return a.answered.Compare(b.answered) })
	p.pending = slices.Insert(p.pending, at, call)
}

// run sends and answers calls for d from now and returns the time reached
// and the limit after each answer.
func (p *mixedProvider) run(c *Concurrency, now time.Time, d time.Duration) (time.Time, []int) {
	var limits []int
	end := now.Add(d)
	for now.Before(end) {
		for len(p.pending) < c.Limit() {
			p.send(c, now)
		}
		next := p.pending[0]
		p.pending = p.pending[1:]
		now = next.answered
		limits = append(limits, c.Observe(now, Sample{Sent: next.sent, Answered: now, InFlight: next.inflight,
			Window: next.window, Units: next.units}))
	}
	return now, limits
}

// TestLearnsAProviderOfMixedSizes: in front of a provider of 16 slots
// whose answers run from a tenth of a second to two seconds, a learner
// told each call's expected size (Sample.Units) keeps the provider busy —
// its limit at the slots or a few above — where one told nothing reads
// the windows heavy with long answers as a queue and idles slots. Seeds 1
// to 5; the medians.
func TestLearnsAProviderOfMixedSizes(t *testing.T) {
	run := func(tell bool) (limit int, idle float64) {
		var limits []int
		var idles []float64
		for seed := range uint64(5) {
			c, _ := New(Config{}, epoch)
			p := newMixedProvider(16, tell, seed+1)
			now, _ := p.run(c, epoch, 20*time.Second) // learning
			p.idle = 0
			end, l := p.run(c, now, 60*time.Second)
			slices.Sort(l)
			limits = append(limits, l[len(l)/2])
			idles = append(idles, p.idle.Seconds()/(16*end.Sub(now).Seconds()))
		}
		slices.Sort(limits)
		slices.Sort(idles)
		return limits[2], idles[2]
	}
	told, toldIdle := run(true)
	blind, blindIdle := run(false)
	t.Logf("median limit %d, provider idle %.1f%% told the sizes; %d, %.1f%% told nothing", told, 100*toldIdle, blind, 100*blindIdle)
	if told < 16 || told > 22 {
		t.Errorf("told the sizes: median limit %d, want 16 to 22 (the slots, and a few calls waiting)", told)
	}
	if toldIdle > 0.03 {
		t.Errorf("told the sizes: the provider idled %.1f%% of its slot-time, want at most 3%%", 100*toldIdle)
	}
	// The scenario is one that shows the problem: told nothing, the
	// learner idles the provider (it did 15% when this was written).
	if blindIdle < 0.06 {
		t.Errorf("told nothing, the provider idled only %.1f%%: the scenario no longer tells the two apart", 100*blindIdle)
	}
}

// TestAPoolFoundMixedMeasuresItsBaselineFirst: a gate knows nothing of
// its calls' sizes until it has statistics by shape, so the learner's
// first window is of calls of no units — of their first answers, the
// short ones — and its baseline is low. Once the answers turn out mixed
// the learner reads no queue off that baseline: it probes first. Reading
// a queue off it, it cut, took the latency that did not fall with the
// cut for a slowdown, moved its baseline up to a latency with a queue in
// it, and held twice the provider's slots. Seeds 1 to 8, 15 s each; the
// median limit at the end.
func TestAPoolFoundMixedMeasuresItsBaselineFirst(t *testing.T) {
	var ends []int
	for seed := uint64(1); seed <= 8; seed++ {
		p := newMixedProvider(16, true, seed)
		p.blindFirst = minWindow
		now := time.Unix(0, 0)
		c, err := New(Config{}, now)
		if err != nil {
			t.Fatal(err)
		}
		p.run(c, now, 15*time.Second)
		ends = append(ends, c.Limit())
	}
	slices.Sort(ends)
	if median := (ends[3] + ends[4]) / 2; median > 24 {
		t.Errorf("limits at the end %v: median %d, want at most 24 in front of 16 slots", ends, median)
	}
}

// TestAMixedWindowWithinItsNoiseGrows: a window of answers of many sizes
// whose latency reads a queue of two calls at the provider, but whose
// latency less its standard error reads none, has shown no queue: the
// limit grows. Held there instead, a pool learning a provider whose
// answers run from a tenth of a second to two seconds stayed a few slots
// below it for most of a minute at a moderate load (the production
// scenario's seed 2: 85% of no gateway's chats). A window of one size is
// no noisier than its count says, and holds, as it always has.
func TestAMixedWindowWithinItsNoiseGrows(t *testing.T) {
	for _, mixed := range []bool{true, false} {
		c, err := New(Config{}, epoch)
		if err != nil {
			t.Fatal(err)
		}
		c.phase, c.base, c.limit, c.mixed = Tracking, 300*time.Millisecond, 12, mixed
		// 48 answers at 12 calls at the provider, of mean 360 ms (a
		// queue of 12 × (1 − 300/360) = 2 calls) and standard error
		// 50 ms (at 310 ms, a queue of 0.4).
		const n, mean, se = 48, 0.36, 0.05
		sd := se * math.Sqrt(n)
		c.w = window{n: n, sum: n * mean, units: n, norm: n * mean, normSq: n * (sd*sd + mean*mean), inflight: n * 12, maxInflight: 12}
		c.close(epoch.Add(time.Minute))
		want := 12
		if mixed {
			want = 13
		}
		if got := c.Limit(); got != want {
			t.Errorf("mixed %v: limit %d after the window, want %d (queue read %.2f)", mixed, got, want, c.State().Queue)
		}
	}
}
