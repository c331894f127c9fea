package saturation

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/yamltime"
)

// many is more calls than any machine's MinCallsPerCore asks for.
const many = 1 << 20

func TestSpread(t *testing.T) {
	at := func(pairs ...float64) (a [MaxRanks]float64) {
		for i := 0; i < len(pairs); i += 2 {
			a[int(pairs[i])] = pairs[i+1]
		}
		return a
	}
	for _, tc := range []struct {
		name     string
		frac     float64
		arrivals [MaxRanks]float64
		want     [MaxRanks]float64
	}{
		{"nothing shed", 0, at(0, 10, 4, 90), at()},
		{"the lowest rank first", 0.1, at(0, 20, 4, 80), at(0, 0.5)},
		{"the lowest rank whole, the next in part", 0.5, at(0, 20, 4, 80), at(0, 1, 1, 1, 2, 1, 3, 1, 4, 30.0/80)},
		{"ranks with no arrivals below the cut shed all", 0.3, at(2, 10, 4, 90), at(0, 1, 1, 1, 2, 1, 3, 1, 4, 20.0/90)},
		{"everything", 1, at(1, 5, 3, 5), func() (a [MaxRanks]float64) {
			for r := 0; r <= 3; r++ {
				a[r] = 1
			}
			return a
		}()},
		{"no arrivals: every rank alike", 0.25, at(), func() (a [MaxRanks]float64) {
			for r := range a {
				a[r] = 0.25
			}
			return a
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spread(tc.frac, tc.arrivals)
			for r := range got {
				if math.Abs(got[r]-tc.want[r]) > 1e-9 {
					t.Fatalf("rank %d: shed %v, want %v (all: %v)", r, got[r], tc.want[r], got)
				}
			}
		})
	}
}

// TestAdmittedFractionAIMD pins the rule: a second window in a row over
// the target cuts the admitted fraction by a fifth (by target/delay when
// deeper, at most by half), down to 1-MaxShed,
// unless its delay fell by a fifth since the window before (a backlog
// draining); one under half the target adds a fiftieth; one between, or a
// first one over, holds.
func TestAdmittedFractionAIMD(t *testing.T) {
	s := New(10 * time.Millisecond)
	steps := []struct {
		delay time.Duration
		want  float64
	}{ // the process busy throughout
		{time.Millisecond, 1},
		{11 * time.Millisecond, 1},     // the first over the target: held
		{12 * time.Millisecond, 0.8},   // a fifth: 10/12 would be less
		{16 * time.Millisecond, 0.5},   // 10/16 of it
		{50 * time.Millisecond, 0.25},  // by half at most
		{35 * time.Millisecond, 0.25},  // over the target, falling by more than a fifth: held
		{30 * time.Millisecond, 0.125}, // falling by less than a fifth: cut
		{7 * time.Millisecond, 0.125},  // between half the target and the target: held
		{11 * time.Millisecond, 0.125}, // the first over the target again
		{4 * time.Millisecond, 0.145},
		{0, 0.165},
	}
	for i, st := range steps {
		if got := s.Observe(Window{Delay: st.delay, Busy: 1, Calls: many}).Admitted; math.Abs(got-st.want) > 1e-9 {
			t.Fatalf("step %d (delay %s): admitted %v, want %v", i, st.delay, got, st.want)
		}
	}
	for range 100 {
		s.Observe(Window{Delay: time.Second, Busy: 1, Calls: many})
	}
	if got := s.State().Admitted; math.Abs(got-(1-MaxShed)) > 1e-9 {
		t.Fatalf("after 100 saturated windows admitted %v, want the floor %v", got, 1-MaxShed)
	}
	for range 100 {
		s.Observe(Window{Busy: 1, Calls: many})
	}
	if got := s.State(); got.Admitted != 1 || got.Delay != 0 {
		t.Fatalf("after 100 idle windows: %+v, want all admitted", got)
	}
}

