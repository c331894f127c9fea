package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/spend"
)

// The dashboard's history: one sample a second for the last 15 minutes,
// kept in a fixed ring so that its memory never grows. The status line
// looks at the last 5 minutes of it.
const (
	every        = time.Second
	ringSamples  = 900
	statusWindow = 5 * time.Minute
)

// Reading is the gateway's state at one moment, as its Source reads it.
type Reading struct {
	// Sample holds the gauges and the totals since start: every field
	// but Time, Goodput, RefusedReason, RefusedClass, ShedClass,
	// Spend.WastedPerH and Status, which the Board fills in.
	Sample Sample
	// Refusals are the refusals the gateway answered since start, by
	// reason and class (RefusalTotals reads them from a counter): a new
	// map each time, which the Board keeps until the next reading.
	Refusals map[Refusal]float64
	// WouldRefuse are, likewise, the refusals observe mode would have
	// made and did not (sluice_would_refuse_total).
	WouldRefuse map[Refusal]float64
}

// Refusal is a reason and a class of Reading.Refusals.
type Refusal struct{ Reason, Class string }

// Source reads the gateway at now. The Board calls it from one goroutine
// once a second: it must take no lock the request path holds for long.
type Source func(now time.Time) Reading

// Board is the dashboard of one gateway: its history, the event streams of
// the pages connected, and the routes serving them (Mount). Safe for
// concurrent use, but Sample and Run are to be called by one goroutine.
type Board struct {
	read Source
	meta Meta            // read under mu: SetSpend replaces its Spend
	top  map[string]bool // the classes of the highest rank: the work that must not be shed

	// prev is the previous reading, for the interval's rates; only the
	// goroutine that calls Sample touches it.
	prev struct {
		at      time.Time
		served  uint64
		refused map[Refusal]float64
		would   map[Refusal]float64
		wasted  float64
		ok      bool
	}

	mu struct {
		sync.Mutex
		ring    [ringSamples]Sample
		n, next int // samples held; where the next goes
		subs    map[chan Sample]struct{}
	}
}

// New returns the Board of a gateway with these classes and spend section
// (nil: none), which read reads.
func New(classes map[string]Class, sc *spend.Config, read Source) *Board {
	b := &Board{read: read, top: map[string]bool{}}
	b.mu.subs = map[chan Sample]struct{}{}
	b.meta = Meta{EverySeconds: every.Seconds(), Classes: map[string]Class{}, Spend: spendMeta(sc)}
	best := -1
	for name, c := range classes {
		b.meta.Classes[name] = c
		if c.Rank > best {
			best = c.Rank
			clear(b.top)
		}
		if c.Rank == best {
			b.top[name] = true
		}
	}
	return b
}

// SetSpend gives the meta a reloaded spend section's ceiling and stages:
// a page loaded from now on draws them.
func (b *Board) SetSpend(sc *spend.Config) {
	m := spendMeta(sc)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.meta.Spend = m
}

// Run samples once a second until ctx ends, and then ends the event
// streams of /admin/v1/events. Run it once at a time; a Board run again
// lets new streams start.
func (b *Board) Run(ctx context.Context) error {
	defer b.closeSubscribers()
	tick := time.NewTicker(every)
	defer tick.Stop()
	b.Sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			b.Sample(now)
		}
	}
}

