package saturation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/yamltime"
)

// Config is the gateway config's server.saturation section.
type Config struct {
	// Disabled turns the shedding off: the gateway then serves every call
	// however late its own CPU makes it.
	Disabled bool `yaml:"disabled"`
	// MaxSchedulingDelay is the target for the p99 of the time the
	// gateway's runnable goroutines wait for a core, over a window of
	// Period: above it, while the gateway uses at least MinBusy of its
	// cores, new calls are shed. Zero means 10ms; at least
	// 100µs, at most 1s.
	MaxSchedulingDelay yamltime.Duration `yaml:"max_scheduling_delay"`
}

// DefaultMaxSchedulingDelay is MaxSchedulingDelay's zero value: well above
// what a machine with a core to spare shows (tens of microseconds), and a
// small share of the 50 ms an answered call may take at twice the
// sustainable rate (docs/perf.md, "Shedding when the gateway itself runs
// out of CPU").
const DefaultMaxSchedulingDelay = 10 * time.Millisecond

// Period is how often the delay is read and the shed fraction decided: a
// tenth of a second holds thousands of scheduling events at the rates
// where shedding matters, and lets the fraction follow a burst within a
// few windows.
const Period = 100 * time.Millisecond

const (
	minMaxDelay = 100 * time.Microsecond
	maxMaxDelay = time.Second
	// cut and step are the AIMD's: a window over the target keeps at
	// most four fifths of the admitted fraction — target/delay of it,
	// down to half, when the delay is further over: a backlog that feeds
	// itself (callers opening connections as their answers come late)
	// must be stopped within a few windows, not twenty; one under half
	// of the target adds a fiftieth, so that from half admitted it takes
	// 2.5 s to admit all.
	cut     = 0.8
	deepest = 0.5
	step    = 0.02
	// MinBusy is the least share of its cores the process must have used
	// in a window for its delay to count as its own saturation: a
	// gateway doing little while a neighbour takes the machine's CPU
	// would shed its callers and relieve nothing.
	MinBusy = 0.25
	// MinCallsPerCore is, per GOMAXPROCS core, the least number of calls
	// the gateway must be handling for its saturation to count as its
	// calls': a CPU taken by other work (a flood of connections the
	// guard refuses, a neighbour in the same process) is not relieved by
	// refusing the few callers it is serving.
	MinCallsPerCore = 4
	// draining is how much lower than the window before a delay over the
	// target must be to hold rather than cut: the backlog a cut leaves
	// takes windows to drain, and cutting again while it does would shed
	// far more than the overload.
	draining = 0.8
	// MaxShed is the most of the new calls ever shed.
	MaxShed = 0.95
	// MaxRanks bounds the ranks a Shedder tells apart (admission.MaxRanks).
	MaxRanks = 16
)

// Validate checks the section; it names a field by its path under server.
func (c Config) Validate() error {
	if d := c.MaxSchedulingDelay.D(); d != 0 && (d < minMaxDelay || d > maxMaxDelay) {
		return fmt.Errorf("saturation.max_scheduling_delay: %s, want %s to %s", d, minMaxDelay, maxMaxDelay)
	}
	return nil
}

// Target is the delay above which calls are shed, its default applied.
func (c Config) Target() time.Duration {
	if d := c.MaxSchedulingDelay.D(); d != 0 {
		return d
	}
	return DefaultMaxSchedulingDelay
}

// A Shedder decides, for each new call, whether the gateway is too busy to
// take it. Shed is on every call's path and takes no lock; Observe, once a
// window, moves the shed fraction. Safe for concurrent use.
type Shedder struct {
	target   time.Duration
	minCalls int // MinCallsPerCore for each of GOMAXPROCS
	// arrivals counts the calls of each rank asked about in this window.
	arrivals [MaxRanks]atomic.Uint64
	// shedP is, per rank, the probability of shedding a call: a float64's
	// bits.
	shedP [MaxRanks]atomic.Uint64
	mu    struct {
		sync.Mutex
		admitted float64
		last     Window
		// over counts the windows in a row over the target of the
		// process's own saturation.
		over int
	}
}

