package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store"
)

// Books is where the gateway's spend books live: in memory (optionally
// snapshotted to a file), or on Redis; and, with Redis, the Lease of the
// provider's concurrency and the connection the batch jobs share.
type Books struct {
	cfg    *config.StoreConfig
	getenv func(string) string
	log    *slog.Logger

	redis  *store.Redis
	ledger *store.Ledger
	mem    *spend.MemoryLedger
	snaps  *store.Snapshots
	// lease shares the provider's concurrency (lease.go); nil without
	// Redis or with leases disabled.
	lease *Lease
	// reg is where Register put the metrics: a connection opened after
	// it registers its own there.
	reg  prometheus.Registerer
	once sync.Once
}

// NewBooks returns the books of the store section c (nil: none), opening
// nothing yet. getenv reads store.redis.password_env (nil means
// os.Getenv); logger receives the store's and the lease's logs.
func NewBooks(c *config.StoreConfig, getenv func(string) string, logger *slog.Logger) *Books {
	if getenv == nil {
		getenv = os.Getenv
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Books{cfg: c, getenv: getenv, log: logger}
}

// OpenLedger builds the spend ledger the store section asks for; nil (the
// Limiter's own MemoryLedger) without one. A snapshot is read now: a
// corrupt one stops the gateway from starting rather than forgetting the
// day's spend. Call it once, with a spend section.
func (b *Books) OpenLedger() (spend.Ledger, error) {
	c := b.cfg
	if c == nil {
		return nil, nil
	}
	if s := c.Snapshot; s != nil {
		b.mem = spend.NewMemoryLedger()
		b.snaps = &store.Snapshots{Path: s.Path, Interval: s.Interval.D(), Ledger: b.mem, Logger: b.log}
		if err := b.snaps.Load(); err != nil {
			return nil, fmt.Errorf("config: store.snapshot.path: %w", err)
		}
		return b.mem, nil
	}
	if c.Redis == nil {
		return nil, nil
	}
	r, err := b.Redis()
	if err != nil {
		return nil, err
	}
	if b.ledger, err = store.NewLedger(r, store.LedgerOptions{SyncInterval: c.Redis.SyncInterval.D(), MaxQueued: c.Redis.MaxQueued, Logger: b.log}); err != nil {
		r.Close()
		return nil, fmt.Errorf("config: store.redis: %w", err)
	}
	return b.ledger, nil
}

// Redis is the connection to store.redis (nil without it), opened
// (without dialing: the first call does) once for the books, the lease and
// the batch jobs. Opened after Register, it registers its metrics there.
func (b *Books) Redis() (*store.Redis, error) {
	if b.redis != nil || b.cfg == nil || b.cfg.Redis == nil {
		return b.redis, nil
	}
	r := b.cfg.Redis
	o := store.ClientOptions{URL: r.URL, ClusterAddrs: r.ClusterAddrs, TLS: r.TLS, Timeout: r.Timeout.D()}
	if r.Sentinel != nil {
		o.SentinelMaster, o.SentinelAddrs = r.Sentinel.Master, r.Sentinel.Addrs
	}
	if r.PasswordEnv != "" {
		if o.Password = b.getenv(r.PasswordEnv); o.Password == "" {
			return nil, fmt.Errorf("config: store.redis.password_env: the environment variable %s is empty or unset", r.PasswordEnv)
		}
	}
	client, err := store.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("config: store.redis: %w", err)
	}
	if b.redis, err = store.NewRedis(store.Options{Client: client, KeyPrefix: r.KeyPrefix, Cluster: r.Cluster, Timeout: r.Timeout.D(), Logger: b.log}); err != nil {
		client.Close()
		return nil, fmt.Errorf("config: store.redis: %w", err)
	}
	if b.reg != nil { // neither the books nor the lease opened it: its metrics are not registered yet
		b.reg.MustRegister(b.redis.Collector())
	}
	return b.redis, nil
}

// RedisState is Redis's state as the circuit breaker sees it, and since
// when (store.Redis.State); ok is false without Redis, or when nothing
// opened the connection (Redis opens it, for the books, the lease or the
// batches).
func (b *Books) RedisState() (state string, since time.Time, ok bool) {
	if b.redis == nil {
		return "", time.Time{}, false
	}
	state, since = b.redis.State()
	return state, since, true
}

