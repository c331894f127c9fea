package saturation

import (
	"math"
	"runtime"
	"runtime/metrics"
	"time"
)

// schedLatencies is the runtime's histogram of the time goroutines spent
// runnable before running.
const schedLatencies = "/sched/latencies:seconds"

// Quantile is the quantile of a window's scheduling delays a Sampler
// reads: the tail, since a saturated CPU delays some wake-ups long before
// the median moves.
const Quantile = 0.99

// A Window is what a Sampler read of the time since its last read.
type Window struct {
	// Delay is the Quantile of the scheduling delays; 0 when there were
	// none, or the runtime does not keep them.
	Delay time.Duration
	// Busy is the CPU time the process used, as a share of what its
	// GOMAXPROCS cores could have given it (1: every one of them, all the
	// time); 1 when it cannot be read.
	Busy float64
	// Calls is how many calls the gateway was handling at the window's
	// end (in flight and waiting for a slot): not the Sampler's to read,
	// Shedder.Run asks the gateway.
	Calls int
}

// A Sampler reads the runtime's scheduling-latency histogram and the
// process's CPU time. Not safe for concurrent use: one goroutine
// (Shedder.Run) reads it.
type Sampler struct {
	sample []metrics.Sample
	prev   []uint64
	at     time.Time
	cpu    time.Duration
}

// NewSampler returns a Sampler whose first Read covers the time since now.
func NewSampler() *Sampler {
	s := &Sampler{sample: []metrics.Sample{{Name: schedLatencies}}}
	s.Read(time.Now())
	return s
}

// Read returns the Window from the last Read to now.
func (s *Sampler) Read(now time.Time) Window {
	w := Window{Busy: 1}
	if cpu, ok := processCPU(); ok {
		if wall := now.Sub(s.at); !s.at.IsZero() && wall > 0 {
			w.Busy = float64(cpu-s.cpu) / (float64(wall) * float64(runtime.GOMAXPROCS(0)))
		}
		s.cpu = cpu
	}
	s.at = now
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return w
	}
	h := s.sample[0].Value.Float64Histogram()
	w.Delay = quantile(h.Buckets, s.prev, h.Counts, Quantile)
	s.prev = append(s.prev[:0], h.Counts...)
	return w
}

// quantile returns the q quantile of the counts added between prev and cur
// (cumulative histograms over buckets; prev may be empty, then it is all of
// cur): the upper bound of the bucket the quantile falls in, its lower
// bound for the last, unbounded one. 0 when nothing was added.
func quantile(buckets []float64, prev, cur []uint64, q float64) time.Duration {
	delta := func(i int) uint64 {
		if i < len(prev) {
			return cur[i] - prev[i]
		}
		return cur[i]
	}
	var total uint64
	for i := range cur {
		total += delta(i)
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range cur {
		seen += delta(i)
		if seen >= want {
			v := buckets[i+1]
			if math.IsInf(v, 1) {
				v = buckets[i]
			}
			return time.Duration(v * float64(time.Second))
		}
	}
	return 0
}
