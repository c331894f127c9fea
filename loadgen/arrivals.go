package loadgen

import (
	"iter"
	"math/rand/v2"
	"time"
)

// Arrival is one scheduled logical request.
type Arrival struct {
	// Seq numbers arrivals from 0 in schedule order.
	Seq int
	// At is the arrival's offset from the start of the run.
	At time.Duration
	// Class indexes the classes slice the schedule was drawn from.
	Class int
}

// pcgStream is the fixed second half of the PCG seed. Keeping it constant
// makes Config.Seed the single knob that selects a schedule.
const pcgStream = 0x9e3779b97f4a7c15

// Arrivals returns the arrival schedule of a Poisson process of the given
// rate (per second), with each arrival's class drawn by weight from classes
// (DefaultClasses when empty). The sequence is infinite and a pure function of
// its arguments — time is an input, nothing sleeps — so the same seed always
// yields the same schedule; callers stop ranging when they have enough.
// A rate that is not positive yields nothing.
//
// Offsets are accumulated in float64 seconds and converted once per arrival,
// so rounding does not drift over a long run.
func Arrivals(seed uint64, rate float64, classes []Class) iter.Seq[Arrival] {
	if len(classes) == 0 {
		classes = DefaultClasses()
	}
	cum := make([]float64, len(classes))
	total := 0.0
	for i, cl := range classes {
		if cl.Weight > 0 {
			total += cl.Weight
		}
		cum[i] = total
	}
	return func(yield func(Arrival) bool) {
		if !(rate > 0) || !(total > 0) {
			return
		}
		rng := rand.New(rand.NewPCG(seed, pcgStream))
		t := 0.0
		for seq := 0; ; seq++ {
			// Exponential inter-arrival times are what make the arrivals a
			// Poisson process: memoryless, so bursts happen as in real
			// traffic instead of the metronome a fixed interval would give.
			t += rng.ExpFloat64() / rate
			pick := rng.Float64() * total
			class := len(cum) - 1
			for i, c := range cum {
				if pick < c {
					class = i
					break
				}
			}
			if !yield(Arrival{Seq: seq, At: time.Duration(t * float64(time.Second)), Class: class}) {
				return
			}
		}
	}
}
