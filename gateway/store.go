package gateway

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store"
)

// StoreConfig says where the spend books live, and whether the replicas
// share the provider's concurrency. Nil (or empty) means in this process's
// memory only: one replica, whose books a restart forgets.
type StoreConfig struct {
	// Redis shares the books among the replicas using the same Redis and
	// cluster name: budgets and the ceiling hold for the whole fleet, and
	// admission.concurrency is the whole fleet's (see LeaseConfig).
	Redis *RedisStoreConfig `yaml:"redis"`
	// Snapshot keeps one process's books across restarts in a file. Not
	// with Redis, which keeps them already.
	Snapshot *SnapshotConfig `yaml:"snapshot"`
}

// RedisStoreConfig is how to reach Redis: exactly one of url, sentinel or
// cluster_addrs.
type RedisStoreConfig struct {
	// URL is redis://host:port[/db], or rediss:// for TLS. Put no password
	// in it: use password_env.
	URL string `yaml:"url"`
	// PasswordEnv names the environment variable holding the password.
	// Empty means none. The password is never logged nor shown.
	PasswordEnv string `yaml:"password_env"`
	// Sentinel reaches a master through Redis Sentinel.
	Sentinel *SentinelConfig `yaml:"sentinel"`
	// ClusterAddrs are seed nodes of a Redis Cluster.
	ClusterAddrs []string `yaml:"cluster_addrs"`
	// TLS dials Sentinel or Cluster nodes over TLS (a URL says so by its
	// scheme, rediss://).
	TLS bool `yaml:"tls"`
	// KeyPrefix starts every key. Empty means "sluice:".
	KeyPrefix string `yaml:"key_prefix"`
	// Cluster names the fleet sharing the books; part of every key, so that
	// fleets (staging, production) can share one Redis. Empty means
	// "default".
	Cluster string `yaml:"cluster"`
	// Timeout bounds each call to Redis. Zero means 50ms (see
	// store.DefaultTimeout: no request waits on Redis); at most 1s.
	Timeout Duration `yaml:"timeout"`
	// SyncInterval is how often the books are written and read: how far
	// a replica's view lags the others'. Zero means 200ms; 10ms to 5s.
	SyncInterval Duration `yaml:"sync_interval"`
	// MaxQueued bounds the spend buckets waiting while Redis is down; past
	// it the oldest minute's are dropped (counted). Zero means 100000; at
	// most 10000000.
	MaxQueued int `yaml:"max_queued"`
	// Lease shares admission.concurrency among the replicas. Nil means
	// the defaults (see LeaseConfig).
	Lease *LeaseConfig `yaml:"lease"`
}

// SentinelConfig is a Sentinel-managed master.
type SentinelConfig struct {
	Master string   `yaml:"master"`
	Addrs  []string `yaml:"addrs"`
}

// SnapshotConfig is the file one process's books are kept in.
type SnapshotConfig struct {
	// Path is the file; its directory must exist. Required.
	Path string `yaml:"path"`
	// Interval is how often it is written (and at shutdown): what a crash
	// may lose. Zero means 10s; 1s to 1h.
	Interval Duration `yaml:"interval"`
}

var (
	envName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	clusterName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	keyPrefix   = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
)