// Lease is the lease of the provider's concurrency; nil without Redis or
// with leases disabled.
func (b *Books) Lease() *Lease { return b.lease }

// Owner names this replica to the batch jobs it claims: its row in the
// lease table, or a name of its own without a lease.
func (b *Books) Owner() string {
	if b.lease != nil {
		return b.lease.id
	}
	return ReplicaID()
}

// AlertClaim is the Alerter's Claim: with Redis, each alert is delivered
// by one replica; otherwise nil, every replica for itself.
func (b *Books) AlertClaim() func(context.Context, spend.AlertEvent) bool {
	if b.redis == nil {
		return nil
	}
	return store.AlertClaim(b.redis, "")
}

// Register adds the store's metrics (sluice_store_up,
// sluice_store_queued_entries, sluice_cluster_lease_slots, …) to reg, with
// Redis only. Call it once.
func (b *Books) Register(reg prometheus.Registerer) {
	b.reg = reg
	if b.redis != nil {
		reg.MustRegister(b.redis.Collector())
	}
	if b.ledger != nil {
		reg.MustRegister(b.ledger.Collector())
	}
	if b.lease != nil {
		reg.MustRegister(b.lease.collectors()...)
	}
}

// Run keeps the books and the lease: with Redis it syncs the books and
// renews the lease of the cluster's concurrency until ctx ends, then
// writes what is queued, releases the lease and closes the connection;
// with Redis keeping only the batches it holds the connection open until
// then; with a snapshot it writes the file every interval and once more
// at the end. Without a store it returns at once. Only the first call
// runs.
func (b *Books) Run(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		switch {
		case b.redis != nil:
			var wg sync.WaitGroup
			if c := b.lease; c != nil {
				wg.Go(func() { c.run(ctx) })
			}
			if l := b.ledger; l != nil {
				err = l.Run(ctx)
			} else {
				<-ctx.Done() // Redis keeps the batches alone: open until the end
			}
			wg.Wait()
			if cerr := b.redis.Close(); err == nil {
				err = cerr
			}
		case b.snaps != nil:
			if err = b.snaps.Run(ctx); err != nil {
				b.log.Error("spend books not saved at shutdown", "err", err)
			}
		}
	})
	return err
}

// StoreState is the store's part of the state dump.
type StoreState struct {
	// Mode is "local" (this process's books, no Redis), "redis" (shared,
	// Redis answering) or "degraded" (shared, Redis unreachable: serving
	// from the local view, queueing the writes).
	Mode string `json:"mode"`
	Up   bool   `json:"up"`
	// State is Redis's as the circuit breaker on every call sees it: "up",
	// "down" (calls refused until the next probe: the Batch API answers
	// 503 store_unavailable) or "probing"; Since is since when — for down
	// and probing, since Redis stopped answering (store.Redis.State).
	// Both are absent without Redis.
	State       string     `json:"state,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// Queued is the spend buckets waiting to be written to Redis, Dropped
	// those a full queue lost since start.
	Queued   int    `json:"queued"`
	Dropped  int64  `json:"dropped,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// Cluster is the lease of the cluster's concurrency; absent without
	// Redis or with leases disabled.
	Cluster *ClusterState `json:"cluster,omitempty"`
}

// State is the store's part of the state dump; spending says the gateway
// keeps spend books (it has a spend section). Nil without Redis and
// without spend books.
func (b *Books) State(spending bool) *StoreState {
	if b.redis == nil {
		if !spending {
			return nil
		}
		s := &StoreState{Mode: "local", Up: true}
		if b.snaps != nil {
			s.Snapshot = b.snaps.Path
		}
		return s
	}
	// Up from the same reading as the state, so that the two never
	// disagree.
	state, since := b.redis.State()
	since = since.UTC()
	s := &StoreState{Mode: "redis", Up: state == store.StateUp, State: state, Since: &since}
	if b.ledger != nil {
		// Degraded too while the breaker is closed and the last sync
		// failed.
		s.Mode, s.Queued, s.Dropped = b.ledger.Mode(), b.ledger.Queued(), b.ledger.Dropped()
	}
	if !s.Up {
		s.Mode = "degraded"
	}
	if b.lease != nil {
		s.Cluster = b.lease.State()
	}
	if at := b.redis.LastErrorAt(); !at.IsZero() {
		at = at.UTC()
		s.LastErrorAt = &at
	}
	return s
}
