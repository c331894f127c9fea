package saturation

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	// Buckets [0,1ms) [1ms,2ms) [2ms,4ms) [4ms,+Inf).
	b := []float64{0, 0.001, 0.002, 0.004, math.Inf(1)}
	for _, tc := range []struct {
		name      string
		prev, cur []uint64
		q         float64
		want      time.Duration
	}{
		{"nothing new", []uint64{5, 5, 5, 5}, []uint64{5, 5, 5, 5}, 0.99, 0},
		{"first read: all of cur", nil, []uint64{98, 1, 1, 0}, 0.99, 2 * time.Millisecond},
		{"only what was added", []uint64{0, 0, 0, 100}, []uint64{100, 0, 0, 100}, 0.99, time.Millisecond},
		{"the tail's bucket", []uint64{10, 0, 0, 0}, []uint64{107, 0, 3, 0}, 0.99, 4 * time.Millisecond},
		{"the unbounded bucket: its lower bound", nil, []uint64{90, 0, 0, 10}, 0.99, 4 * time.Millisecond},
		{"the median", nil, []uint64{40, 20, 40, 0}, 0.5, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quantile(b, tc.prev, tc.cur, tc.q); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestSamplerSeesASaturatedCPU reads the runtime's own histogram and the
// process's CPU time: eight
// goroutines for every core, each working a while and then yielding,
// wait their turn behind the others — milliseconds, where a process with
// a core to spare shows microseconds. The direction, not a figure, is
// what is checked: a saturated CPU can only delay more.
func TestSamplerSeesASaturatedCPU(t *testing.T) {
	s := NewSampler()
	var wg sync.WaitGroup
	for range 8 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for range 50 {
				work()
				runtime.Gosched() // to the back of the run queue
			}
		})
	}
	wg.Wait()
	got := s.Read(time.Now())
	if got.Delay < time.Millisecond {
		t.Fatalf("p99 scheduling delay with every core taken: %s, want at least 1ms", got.Delay)
	}
	// The cores worked for this process, as much as the machine's other
	// processes let them: read, not the 1 of a process it cannot read.
	if got.Busy <= 0.05 || got.Busy > 1.5 {
		t.Fatalf("busy %.2f of the cores, want a share read from the process's CPU time", got.Busy)
	}
}

var sink atomic.Uint64

// work is about half a millisecond of arithmetic the compiler cannot drop.
func work() {
	x := sink.Load()
	for i := range uint64(1 << 19) {
		x = x*6364136223846793005 + i
	}
	sink.Store(x)
}