func (c *StoreConfig) validate(hasSpend bool) error {
	if c == nil || (c.Redis == nil && c.Snapshot == nil) {
		return nil
	}
	if c.Snapshot != nil && !hasSpend {
		return errorf("store.snapshot: the snapshot keeps the spend books; it needs a spend section")
	}
	if c.Redis != nil && c.Snapshot != nil {
		return errorf("store.snapshot: not with store.redis, which keeps the books across restarts")
	}
	if s := c.Snapshot; s != nil {
		if s.Path == "" {
			return errorf("store.snapshot.path is required")
		}
		if s.Interval != 0 && (s.Interval.D() < time.Second || s.Interval.D() > time.Hour) {
			return errorf("store.snapshot.interval: %v, want 0 (10s) or 1s to 1h", s.Interval.D())
		}
	}
	r := c.Redis
	if r == nil {
		return nil
	}
	n := 0
	if r.URL != "" {
		n++
	}
	if r.Sentinel != nil {
		n++
	}
	if len(r.ClusterAddrs) > 0 {
		n++
	}
	if n != 1 {
		return errorf("store.redis: exactly one of url, sentinel or cluster_addrs is required")
	}
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			return errorf("store.redis.url: not a redis:// or rediss:// URL")
		}
		if _, has := u.User.Password(); has {
			return errorf("store.redis.url: has a password; put it in the variable store.redis.password_env names")
		}
		if r.TLS {
			return errorf("store.redis.tls: with url, say rediss:// instead")
		}
	}
	if s := r.Sentinel; s != nil {
		if s.Master == "" {
			return errorf("store.redis.sentinel.master is required")
		}
		if err := validAddrs("store.redis.sentinel.addrs", s.Addrs); err != nil {
			return err
		}
	}
	if len(r.ClusterAddrs) > 0 {
		if err := validAddrs("store.redis.cluster_addrs", r.ClusterAddrs); err != nil {
			return err
		}
	}
	if r.PasswordEnv != "" && !envName.MatchString(r.PasswordEnv) {
		return errorf("store.redis.password_env: %q is not an environment variable name", r.PasswordEnv)
	}
	if r.KeyPrefix != "" && !keyPrefix.MatchString(r.KeyPrefix) {
		return errorf("store.redis.key_prefix: %q, want 1 to 64 of A-Z a-z 0-9 _ . : -", r.KeyPrefix)
	}
	if r.Cluster != "" && !clusterName.MatchString(r.Cluster) {
		return errorf("store.redis.cluster: %q, want 1 to 64 of A-Z a-z 0-9 _ . -", r.Cluster)
	}
	if r.Timeout < 0 || r.Timeout.D() > store.MaxTimeout {
		return errorf("store.redis.timeout: %v, want 0 (%v) to %v", r.Timeout.D(), store.DefaultTimeout, store.MaxTimeout)
	}
	if r.SyncInterval != 0 && (r.SyncInterval.D() < 10*time.Millisecond || r.SyncInterval.D() > 5*time.Second) {
		return errorf("store.redis.sync_interval: %v, want 0 (200ms) or 10ms to 5s", r.SyncInterval.D())
	}
	if r.MaxQueued < 0 || r.MaxQueued > 10_000_000 {
		return errorf("store.redis.max_queued: %d, want 0 (%d) to 10000000", r.MaxQueued, store.DefaultMaxQueued)
	}
	return r.Lease.validate()
}

func validAddrs(field string, addrs []string) error {
	if len(addrs) == 0 {
		return errorf("%s: at least one host:port is required", field)
	}
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return errorf("%s[%d]: %q is not host:port", field, i, a)
		}
	}
	return nil
}

// books is where the gateway's spend books live: in memory (optionally
// snapshotted to a file), or on Redis.
type books struct {
	redis  *store.Redis
	ledger *store.Ledger
	mem    *spend.MemoryLedger
	snaps  *store.Snapshots
	// cluster shares the provider's concurrency (cluster.go); nil without
	// Redis or with leases disabled.
	cluster *cluster
	once    sync.Once
}

// openBooks builds the spend ledger the store section asks for; nil (the
// Limiter's own MemoryLedger) without one. A snapshot is read now: a
// corrupt one stops the gateway from starting rather than forgetting the
// day's spend.
func (g *Gateway) openBooks(c *StoreConfig, getenv func(string) string) (spend.Ledger, error) {
	if c == nil {
		return nil, nil
	}
	if s := c.Snapshot; s != nil {
		g.books.mem = spend.NewMemoryLedger()
		g.books.snaps = &store.Snapshots{Path: s.Path, Interval: s.Interval.D(), Ledger: g.books.mem, Logger: g.log}
		if err := g.books.snaps.Load(); err != nil {
			return nil, fmt.Errorf("config: store.snapshot.path: %w", err)
		}
		return g.books.mem, nil
	}
	if c.Redis == nil {
		return nil, nil
	}
	if err := g.openRedis(c.Redis, getenv); err != nil {
		return nil, err
	}
	var err error
	if g.books.ledger, err = store.NewLedger(g.books.redis, store.LedgerOptions{SyncInterval: c.Redis.SyncInterval.D(), MaxQueued: c.Redis.MaxQueued, Logger: g.log}); err != nil {
		g.books.redis.Close()
		return nil, fmt.Errorf("config: store.redis: %w", err)
	}
	return g.books.ledger, nil
}

