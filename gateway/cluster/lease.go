package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/store"
)

// Cluster modes, in the state dump and the logs.
const (
	modeJoining = "joining" // no answer yet: one slot
	modeShared  = "shared"  // the lease Redis granted
	modeHeld    = "held"    // Redis unreachable: the lease, at most the local share, until it expires
	modeLocal   = "local"   // Redis unreachable past the lease: the local share
)

// Pools is what a Lease needs of the gateway's pools: the first pool's
// gate and adaptive limit (its slots are leased), and the division of
// every pool's limits when there are several.
type Pools interface {
	// Len is how many pools there are: with one (an `upstream:`), the
	// replicas lease its slots; with several, they divide each pool's
	// limits.
	Len() int
	// Level is the first pool's adaptive limit's concurrency at now: the
	// cluster's number as this replica sees it.
	Level(now time.Time) int
	// Stats is the first pool's gate's.
	Stats() admission.Stats
	// SetConcurrency gives the first pool's gate n slots.
	SetConcurrency(n int)
	// Share applies this replica's share of every pool's limits, after
	// the count of replicas changed to n.
	Share(now time.Time, n int)
}

// Lease is a replica's side of the lease table: a loop that renews the
// lease every interval and gives it to the gate.
//
// While Redis is unreachable (its breaker open), a replica keeps at most
// the smaller of its lease and its local share until the lease would have
// expired, then the local share: the cluster's concurrency (as the
// adaptive limit has it) divided by the larger of Replicas and the last
// count of live replicas it saw. The smaller of the two first, so that a
// replica with a small lease does not grow while one with a large lease is
// still draining; the share after the TTL, when the leases the others held
// have expired too. Back on Redis, a replica asks for no more than its
// local share until as many replicas as it last saw have renewed since its
// own return (a row that is merely live may be one renewed before the
// outage, whose replica is still on its share), or a TTL has passed, so
// that the first one back does not take the whole cluster while the
// others still run on their shares. Lowering a gate's concurrency
// never cuts a call: those in flight finish, and new ones wait.
type Lease struct {
	pools    Pools
	log      *slog.Logger
	leases   *store.Leases
	redis    *store.Redis
	id       string
	interval time.Duration
	ttl      time.Duration
	hint     int
	kick     chan struct{}
	// abandon stops the loop without releasing the lease, as a crash
	// would: for tests.
	abandon atomic.Bool
	// tableClock makes renew's now the table's clock too (rather than
	// Redis's own): for tests that drive renew with time as an input.
	tableClock bool

	mu struct {
		sync.Mutex
		mode       string
		grant      lease.Grant
		known      int       // live replicas in the last answer
		expires    time.Time // of the lease, on this replica's clock
		renewed    time.Time
		applied    int
		rejoin     bool      // back from the local share: capped at it
		rejoinBy   time.Time // …until then (zero: not back yet)
		rejoinLive int       // …or until this many replicas have renewed since its first renewal back
		rejoinSeq  int64     // the Seq of that renewal
		pools      int       // the replicas the pools' limits were last divided by
	}

	leaseSlots, live, total, local prometheus.Gauge
	renewals                       *prometheus.CounterVec
}

// OpenLease starts sharing the provider's concurrency, with store.redis
// and leases not disabled (otherwise it does nothing): the gate starts at
// one slot until the first lease (or the local share, if Redis does not
// answer). Run renews it. Call it once, after the pools are built.
func (b *Books) OpenLease(pools Pools) error {
	c := b.cfg
	if c == nil || c.Redis == nil || (c.Redis.Lease != nil && c.Redis.Lease.Disabled) {
		return nil
	}
	r, err := b.Redis()
	if err != nil {
		return err
	}
	lc := config.LeaseConfig{}
	if c.Redis.Lease != nil {
		lc = *c.Redis.Lease
	}
	cl := &Lease{pools: pools, log: b.log, redis: r, leases: store.NewLeases(r), id: ReplicaID(),
		interval: lc.Interval.D(), ttl: lc.TTL.D(), hint: lc.Replicas, kick: make(chan struct{}, 1)}
	if cl.interval == 0 {
		cl.interval = config.DefaultLeaseInterval
	}
	if cl.ttl == 0 {
		cl.ttl = config.DefaultLeaseTTL
	}
	if cl.hint == 0 {
		cl.hint = config.DefaultLeaseReplicas
	}
	cl.mu.mode = modeJoining
	cl.leaseSlots = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_cluster_lease_slots",
		Help: "Slots this replica may use now: its lease of the cluster's concurrency, or its local share while Redis is unreachable."})
	cl.live = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_cluster_replicas",
		Help: "Live replicas in the last lease answer (each renewed within its TTL)."})
	cl.total = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_cluster_concurrency",
		Help: "The cluster's concurrency divided among the replicas: admission.concurrency, lowered by the provider's rate limits."})
	cl.local = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_cluster_local_share",
		Help: "1 while Redis is unreachable and this replica runs on its lease capped at, then on, its local share."})
	cl.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cluster_lease_renewals_total",
		Help: "Lease renewals by result: ok or error."}, []string{"result"})
	b.lease = cl
	cl.apply(1)
	return nil
}