// Sample takes one reading at now, adds it to the history and sends it to
// the event streams; Run calls it once a second, and a test or benchmark
// that sets the time itself calls it instead. Not safe for concurrent use
// with itself or Run.
func (b *Board) Sample(now time.Time) Sample {
	r := b.read(now)
	d := r.Sample
	d.Time = now.UnixMilli()
	d.Goodput = 0
	d.RefusedReason, d.RefusedClass, d.ShedClass = map[string]float64{}, map[string]float64{}, map[string]float64{}
	var wasted float64
	if d.Spend != nil {
		wasted = d.Spend.WastedUSD
	}
	if p := &b.prev; p.ok {
		if dt := now.Sub(p.at).Seconds(); dt > 0 {
			d.Goodput = float64(d.Served-p.served) / dt
			if d.Spend != nil {
				d.Spend.WastedPerH = (wasted - p.wasted) / dt * 3600
			}
		}
		for k, n := range r.Refusals {
			if delta := n - p.refused[k]; delta > 0 {
				d.RefusedReason[k.Reason] += delta
				d.RefusedClass[k.Class] += delta
				if capacityReason[k.Reason] {
					d.ShedClass[k.Class] += delta
				}
			}
		}
		for k, n := range r.WouldRefuse {
			if delta := n - p.would[k]; delta > 0 {
				if d.WouldRefuseReason == nil {
					d.WouldRefuseReason = map[string]float64{}
				}
				d.WouldRefuseReason[k.Reason] += delta
			}
		}
	}
	b.prev.at, b.prev.served, b.prev.refused, b.prev.wasted, b.prev.ok = now, d.Served, r.Refusals, wasted, true
	b.prev.would = r.WouldRefuse

	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.ring[b.mu.next] = d
	b.mu.next = (b.mu.next + 1) % ringSamples
	b.mu.n = min(b.mu.n+1, ringSamples)
	// The status reads the ring with the new sample in it, then is stored
	// in it: the slot is the one just written.
	d.Status = b.statusLocked(now)
	b.mu.ring[(b.mu.next+ringSamples-1)%ringSamples].Status = d.Status
	for ch := range b.mu.subs {
		select {
		case ch <- d:
		default: // a subscriber that has not taken the last second's sample skips this one
		}
	}
	return d
}

// RefusalTotals reads a refusal counter's children, labelled "reason" and
// "class" (and others, summed over): its totals by reason and class. A
// refusal without a class (refused before its class was read: draining)
// counts as class "none".
func RefusalTotals(c prometheus.Collector) map[Refusal]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	out := map[Refusal]float64{}
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Counter == nil {
			continue
		}
		var k Refusal
		for _, l := range pb.Label {
			switch l.GetName() {
			case "reason":
				k.Reason = l.GetValue()
			case "class":
				k.Class = l.GetValue()
			}
		}
		if k.Class == "" {
			k.Class = "none"
		}
		out[k] += pb.Counter.GetValue()
	}
	return out
}

// samplesLocked returns the samples of the ring, oldest first, that are no
// older than since.
func (b *Board) samplesLocked(since time.Time) []Sample {
	out := make([]Sample, 0, b.mu.n)
	for i := range b.mu.n {
		d := b.mu.ring[(b.mu.next-b.mu.n+i+ringSamples)%ringSamples]
		if d.Time >= since.UnixMilli() {
			out = append(out, d)
		}
	}
	return out
}

// statusLocked says in plain words what is wrong, from the samples of the
// last five minutes and the newest one.
func (b *Board) statusLocked(now time.Time) Status {
	// Pointers into the ring, not copies: this runs every second over up
	// to 300 samples.
	since := now.Add(-statusWindow).UnixMilli()
	recent := make([]*Sample, 0, int(statusWindow/every)+1)
	for i := range b.mu.n {
		if d := &b.mu.ring[(b.mu.next-b.mu.n+i+ringSamples)%ringSamples]; d.Time >= since {
			recent = append(recent, d)
		}
	}
	return status(recent, b.top)
}

// History returns the meta and the samples held, oldest first: the body of
// /admin/v1/history.
func (b *Board) History() History {
	b.mu.Lock()
	defer b.mu.Unlock()
	return History{Meta: b.meta, Samples: b.samplesLocked(time.Time{})}
}

// subscribe returns the history and a channel of the samples to come. The
// channel is closed when Run ends; cancel unsubscribes.
func (b *Board) subscribe() (History, <-chan Sample, func()) {
	ch := make(chan Sample, 1)
	b.mu.Lock()
	h := History{Meta: b.meta, Samples: b.samplesLocked(time.Time{})}
	b.mu.subs[ch] = struct{}{}
	b.mu.Unlock()
	return h, ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.mu.subs[ch]; ok {
			delete(b.mu.subs, ch)
			close(ch)
		}
	}
}

// closeSubscribers ends every event stream, and lets later ones start
// again when the Board is run again.
func (b *Board) closeSubscribers() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.mu.subs {
		close(ch)
		delete(b.mu.subs, ch)
	}
}
