package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds one call to Redis. No request waits on Redis — the
// ledger's loop does — so the timeout does not add to any caller's latency;
// it bounds how long a sync may stall and how soon a dead Redis is noticed
// (Failures × Timeout). 50ms is a hundred same-zone round trips and leaves a
// pipelined batch room for a GC pause on either side, yet fits four times
// in one 200ms sync interval.
const DefaultTimeout = 50 * time.Millisecond

// MaxTimeout is the largest Options.Timeout: a call slower than a second
// would hold the sync loop for several intervals.
const MaxTimeout = time.Second

// ClusterReloadInterval is how often a Redis Cluster client reloads its
// slot map when no call has failed.
const ClusterReloadInterval = time.Second

// ErrOpen is returned, as the Err of an *UnavailableError, without
// calling Redis while the breaker is open. It matches ErrUnavailable.
var ErrOpen = fmt.Errorf("%w (circuit breaker open)", ErrUnavailable)

// ClientOptions say how to reach Redis: exactly one of URL, SentinelMaster
// (with SentinelAddrs) or ClusterAddrs.
type ClientOptions struct {
	// URL is redis://[user@]host:port[/db], or rediss:// for TLS.
	URL string
	// SentinelMaster and SentinelAddrs reach a Sentinel-managed master.
	SentinelMaster string
	SentinelAddrs  []string
	// ClusterAddrs are seed nodes of a Redis Cluster.
	ClusterAddrs []string
	// TLS dials the Sentinel or Cluster nodes over TLS (a URL says so by
	// its scheme).
	TLS bool
	// Password authenticates; empty means none (or the URL's).
	Password string
	// Timeout bounds dialing and each read and write. Zero means
	// DefaultTimeout.
	Timeout time.Duration
}

// NewClient returns a go-redis client for o. It does not dial: the first
// call does, so a gateway starts while Redis is down.
func NewClient(o ClientOptions) (redis.UniversalClient, error) {
	n := 0
	for _, set := range []bool{o.URL != "", o.SentinelMaster != "" || len(o.SentinelAddrs) > 0, len(o.ClusterAddrs) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("store: exactly one of url, sentinel or cluster_addrs is required")
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	// go-redis retries failed commands itself by default; the ledger
	// retries at its next sync instead, so a dead Redis costs one timeout
	// per call, not four.
	u := &redis.UniversalOptions{
		Password:              o.Password,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              4,
	}
	if o.TLS {
		u.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case o.URL != "":
		po, err := redis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("store: url: %w", redactURLError(err, o.URL))
		}
		po.MaxRetries, po.DialerRetries, po.DialTimeout, po.ReadTimeout, po.WriteTimeout = u.MaxRetries, u.DialerRetries, u.DialTimeout, u.ReadTimeout, u.WriteTimeout
		po.ContextTimeoutEnabled, po.PoolSize = true, u.PoolSize
		if o.Password != "" {
			po.Password = o.Password
		}
		return redis.NewClient(po), nil
	case len(o.ClusterAddrs) > 0:
		u.Addrs = o.ClusterAddrs
		co := u.Cluster()
		// go-redis reloads its slot map on MOVED and ASK, and otherwise
		// once a minute: after a failover the client would go on dialing
		// the dead primary's address for up to a minute. Redis.Do also
		// asks for a reload after every failed call; this is the
		// periodic one, for changes no call has failed on yet. One
		// CLUSTER SLOTS a second costs the cluster nothing.
		co.ClusterStateReloadInterval = ClusterReloadInterval
		return redis.NewClusterClient(co), nil
	default:
		if o.SentinelMaster == "" || len(o.SentinelAddrs) == 0 {
			return nil, errors.New("store: sentinel: both master and addrs are required")
		}
		return newSentinelClient(o, u), nil
	}
}

// redactURLError keeps credentials in the URL out of the error: go-redis
// and net/url quote the URL whole.
func redactURLError(err error, raw string) error {
	if strings.Contains(raw, "@") {
		return errors.New("not a valid redis:// or rediss:// URL (not shown: it has credentials)")
	}
	return err
}

