package config

import (
	"net"
	"net/url"
	"regexp"
	"time"

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

// LeaseConfig is store.redis.lease: how the replicas sharing a Redis share
// the provider's concurrency. With store.redis, admission.concurrency is
// the provider's number for the whole cluster, not each replica's: every
// interval each replica publishes its demand (calls in flight and queued,
// by rank) and renews a lease of slots, which becomes its gate's
// concurrency (see lease.Divide). Admission, the wait estimate and the
// queue stay local; no request waits on Redis.
type LeaseConfig struct {
	// Disabled keeps admission.concurrency each replica's own, as without
	// Redis: for replicas that call different provider accounts.
	Disabled bool `yaml:"disabled"`
	// Interval is how often a replica renews its lease and publishes its
	// demand: how soon slots follow demand from one replica to another.
	// Zero means 200ms; 20ms to 2s.
	Interval Duration `yaml:"interval"`
	// TTL is how long a lease lives without a renewal: a replica that dies
	// gives its slots back after it, and one that loses Redis keeps at most
	// its lease for it before taking its local share. Zero means 3s; at
	// least 3 intervals, at most 1m.
	TTL Duration `yaml:"ttl"`
	// Replicas is how many replicas the local share assumes until this one
	// has seen the cluster on Redis (Redis unreachable since start); after
	// that, the larger of it and the last count seen. Zero means 2, the
	// smallest fleet that shares a Redis; at most 1000.
	Replicas int `yaml:"replicas"`
}

const (
	DefaultLeaseInterval = 200 * time.Millisecond
	DefaultLeaseTTL      = 3 * time.Second
	DefaultLeaseReplicas = 2
)

func (c *LeaseConfig) validate() error {
	if c == nil {
		return nil
	}
	if c.Interval != 0 {
		if err := durationIn("store.redis.lease.interval", c.Interval, 20*time.Millisecond, 2*time.Second); err != nil {
			return err
		}
	}
	interval := c.Interval.D()
	if interval == 0 {
		interval = DefaultLeaseInterval
	}
	if c.TTL != 0 {
		if err := durationIn("store.redis.lease.ttl", c.TTL, 3*interval, time.Minute); err != nil {
			return err
		}
	}
	if c.Replicas != 0 {
		return intIn("store.redis.lease.replicas", c.Replicas, 1, 1000)
	}
	return nil
}