var hostWord = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// ReplicaID names this process in the lease table: host, pid and a random
// suffix, so that a restarted replica is a new row, not the old one's.
func ReplicaID() string {
	host, _ := os.Hostname()
	host = hostWord.ReplaceAllString(host, "_")
	if len(host) > 40 {
		host = host[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ID is this replica's row in the lease table.
func (c *Lease) ID() string { return c.id }

// LimitChanged is the adaptive limit's new level: the next renewal
// publishes it, and a lowered one is renewed at once.
func (c *Lease) LimitChanged(int) {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Replicas is how many replicas share the pools' limits, as the lease
// last counted them (Replicas of store.redis.lease before the first
// renewal).
func (c *Lease) Replicas() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.pools == 0 { // before the first renewal
		return max(1, c.hint)
	}
	return c.mu.pools
}

// run renews the lease every interval until ctx ends, then releases it
// (unless abandoned), so that its slots go back at once.
func (c *Lease) run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.renew(ctx, time.Now())
		select {
		case <-ctx.Done():
			if !c.abandon.Load() {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = c.leases.Release(rctx, c.id)
				cancel()
			}
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// shareLocked is the local share: the cluster's number divided by the replicas
// this one believes there are.
func (c *Lease) shareLocked(level int) int {
	return max(1, level/max(c.hint, c.mu.known))
}

// renew publishes the demand, renews the lease and applies it, or the
// fallback when Redis does not answer.
func (c *Lease) renew(ctx context.Context, now time.Time) {
	if c.abandon.Load() {
		return
	}
	level := c.pools.Level(now)
	st := c.pools.Stats()
	demand := make([]int, len(st.Depth))
	for r := range demand {
		demand[r] = min(st.Depth[r]+st.InFlightByRank[r], lease.MaxDemand)
	}
	q := lease.Request{ID: c.id, TTL: c.ttl, Demand: demand, InFlight: st.InFlight, Current: st.Concurrency, Limit: level}
	if c.tableClock {
		q.Now = now
	}
	c.mu.Lock()
	if c.mu.rejoin || c.mu.mode == modeHeld || c.mu.mode == modeLocal {
		q.Max = c.shareLocked(level)
	}
	if c.mu.rejoin {
		q.Since = c.mu.rejoinSeq
	}
	c.mu.Unlock()
	grant, err := c.leases.Renew(ctx, q)
	if ctx.Err() != nil {
		return // shutting down: the gate keeps what it has
	}
	c.mu.Lock()
	prev := c.mu.mode
	var n int
	if err == nil {
		c.renewals.WithLabelValues("ok").Inc()
		switch {
		case prev == modeHeld || prev == modeLocal:
			// Back: the rows of the others may be ones renewed before
			// the outage, live for the rest of their TTL while those
			// replicas run on their local shares; only a renewal after
			// this one says a replica is back on the table.
			c.mu.rejoin, c.mu.rejoinBy, c.mu.rejoinLive, c.mu.rejoinSeq = true, now.Add(c.ttl), c.mu.known, grant.Seq
		case c.mu.rejoin && (grant.Fresh >= c.mu.rejoinLive || !now.Before(c.mu.rejoinBy)):
			c.mu.rejoin = false
		}
		c.mu.mode, c.mu.grant = modeShared, grant
		if c.mu.rejoin {
			// Not the count to divide by while the others are still on
			// their shares: those rows come back as they renew.
			c.mu.known = max(c.mu.known, grant.Live)
		} else {
			c.mu.known = grant.Live
		}
		c.mu.expires, c.mu.renewed = now.Add(c.ttl), now
		n = grant.Lease
		c.live.Set(float64(grant.Live))
		c.total.Set(float64(grant.Total))
	} else {
		c.renewals.WithLabelValues("error").Inc()
		share := c.shareLocked(level)
		switch {
		case prev == modeJoining && c.redis.Up():
			n = 1 // not reached yet: keep trying on one slot
		case now.Before(c.mu.expires) && c.redis.Up():
			n = c.mu.grant.Lease // a slow answer or two: the lease stands
		case now.Before(c.mu.expires):
			c.mu.mode = modeHeld
			n = min(c.mu.grant.Lease, share)
		default:
			c.mu.mode = modeLocal
			n = share
		}
	}
	mode := c.mu.mode
	replicas := max(1, c.hint, c.mu.known)
	if c.mu.mode == modeShared {
		replicas = max(1, c.mu.known)
	}
	c.mu.Unlock()
	if !c.Leasing() {
		// With several pools, each pool's limits are divided between
		// the live replicas, rather than leased slot by slot: the lease
		// table counts them.
		c.mu.Lock()
		changed := replicas != c.mu.pools
		c.mu.pools = replicas
		c.mu.Unlock()
		if changed {
			c.pools.Share(now, replicas)
		}
	} else {
		c.apply(n)
	}
	if mode == prev {
		return
	}
	switch mode {
	case modeShared:
		c.local.Set(0)
		c.log.Info("cluster concurrency: on a shared lease", "replica", c.id, "lease", n, "of", grant.Total, "replicas", grant.Live)
	case modeHeld:
		c.local.Set(1)
		c.log.Warn("cluster concurrency: redis unreachable, keeping the lease capped at the local share until it expires", "slots", n, "err", err)
	case modeLocal:
		c.local.Set(1)
		c.log.Warn("cluster concurrency: redis unreachable, on the local share", "slots", n, "err", err)
	}
}

// apply gives the gate n slots. Lowering it lets the calls in flight finish.
func (c *Lease) apply(n int) {
	c.mu.Lock()
	same := c.mu.applied == n
	c.mu.applied = n
	c.mu.Unlock()
	c.leaseSlots.Set(float64(n))
	if !same {
		c.pools.SetConcurrency(n)
	}
}

// Leasing says the replicas lease the slots of the one pool by demand,
// rank by rank (an `upstream:`); with several pools, each pool's limits
// are divided between the live replicas instead — leasing each pool's
// slots would be a round trip per pool.
func (c *Lease) Leasing() bool { return c.pools.Len() == 1 }

func (c *Lease) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.leaseSlots, c.live, c.total, c.local, c.renewals}
}

// ClusterState is the cluster's concurrency in the state dump.
type ClusterState struct {
	// Replica is this replica's row in the lease table.
	Replica string `json:"replica"`
	// Mode is joining (no lease yet: one slot), shared (a lease from
	// Redis), held (Redis unreachable: the lease, at most the local share,
	// until it expires) or local (the local share).
	Mode string `json:"mode"`
	// Slots is what the gate has now; Lease, Target, Concurrency and
	// Replicas are the last answer's: the lease, this replica's share of
	// the division, the cluster's number divided, the live replicas.
	Slots       int        `json:"slots"`
	Lease       int        `json:"lease"`
	Target      int        `json:"target"`
	Concurrency int        `json:"concurrency"`
	Replicas    int        `json:"replicas"`
	RenewedAt   *time.Time `json:"renewed_at,omitempty"`
}

// State is the lease in the state dump.
func (c *Lease) State() *ClusterState {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &ClusterState{Replica: c.id, Mode: c.mu.mode, Slots: c.mu.applied, Lease: c.mu.grant.Lease,
		Target: c.mu.grant.Target, Concurrency: c.mu.grant.Total, Replicas: c.mu.grant.Live}
	if !c.mu.renewed.IsZero() {
		at := c.mu.renewed.UTC()
		s.RenewedAt = &at
	}
	return s
}