// Options configure a Redis.
type Options struct {
	// Client is the connection; required. Redis.Close closes it.
	Client redis.UniversalClient
	// KeyPrefix starts every key. Empty means "sluice:".
	KeyPrefix string
	// Cluster names the fleet of replicas sharing the books; it is part
	// of every key, so that fleets can share one Redis. Empty means
	// "default".
	Cluster string
	// Timeout bounds each call. Zero means DefaultTimeout.
	Timeout time.Duration
	// Failures is how many consecutive failed calls open the breaker.
	// Zero means 3.
	Failures int
	// Backoff is how long the breaker first stays open; it doubles at
	// each failed probe up to MaxBackoff. Zero means 250ms and 500ms: a
	// probe twice a second costs Redis nothing, and the replicas are back
	// on shared leases and books within about a second and a half of its
	// return (go-redis itself redials a refused connection once a second).
	Backoff, MaxBackoff time.Duration
	// Logger receives the breaker's transitions. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the breaker's clock. Nil means time.Now.
	Now func() time.Time
}

// Redis is the project's connection to Redis: a go-redis client, a timeout
// on every call and a circuit breaker, so that a Redis that is down or slow
// costs a few timeouts and then nothing until it answers a probe again.
// Safe for concurrent use.
type Redis struct {
	client  redis.UniversalClient
	keys    string
	timeout time.Duration
	log     *slog.Logger
	now     func() time.Time
	b       breaker
	calls   *prometheus.CounterVec
	up      prometheus.GaugeFunc
}

// NewRedis wraps o.Client.
func NewRedis(o Options) (*Redis, error) {
	if o.Client == nil {
		return nil, errors.New("store: Options.Client is nil")
	}
	if o.Timeout < 0 || o.Timeout > MaxTimeout {
		return nil, fmt.Errorf("store: Options.Timeout: %v, want 0 (%v) to %v", o.Timeout, DefaultTimeout, MaxTimeout)
	}
	if o.Failures < 0 || o.Backoff < 0 || o.MaxBackoff < 0 {
		return nil, errors.New("store: Options.Failures, Backoff and MaxBackoff must not be negative")
	}
	r := &Redis{client: o.Client, timeout: o.Timeout, log: o.Logger, now: o.Now}
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.now == nil {
		r.now = time.Now
	}
	prefix, cluster := o.KeyPrefix, o.Cluster
	if prefix == "" {
		prefix = "sluice:"
	}
	if cluster == "" {
		cluster = "default"
	}
	// The cluster name is a hash tag: every key of a fleet lands in one
	// Redis Cluster slot, so that a batch can be applied atomically by one
	// script. The books of one fleet are small enough for one shard.
	r.keys = prefix + "{" + cluster + "}:"
	r.b = breaker{threshold: o.Failures, base: o.Backoff, limit: o.MaxBackoff, log: r.log, since: r.now()}
	if r.b.threshold == 0 {
		r.b.threshold = 3
	}
	if r.b.base == 0 {
		r.b.base = 250 * time.Millisecond
	}
	if r.b.limit == 0 {
		r.b.limit = 500 * time.Millisecond
	}
	r.b.backoff = r.b.base
	r.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_calls_total",
		Help: "Calls to Redis by result: ok, error, or refused while the breaker was open.",
	}, []string{"result"})
	r.up = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_up",
		Help: "1 while Redis answers (the breaker is closed), 0 while it is open or probing.",
	}, func() float64 {
		if r.Up() {
			return 1
		}
		return 0
	})
	return r, nil
}

// Key is the full name of a key: prefix, {cluster}, then the parts joined
// by colons.
func (r *Redis) Key(parts ...string) string {
	k := r.keys
	for i, p := range parts {
		if i > 0 {
			k += ":"
		}
		k += p
	}
	return k
}