// New returns a Shedder that sheds nothing until a window's delay passes
// target (Config.Target).
func New(target time.Duration) *Shedder {
	s := &Shedder{target: target, minCalls: MinCallsPerCore * runtime.GOMAXPROCS(0)}
	s.mu.admitted = 1
	return s
}

// Shed says whether to refuse a new call of rank (0 the first shed; ranks
// past MaxRanks count as the last) and counts it in the window's arrivals.
func (s *Shedder) Shed(rank int) bool {
	rank = min(max(rank, 0), MaxRanks-1)
	s.arrivals[rank].Add(1)
	p := math.Float64frombits(s.shedP[rank].Load())
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return rand.Float64() < p
}

// Target is the delay above which calls are shed.
func (s *Shedder) Target() time.Duration { return s.target }

// State is the Shedder's last decision.
type State struct {
	// Delay is the last window's scheduling delay (its p99).
	Delay time.Duration
	// Busy is the share of its cores the process used in the last window.
	Busy float64
	// Admitted is the fraction of new calls admitted: 1 while nothing is
	// shed.
	Admitted float64
}

// State returns the last window's delay and the fraction admitted since.
func (s *Shedder) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{Delay: s.mu.last.Delay, Busy: s.mu.last.Busy, Admitted: s.mu.admitted}
}

// Observe ends a window: it moves the admitted fraction and spreads the
// shed fraction over the ranks by the window's arrivals, lowest first.
func (s *Shedder) Observe(w Window) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.mu.admitted
	own := w.Busy >= MinBusy && w.Calls >= s.minCalls
	if w.Delay > s.target && own {
		s.mu.over++
	} else {
		s.mu.over = 0
	}
	switch {
	case s.mu.over == 1:
		// One window over the target may be a collection's or a
		// burst's: hold, and cut if the next one is over too.
	case s.mu.over > 1 && float64(w.Delay) < draining*float64(s.mu.last.Delay):
		// Over the target but falling fast: the last cut is draining
		// the backlog. Hold.
	case s.mu.over > 1:
		a = max(a*min(cut, max(deepest, float64(s.target)/float64(w.Delay))), 1-MaxShed)
	case w.Delay < s.target/2 || !own:
		a = min(a+step, 1)
	}
	s.mu.admitted, s.mu.last = a, w
	var arrivals [MaxRanks]float64
	for r := range arrivals {
		arrivals[r] = float64(s.arrivals[r].Swap(0))
	}
	for r, p := range spread(1-a, arrivals) {
		s.shedP[r].Store(math.Float64bits(p))
	}
	return State{Delay: w.Delay, Busy: w.Busy, Admitted: a}
}

// spread returns, per rank, the probability of shedding a call of that
// rank so that frac of the calls counted in arrivals are shed, the lowest
// ranks first. A rank with no arrivals below the rank where the fraction
// runs out sheds all its calls; one above sheds none. With no arrivals at
// all, every rank sheds frac.
func spread(frac float64, arrivals [MaxRanks]float64) [MaxRanks]float64 {
	var p [MaxRanks]float64
	if frac <= 0 {
		return p
	}
	total := 0.0
	for _, n := range arrivals {
		total += n
	}
	if total == 0 {
		for r := range p {
			p[r] = frac
		}
		return p
	}
	left := frac * total
	for r, n := range arrivals {
		switch {
		case left <= 0:
			return p
		case n == 0:
			p[r] = 1
		default:
			p[r] = min(1, left/n)
			left -= p[r] * n
		}
	}
	return p
}

// Run reads the sampler once a Period, with calls (the calls the gateway
// is handling), and feeds the window to Observe until ctx ends.
func (s *Shedder) Run(ctx context.Context, sampler *Sampler, calls func() int) {
	t := time.NewTicker(Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w := sampler.Read(time.Now())
			w.Calls = calls()
			s.Observe(w)
		}
	}
}