// TestShedsTheLowestRanksFirst drives the Shedder as the gateway does:
// the calls of a window, then its end.
func TestShedsTheLowestRanksFirst(t *testing.T) {
	s := New(10 * time.Millisecond)
	saturated := Window{Delay: 11 * time.Millisecond, Busy: 1, Calls: many} // just over: cut by a fifth
	ask := func(rank, n int) (shed int) {
		for range n {
			if s.Shed(rank) {
				shed++
			}
		}
		return shed
	}
	s.Observe(saturated) // the first window over: held
	if got := ask(0, 100) + ask(4, 900); got != 0 {
		t.Fatalf("nothing cut yet, %d shed", got)
	}
	s.Observe(saturated) // a second window over: admit 80%, 200 of its 1,000 shed
	if got := ask(0, 100); got != 100 {
		t.Fatalf("rank 0 (a tenth of the traffic): %d of 100 shed, want all", got)
	}
	// Rank 4 sheds the other 100 of its 900: a ninth, drawn at random.
	if got := ask(4, 9000); got < 800 || got > 1200 {
		t.Fatalf("rank 4: %d of 9,000 shed, want about 1,000", got)
	}
	// That window was 100 of rank 0 and 9,000 of rank 4: at 64%
	// admitted 3,276 are shed, rank 0's 100 and 3,176 of rank 4's (35%).
	s.Observe(saturated)
	if got := ask(-1, 50); got != 50 {
		t.Fatalf("a rank below 0 counts as 0: %d of 50 shed", got)
	}
	if got := ask(4, 10000); got < 3200 || got > 3850 {
		t.Fatalf("rank 4: %d of 10,000 shed, want about 3,530", got)
	}
	if got := ask(MaxRanks+3, 100); got != 0 {
		t.Fatalf("a rank past the last counts as the last, above the cut: %d of 100 shed", got)
	}
	for range 50 {
		s.Observe(Window{Busy: 1, Calls: many})
	}
	if got := ask(0, 100); got != 0 {
		t.Fatalf("recovered, rank 0: %d shed", got)
	}
}

// TestNotItsOwnSaturation: a delay over the target while the process used
// less than MinBusy of its cores is another process's load, and one while
// it handles fewer than MinCallsPerCore calls a core is other work's:
// shedding calls would relieve neither. Nothing is cut, and what was is
// given back.
func TestNotItsOwnSaturation(t *testing.T) {
	s := New(10 * time.Millisecond)
	for range 3 {
		if got := s.Observe(Window{Delay: time.Second, Busy: MinBusy - 0.01, Calls: many}).Admitted; got != 1 {
			t.Fatalf("a neighbour's load: admitted %v, want 1", got)
		}
	}
	s.Observe(Window{Delay: 11 * time.Millisecond, Busy: MinBusy, Calls: many})
	s.Observe(Window{Delay: 11 * time.Millisecond, Busy: 0.9, Calls: many})
	s.Observe(Window{Delay: 11 * time.Millisecond, Busy: 0.5, Calls: many})
	if got := s.State().Admitted; math.Abs(got-0.64) > 1e-9 {
		t.Fatalf("its own load: admitted %v, want 0.64", got)
	}
	// Saturated, busy, but handling fewer calls than MinCallsPerCore a
	// core: the CPU is taken by other work than calls. Given back.
	if got := s.Observe(Window{Delay: time.Second, Busy: 1, Calls: s.minCalls - 1}).Admitted; math.Abs(got-0.66) > 1e-9 {
		t.Fatalf("few calls: admitted %v, want 0.66", got)
	}
	// Shedding, the process fell under MinBusy while the delay stays
	// high: the rest is not its own.
	if got := s.Observe(Window{Delay: time.Second, Busy: 0.1, Calls: many}).Admitted; math.Abs(got-0.68) > 1e-9 {
		t.Fatalf("shed down to a neighbour's load: admitted %v, want 0.68", got)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		d      time.Duration
		ok     bool
		target time.Duration
	}{
		{0, true, DefaultMaxSchedulingDelay},
		{time.Millisecond, true, time.Millisecond},
		{50 * time.Microsecond, false, 0},
		{2 * time.Second, false, 0},
		{-time.Millisecond, false, 0},
	} {
		c := Config{MaxSchedulingDelay: yamltime.Duration(tc.d)}
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Fatalf("%s: err %v, want ok %v", tc.d, err, tc.ok)
		}
		if tc.ok && c.Target() != tc.target {
			t.Fatalf("%s: target %s, want %s", tc.d, c.Target(), tc.target)
		}
	}
}