// Do runs f with a context bounded by the timeout, unless the breaker is
// open (ErrOpen). f's error, redis.Nil aside, counts as a failure. An
// error that says Redis did not answer, ErrOpen included, is an
// *UnavailableError (it matches ErrUnavailable): since when, and when to
// try again.
func (r *Redis) Do(ctx context.Context, f func(ctx context.Context, c redis.UniversalClient) error) error {
	if !r.b.allow(r.now()) {
		r.calls.WithLabelValues("refused").Inc()
		// While the breaker is open the slot map goes on being reloaded
		// (at most every 200ms): the probe that follows a failover goes
		// to the promoted node, not to the dead one again.
		r.refresh()
		return r.b.unavailable(r.now(), ErrOpen)
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	err := f(cctx, r.client)
	cancel()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil && ctx.Err() != nil {
		// The caller gave up (shutdown): that says nothing about Redis.
		r.b.release()
		return err
	}
	now := r.now()
	r.b.record(now, err)
	if err != nil {
		r.refresh()
		r.calls.WithLabelValues("error").Inc()
		if unreachable(err) {
			return r.b.unavailable(now, err)
		}
		return fmt.Errorf("store: redis: %w", err)
	}
	r.calls.WithLabelValues("ok").Inc()
	return nil
}

// refresh asks a Redis Cluster client for a new slot map after a failed
// or refused call: the node it called may be a primary that died, whose
// replica the cluster has promoted (or will). go-redis reloads in the
// background, one at a time and at most once per 200ms, so a storm of
// failures costs a few CLUSTER SLOTS a second; the next probe goes to the
// primary the cluster names then.
func (r *Redis) refresh() {
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// Up reports whether the breaker is closed: the last calls succeeded.
func (r *Redis) Up() bool { return r.b.closed() }

// The breaker's states as State names them.
const (
	StateUp      = "up"      // closed: calls go to Redis
	StateDown    = "down"    // open: calls are refused (ErrOpen) until the next probe
	StateProbing = "probing" // half-open: one call tries Redis, the others are refused
)

// State is the breaker's state (StateUp, StateDown or StateProbing) and
// since when: up since it last closed (or since NewRedis); down or
// probing since Redis stopped answering — the first of the failures in a
// row that opened it. A failed probe, which opens it again, does not move
// since: those reading it want how long Redis has been away, not how long
// since the last probe.
func (r *Redis) State() (state string, since time.Time) { return r.b.current() }

// LastErrorAt is when a call last failed; zero if none has.
func (r *Redis) LastErrorAt() time.Time { return r.b.lastErrorAt() }

// Collector exposes sluice_store_up and sluice_store_calls_total.
func (r *Redis) Collector() prometheus.Collector { return collectors{r.up, r.calls} }

// Close closes the client.
func (r *Redis) Close() error { return r.client.Close() }

type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

type breakerState int

const (
	stateClosed breakerState = iota
	stateOpen
	stateHalfOpen
)

// breaker is a small circuit breaker: threshold consecutive failures open
// it for backoff; then one call (the probe) goes through; its success
// closes the breaker, its failure opens it again for twice as long. Each
// transition is logged once.
type breaker struct {
	threshold   int
	base, limit time.Duration
	log         *slog.Logger

	mu        sync.Mutex
	state     breakerState
	since     time.Time // up: when it closed; down or probing: firstErr of the failures that opened it
	fails     int       // failures in a row
	firstErr  time.Time // the first of them; meaningful while fails > 0
	backoff   time.Duration
	openUntil time.Time
	probing   bool
	lastErr   time.Time
}

func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateOpen:
		if now.Before(b.openUntil) {
			return false
		}
		b.state = stateHalfOpen
		b.log.Info("redis circuit breaker half-open: probing")
		fallthrough
	case stateHalfOpen:
		if b.probing {
			return false
		}
		b.probing = true
	}
	return true
}

// release gives the probe back without a verdict.
func (b *breaker) release() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *breaker) record(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if err == nil {
		if b.state != stateClosed {
			b.log.Info("redis circuit breaker closed: redis answers again", "down_for", now.Sub(b.since))
			b.since = now
		}
		b.state, b.fails, b.backoff = stateClosed, 0, b.base
		return
	}
	b.lastErr = now
	if b.fails == 0 {
		b.firstErr = now
	}
	b.fails++
	switch {
	case b.state == stateHalfOpen:
		b.backoff = min(2*b.backoff, b.limit)
		b.state, b.openUntil = stateOpen, now.Add(b.backoff)
		b.log.Warn("redis circuit breaker open again: the probe failed", "retry_in", b.backoff, "err", err)
	case b.state == stateClosed && b.fails >= b.threshold:
		b.state, b.openUntil, b.since = stateOpen, now.Add(b.backoff), b.firstErr
		b.log.Warn("redis circuit breaker open: serving from local books", "consecutive_failures", b.fails, "retry_in", b.backoff, "err", err)
	}
}

// unavailable is the *UnavailableError of a call refused or failed at
// now with err: since the failures in a row began, retry at the open
// breaker's next probe.
func (b *breaker) unavailable(now time.Time, err error) *UnavailableError {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := &UnavailableError{Since: now, Err: err}
	switch {
	case b.state != stateClosed:
		e.Since = b.since
	case b.fails > 0: // closed, failing: a success in between would have reset it
		e.Since = b.firstErr
	}
	if b.state == stateOpen && b.openUntil.After(now) {
		e.RetryAt = b.openUntil
	}
	return e
}

func (b *breaker) current() (string, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateOpen:
		return StateDown, b.since
	case stateHalfOpen:
		return StateProbing, b.since
	}
	return StateUp, b.since
}

func (b *breaker) closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == stateClosed
}

func (b *breaker) lastErrorAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr
}
