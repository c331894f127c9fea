package admission

import "time"

// Mode is the dequeue order within a rank.
type Mode uint8

const (
	FIFO Mode = iota
	LIFO
)

func (m Mode) String() string {
	if m == LIFO {
		return "lifo"
	}
	return "fifo"
}

// Stats is a snapshot of a gate's state and counters.
type Stats struct {
	Concurrency int
	InFlight    int
	Queued      int
	// InFlightByRank is InFlight by the rank each call was served at:
	// with Depth, the demand by rank a replica publishes for its lease of
	// the cluster's slots.
	InFlightByRank []int
	// Depth and EstimatedWait are indexed by rank. EstimatedWait is the wait
	// a newcomer of that rank would be told now if it belonged to the tenant
	// holding the most queued requests of that rank — with one tenant, what
	// everyone is told; with several, the worst case (a tenant with little
	// queued is told less, since tenants of a rank take turns).
	Depth         []int
	EstimatedWait []time.Duration
	// Mode is LIFO when any tenant queue is serving newest-first;
	// LIFOQueues counts those queues (the switch is made per tenant queue
	// of a rank, so one tenant's flood does not reorder another's work).
	Mode       Mode
	LIFOQueues int

	// Service-time statistics over the recent window of all requests.
	ServiceP50, ServiceP95, ServiceP99, ServiceMean time.Duration
	ServiceSamples                                  int

	// Admitted counts requests granted a slot at once, Enqueued those that
	// waited, Granted those granted after waiting, Canceled those whose
	// caller gave up while queued.
	Admitted, Enqueued, Granted, Canceled uint64
	// Rejected counts refusals by reason (queue_wait, queue_full, evicted,
	// expired).
	Rejected map[Reason]uint64
	// Completed counts released permits by result.
	Completed map[Result]uint64
}

// KeyStats is the service-time statistics kept for one Request.Key.
type KeyStats struct {
	P50, P95, Mean time.Duration
	Samples        int
}

// statsTenant names no real tenant: the per-rank wait of an empty rank.
const statsTenant = "\x00stats"

// Stats returns a snapshot. It allocates; it is meant for metrics and
// debugging, not for the hot path.
func (c *Core) Stats(now time.Time) Stats {
	s := Stats{
		Concurrency:   c.concurrency,
		InFlight:      c.inFlight,
		Queued:        c.queued,
		Depth:         make([]int, len(c.levels)),
		EstimatedWait: make([]time.Duration, len(c.levels)),
		Admitted:      c.c.admitted,
		Enqueued:      c.c.enqueued,
		Granted:       c.c.granted,
		Canceled:      c.c.canceled,
		Rejected:      make(map[Reason]uint64),
		Completed:     make(map[Result]uint64),
	}
	s.InFlightByRank = make([]int, len(c.levels))
	for r := range c.levels {
		if l := &c.levels[r]; l.ring != nil {
			tq := l.ring
			for {
				if tq.newestFirst() {
					s.LIFOQueues++
				}
				if tq = tq.next; tq == l.ring {
					break
				}
			}
		}
		s.Depth[r] = c.levels[r].depth
		if c.inFlightAt != nil {
			s.InFlightByRank[r] = c.inFlightAt[r]
		}
		tenant := statsTenant
		if l := &c.levels[r]; l.ring != nil {
			tenant = l.heaviest().tenant
		}
		// A newcomer without a deadline.
		s.EstimatedWait[r] = c.waitFor(now, r, tenant, 1, &place{class: noDeadline, due: now, units: 1})
	}
	if s.LIFOQueues > 0 {
		s.Mode = LIFO
	}
	s.ServiceP50, s.ServiceP95 = c.all.quantiles()
	s.ServiceP99 = c.all.tail()
	s.ServiceMean = c.all.mean()
	s.ServiceSamples = c.all.count()
	for r := ReasonQueueWait; r < numReasons; r++ {
		if n := c.c.rejected[r]; n > 0 {
			s.Rejected[r] = n
		}
	}
	for r := Success; r <= Unused; r++ {
		if n := c.c.completed[r]; n > 0 {
			s.Completed[r] = n
		}
	}
	return s
}

// KeyStats returns the statistics of one key (zero when it has none).
func (c *Core) KeyStats(key string) KeyStats {
	w := c.keys[key]
	if w == nil {
		return KeyStats{}
	}
	p50, p95 := w.quantiles()
	return KeyStats{P50: p50, P95: p95, Mean: w.mean(), Samples: w.count()}
}

// Keys returns the keys that have statistics of their own.
func (c *Core) Keys() []string {
	out := make([]string, 0, len(c.keys))
	for k := range c.keys {
		out = append(out, k)
	}
	return out
}