// openRedis connects to Redis (without dialing: the first call does), once
// for the books and the leases.
func (g *Gateway) openRedis(r *RedisStoreConfig, getenv func(string) string) error {
	if g.books.redis != nil {
		return nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	o := store.ClientOptions{URL: r.URL, ClusterAddrs: r.ClusterAddrs, TLS: r.TLS, Timeout: r.Timeout.D()}
	if r.Sentinel != nil {
		o.SentinelMaster, o.SentinelAddrs = r.Sentinel.Master, r.Sentinel.Addrs
	}
	if r.PasswordEnv != "" {
		if o.Password = getenv(r.PasswordEnv); o.Password == "" {
			return fmt.Errorf("config: store.redis.password_env: the environment variable %s is empty or unset", r.PasswordEnv)
		}
	}
	client, err := store.NewClient(o)
	if err != nil {
		return fmt.Errorf("config: store.redis: %w", err)
	}
	if g.books.redis, err = store.NewRedis(store.Options{Client: client, KeyPrefix: r.KeyPrefix, Cluster: r.Cluster, Timeout: r.Timeout.D(), Logger: g.log}); err != nil {
		client.Close()
		return fmt.Errorf("config: store.redis: %w", err)
	}
	return nil
}

// alertClaim is the Alerter's Claim: with Redis, each alert is delivered
// by one replica; otherwise nil, every replica for itself.
func (b *books) alertClaim() func(context.Context, spend.AlertEvent) bool {
	if b.redis == nil {
		return nil
	}
	return store.AlertClaim(b.redis, "")
}

// register adds the store's metrics (sluice_store_up,
// sluice_store_queued_entries, sluice_cluster_lease_slots, …) to reg, with
// Redis only.
func (b *books) register(reg *prometheus.Registry) {
	if b.redis != nil {
		reg.MustRegister(b.redis.Collector())
	}
	if b.ledger != nil {
		reg.MustRegister(b.ledger.Collector())
	}
	if b.cluster != nil {
		reg.MustRegister(b.cluster.collectors()...)
	}
}

// RunStore keeps the books and the lease: with Redis it syncs the books
// and renews the lease of the cluster's concurrency until ctx ends, then
// writes what is queued, releases the lease and closes the connection;
// with Redis keeping only the batches it holds the connection open until
// then; with a snapshot it writes the file every interval and once more at the
// end. Server.Serve runs it, stopping it after the in-flight requests have
// settled; a program that mounts the Gateway itself must too (with Redis
// its gate has one slot until the first lease). Without a store it returns
// at once. Call it once.
func (g *Gateway) RunStore(ctx context.Context) error {
	var err error
	g.books.once.Do(func() {
		switch {
		case g.books.redis != nil:
			var wg sync.WaitGroup
			if c := g.books.cluster; c != nil {
				wg.Go(func() { c.run(ctx) })
			}
			if l := g.books.ledger; l != nil {
				err = l.Run(ctx)
			} else {
				<-ctx.Done() // Redis keeps the batches alone: open until the end
			}
			wg.Wait()
			if cerr := g.books.redis.Close(); err == nil {
				err = cerr
			}
		case g.books.snaps != nil:
			if err = g.books.snaps.Run(ctx); err != nil {
				g.log.Error("spend books not saved at shutdown", "err", err)
			}
		}
	})
	return err
}

// runBackground runs the alerts and the store until ctx ends.
func (g *Gateway) runBackground(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.RunAlerts(ctx) })
	wg.Go(func() { _ = g.RunStore(ctx) })
	wg.Wait()
}

// StoreState is the store's part of the state dump.
type StoreState struct {
	// Mode is "local" (this process's books), "redis" (shared, Redis
	// answering) or "degraded" (shared, Redis unreachable: serving from
	// the local view, queueing the writes).
	Mode        string     `json:"mode"`
	Up          bool       `json:"up"`
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

func (g *Gateway) storeState() *StoreState {
	b := &g.books
	if b.cluster != nil && b.ledger == nil {
		s := &StoreState{Mode: "redis", Up: b.redis.Up(), Cluster: b.cluster.state()}
		if !s.Up {
			s.Mode = "degraded"
		}
		return s
	}
	if g.spend == nil {
		return nil
	}
	if b.ledger == nil {
		s := &StoreState{Mode: "local", Up: true}
		if b.snaps != nil {
			s.Snapshot = b.snaps.Path
		}
		return s
	}
	s := &StoreState{Mode: b.ledger.Mode(), Up: b.redis.Up(), Queued: b.ledger.Queued(), Dropped: b.ledger.Dropped()}
	if b.cluster != nil {
		s.Cluster = b.cluster.state()
	}
	if at := b.redis.LastErrorAt(); !at.IsZero() {
		at = at.UTC()
		s.LastErrorAt = &at
	}
	return s
}
