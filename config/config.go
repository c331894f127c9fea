package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/gateway/guard"
	"github.com/sluicehq/sluice/gateway/idempotency"
	"github.com/sluicehq/sluice/gateway/observe"
	"github.com/sluicehq/sluice/internal/yamlpath"
	"github.com/sluicehq/sluice/internal/yamltime"
	"github.com/sluicehq/sluice/spend"
)

// Config is the gateway's configuration, as read from YAML. Every field
// documents its zero value; Validate returns an error naming the first bad
// field by its YAML path.
type Config struct {
	// Listen is the address of the proxy. Empty means 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// Admin is the address of the admin listener (/metrics, /healthz,
	// /readyz, /admin/v1/state). Empty means 127.0.0.1:9090. It should stay
	// on loopback: it shows tenants and state.
	Admin string `yaml:"admin"`
	// AdminPprof serves the Go runtime's profiles (CPU, heap, goroutines,
	// execution trace) at /debug/pprof/ on the admin listener, for chasing
	// the gateway's own latency or memory. Off by default; `sluice serve`
	// honours it (Server.AdminHandler), the Gateway handler does not.
	AdminPprof bool `yaml:"admin_pprof"`

	// Upstream is the one provider the gateway forwards to, every model
	// through one gate. Required unless upstreams is set; not with it.
	Upstream UpstreamConfig `yaml:"upstream"`
	// Upstreams are several deployments, a pool per (deployment, model)
	// (see DeploymentConfig in upstreams.go). Empty means the single
	// upstream. With upstreams, upstream.url, upstream.api_key_env,
	// upstream.auth_header and admission.concurrency must be absent (each
	// deployment has its own); upstream.max_idle_conns bounds the idle
	// connections kept to each deployment.
	Upstreams []DeploymentConfig `yaml:"upstreams"`
	// Routes maps a model as callers name it (a model's name or alias) to
	// the deployments that serve it, in failover order. A name not listed
	// goes to every deployment serving it, in upstreams order; each name is
	// routed on its own (an alias does not follow its model's route). Only
	// with upstreams.
	Routes map[string][]string `yaml:"routes"`
	// Degrade is degrading under load (see chain.DegradeConfig). Only
	// with upstreams. An empty ladder means spend.ladder when the spend
	// section has one, else none.
	Degrade   chain.DegradeConfig `yaml:"degrade"`
	Admission AdmissionConfig     `yaml:"admission"`
	// Classes are the priority classes callers may name in
	// X-Sluice-Priority. Empty means interactive (rank 4, 30s), batch (rank
	// 3, 5m) and speculative (rank 0, 10s).
	Classes map[string]ClassConfig `yaml:"classes"`
	// DefaultClass is the class of a request without X-Sluice-Priority.
	// Empty means interactive.
	DefaultClass string      `yaml:"default_class"`
	Ranks        RanksConfig `yaml:"ranks"`
	// Mode is the gateway's mode, and every tenant's that names none
	// (tenants[i].mode): enforce, or observe — every call is decided as in
	// enforce mode and forwarded regardless, its would-be refusal, degrade
	// and wait counted (sluice_would_refuse_total…), logged
	// (would_refuse=…) and answered in X-Sluice-Would-Refuse; its spend is
	// booked. Empty means enforce. A reload switches it.
	Mode string `yaml:"mode"`
	// Tenants identify callers by API key. Empty means one anonymous
	// tenant: the Authorization header is not checked (and is forwarded
	// upstream unless upstream.api_key_env is set).
	Tenants []chain.TenantConfig `yaml:"tenants"`
	// Passthrough lists the paths forwarded beside the gated APIs
	// (/v1/chat/completions, /v1/completions, /v1/embeddings,
	// /v1/responses, /v1/messages), each admitted through the chain. Empty
	// means none: every other path is a 404 (see routes.go).
	Passthrough []PassthroughConfig `yaml:"passthrough"`
	Limits      LimitsConfig        `yaml:"limits"`
	// Retries bounds callers' retries and the gateway's own (see
	// chain.RetryConfig).
	Retries chain.RetryConfig `yaml:"retries"`
	// UpstreamLimit adapts concurrency to the provider's rate limits.
	UpstreamLimit UpstreamLimitConfig `yaml:"upstream_limit"`
	// Spend is money as a second resource: prices, budgets, the staged
	// policy and alerts (see package spend). Nil means no books and no
	// budgets.
	Spend *spend.Config `yaml:"spend"`
	// Server bounds client connections: timeouts and connection caps.
	Server guard.Config `yaml:"server"`
	// Store says where the spend books live (see StoreConfig). Nil means
	// this process's memory: one replica, books forgotten at restart.
	Store *StoreConfig `yaml:"store"`
	// Idempotency bounds the answers kept for Idempotency-Key (package idempotency).
	Idempotency idempotency.Config `yaml:"idempotency"`
	// Log is how `sluice serve` writes its logs, the access log's line per
	// request among them (see observe.LogConfig). Zero means text.
	Log observe.LogConfig `yaml:"log"`
	// Batch is the Batch API (/v1/files, /v1/batches), which the gateway
	// serves and runs itself (see batchapi.Config). Its zero value is off in a
	// Gateway built by New and on in `sluice serve`.
	Batch batchapi.Config `yaml:"batch"`
	// ShutdownGrace is how long in-flight requests may take to finish after
	// SIGTERM/SIGINT. Zero means 30s; at most 1h (an orchestrator kills a
	// process long before).
	ShutdownGrace Duration `yaml:"shutdown_grace"`
}

// UpstreamConfig is the provider the gateway forwards to.
type UpstreamConfig struct {
	// URL is the provider's base URL, e.g. https://api.openai.com. Required.
	URL string `yaml:"url"`
	// APIKeyEnv names the environment variable holding the provider's API
	// key. Empty means none: the caller's Authorization is forwarded as is
	// (allowed only without tenants, whose keys must never reach the
	// provider). The key is never logged nor returned.
	APIKeyEnv string `yaml:"api_key_env"`
	// AuthHeader is how the key is sent: "authorization" (Bearer, OpenAI
	// style) or "x-api-key" (Anthropic style). Empty means authorization.
	AuthHeader string `yaml:"auth_header"`
	// MaxIdleConns is the pool of idle connections kept to the provider.
	// Zero means 1024; at most 65536 (one per local port).
	MaxIdleConns int `yaml:"max_idle_conns"`
}

// AdmissionConfig configures the gate (see admission.Config).
type AdmissionConfig struct {
	// Concurrency is how many upstream calls may be in flight: 1 to
	// 100000 (no provider grants more to one key; each slot is a
	// goroutine and a connection). Zero (absent) means learnt from the
	// provider's answers (see Learn). With upstreams it must be absent:
	// each pool has its own (upstreams[i].concurrency), and the gate's
	// base is the largest of them.
	Concurrency int `yaml:"concurrency"`
	// Learn bounds the concurrency learnt from the provider's latencies,
	// refusals and rate-limit headers (package adaptive): min, max and
	// initial. A pool whose concurrency is absent learns it within these
	// bounds; set with a configured concurrency, that number learns too,
	// as a hard cap. Nil means the defaults (1, 1000, 4) for the pools
	// without a configured concurrency, and a configured one fixed.
	Learn *adaptive.Config `yaml:"learn"`
	// MaxQueue bounds waiting requests; at most 1000000 (each waiting
	// request holds its body in memory). Nil (absent) means a bound derived
	// from the rest of the config (see DefaultMaxQueue): without a waiting
	// room, priorities cannot act, since nothing waits to be put in order.
	// Zero means no waiting room: a call that finds every slot busy is
	// refused at once.
	MaxQueue *int `yaml:"max_queue"`
	// MaxQueuePerTenant caps one tenant's share of the queue. Zero means no
	// fixed cap (the bound is still shared fairly); at most 1000000.
	MaxQueuePerTenant int `yaml:"max_queue_per_tenant"`
	// WaitEstimator is "mean" or "median". Empty means mean.
	WaitEstimator string `yaml:"wait_estimator"`
	// InitialServiceTime is assumed before the first call completes. Zero
	// means none (admission by the queue bound alone until then); at most
	// 1h.
	InitialServiceTime Duration `yaml:"initial_service_time"`
	// ServiceWindow is how many recent calls the estimator keeps. Zero
	// means 256; at most 65536 (the window is kept per model).
	ServiceWindow int `yaml:"service_window"`
	// FIFOOnly disables adaptive LIFO.
	FIFOOnly bool `yaml:"fifo_only"`
	// RefusalSpread is how far past the time the gate or a budget needs
	// to recover the Retry-After of callers refused together is spread,
	// one admission apart, so that their retries do not come back as one
	// wave (see chain.Config.RefusalSpread). Nil (absent) means 30s; zero
	// turns the spread off; at most 60s, the longest the official SDKs
	// honour.
	RefusalSpread *Duration `yaml:"refusal_spread"`

	// Set by withDefaults: Concurrency (with upstreams) or MaxQueue was
	// filled in, not written. Unexported, so reloads ignore them.
	concurrencyDerived, maxQueueDerived bool
}

// ClassConfig is one priority class.
type ClassConfig struct {
	// Rank orders shedding: higher ranks are served first and shed last
	// (0–15). Required unless the class is one of the built-in three, whose
	// default ranks are 4, 3 and 0.
	Rank *int `yaml:"rank"`
	// DefaultTimeout is the deadline of a request of this class that sends
	// no X-Sluice-Timeout-Ms (nor X-Stainless-Timeout): it decides whether
	// the call starts and how long it waits, not when a started answer
	// ends (LimitsConfig.MaxCallDuration). Zero means limits.max_timeout.
	DefaultTimeout Duration `yaml:"default_timeout"`
}

// RanksConfig places retries and tiers in the shed order.
type RanksConfig struct {
	// Retry is the highest rank of a retry. Nil means 1.
	Retry *int `yaml:"retry"`
	// LowTier is the highest rank of a low-tier tenant. Nil means 2.
	LowTier *int `yaml:"low_tier"`
	// HighTierBoost lifts high-tier first attempts of classes ranked at
	// least 3. Nil means 1.
	HighTierBoost *int `yaml:"high_tier_boost"`
}

// LimitsConfig bounds what a request may ask for.
type LimitsConfig struct {
	// MaxBodyBytes bounds a request body; larger → 413. Zero means 10 MiB;
	// at most 1 GiB: the body is held in memory until the call ends, and a
	// bound near 2^63 would be no bound at all.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxHeaderBytes bounds a request's line and headers; larger → 431
	// with the JSON error. Zero means 64 KiB; at most 1 MiB. (Go's server
	// itself cuts at twice this, with a plain-text 431, so that what lies
	// between is answered in the contract's shape.)
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxTimeout is the largest X-Sluice-Timeout-Ms accepted; larger → 400.
	// Zero means 10m; at most 24h (a slot held longer is a leak).
	MaxTimeout Duration `yaml:"max_timeout"`
	// MaxCallDuration bounds how long a started call may run — an answer
	// streaming, or a provider still thinking — whatever its caller said:
	// a call whose caller stated no deadline is not cut by its class's
	// default_timeout (which decides only whether it starts and how long
	// it waits), so this is what ends a stream that never ends. Zero
	// means 30m; at most 24h.
	MaxCallDuration Duration `yaml:"max_call_duration"`
}

// Duration is a time.Duration written in YAML as a Go duration string
// ("30s", "5m"); a bare number is refused, since its unit would be a guess.
// D returns the time.Duration. The same type as the other config's
// Duration (gateway and spend), so a value moves between them as it is.
type Duration = yamltime.Duration

// Load reads a YAML file. Unknown keys are errors.
// A file over MaxConfigBytes is refused before it is read.
func Load(path string) (Config, error) {
	data, err := readBounded(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(data)
}

// Parse parses YAML, refusing unknown keys, and validates the result.
// Every error names the YAML path of its field (see package yamlpath).
func Parse(data []byte) (Config, error) {
	if len(data) > MaxConfigBytes {
		return Config{}, tooLarge(int64(len(data)))
	}
	var cfg Config
	if err := yamlpath.Unmarshal(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

const (
	defaultListen = "127.0.0.1:8080"
	defaultAdmin  = "127.0.0.1:9090"
)

// withDefaults fills the documented defaults into a copy.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = defaultListen
	}
	if c.Admin == "" {
		c.Admin = defaultAdmin
	}
	if c.Upstream.AuthHeader == "" {
		c.Upstream.AuthHeader = "authorization"
	}
	if c.Upstream.MaxIdleConns == 0 {
		c.Upstream.MaxIdleConns = 1024
	}
	if c.Limits.MaxBodyBytes == 0 {
		c.Limits.MaxBodyBytes = 10 << 20
	}
	if c.Limits.MaxTimeout == 0 {
		c.Limits.MaxTimeout = Duration(10 * time.Minute)
	}
	if c.Limits.MaxHeaderBytes == 0 {
		c.Limits.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.Limits.MaxCallDuration == 0 {
		c.Limits.MaxCallDuration = Duration(30 * time.Minute)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(30 * time.Second)
	}
	c.Retries.UpstreamAttempts, c.Retries.UpstreamBackoff = c.Retries.Upstream()
	if len(c.Classes) == 0 {
		// The default timeouts never exceed the configured maximum.
		cap := func(d time.Duration) Duration { return Duration(min(d, c.Limits.MaxTimeout.D())) }
		c.Classes = map[string]ClassConfig{
			admission.ClassInteractive: {DefaultTimeout: cap(30 * time.Second)},
			admission.ClassBatch:       {DefaultTimeout: cap(5 * time.Minute)},
			admission.ClassSpeculative: {DefaultTimeout: cap(10 * time.Second)},
		}
	}
	if c.DefaultClass == "" {
		c.DefaultClass = admission.ClassInteractive
	}
	if len(c.Upstreams) > 0 && c.Admission.Concurrency == 0 {
		// The base gate's: each pool's is its own (routingConfig).
		c.Admission.Concurrency = c.largestPoolConcurrency()
		c.Admission.concurrencyDerived = true
	}
	if c.Admission.MaxQueue == nil {
		n := c.DefaultMaxQueue()
		c.Admission.MaxQueue = &n
		c.Admission.maxQueueDerived = true
	}
	// After the waiting room: the batch class sends its own timeouts,
	// and must not lengthen the derived queue.
	c.Batch = c.Batch.WithDefaults()
	return c.batchClassDefaults()
}

// The derived waiting room: what the gate can serve within the longest
// class's default timeout, at the initial service time (or assumedService
// before one is configured), between one place per slot and
// maxDerivedQueue.
const (
	assumedService  = time.Second
	maxDerivedQueue = 1024
)

// DefaultMaxQueue is the waiting room of a config without max_queue:
// concurrency × the longest class default timeout ÷ the initial service
// time (1s when unset), at least the concurrency, at most 1024. A call
// that could not be served within its deadline is refused by the wait
// estimate long before the bound; the bound only caps memory.
func (c Config) DefaultMaxQueue() int {
	return c.defaultMaxQueueFor(c.ceilingFor(c.Admission.Concurrency))
}

// defaultMaxQueueFor is DefaultMaxQueue for a gate of concurrency slots:
// with upstreams, each pool's waiting room when max_queue is absent.
func (c Config) defaultMaxQueueFor(concurrency int) int {
	longest := c.Limits.MaxTimeout.D()
	if len(c.Classes) > 0 {
		longest = 0
		for _, cl := range c.Classes {
			t := cl.DefaultTimeout.D()
			if t == 0 {
				t = c.Limits.MaxTimeout.D()
			}
			longest = max(longest, t)
		}
	}
	service := c.Admission.InitialServiceTime.D()
	if service <= 0 {
		service = assumedService
	}
	n := float64(concurrency) * float64(longest) / float64(service)
	return int(max(float64(concurrency), min(n, maxDerivedQueue)))
}

var builtinRanks = admission.DefaultRanks().Classes

// Validate checks every field and returns an error naming the first bad one.
func (c Config) Validate() error {
	if err := c.validateBounds(); err != nil {
		return err
	}
	c = c.WithDefaults()
	for _, a := range []struct{ field, addr string }{{"listen", c.Listen}, {"admin", c.Admin}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("config: %s: %q is not host:port", a.field, a.addr)
		}
	}
	if len(c.Upstreams) == 0 {
		if c.Upstream.URL == "" {
			return errors.New("config: upstream.url is required")
		}
		u, err := url.Parse(c.Upstream.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("config: upstream.url: %q is not an http(s) URL", c.Upstream.URL)
		}
	}
	if err := c.validateUpstreams(); err != nil {
		return err
	}
	switch c.Upstream.AuthHeader {
	case "authorization", "x-api-key":
	default:
		return fmt.Errorf("config: upstream.auth_header: %q, want authorization or x-api-key", c.Upstream.AuthHeader)
	}
	if err := intIn("upstream.max_idle_conns", c.Upstream.MaxIdleConns, 0, maxIdleConns); err != nil {
		return err
	}
	if len(c.Tenants) > 0 && c.Upstream.APIKeyEnv == "" && len(c.Upstreams) == 0 {
		return errors.New("config: upstream.api_key_env is required when tenants are configured: their keys must not be forwarded to the provider")
	}
	if err := intIn("limits.max_body_bytes", c.Limits.MaxBodyBytes, 0, maxBodyBytes); err != nil {
		return err
	}
	if err := intIn("limits.max_header_bytes", int64(c.Limits.MaxHeaderBytes), 0, MaxMaxHeaderBytes); err != nil {
		return err
	}
	if err := durationIn("limits.max_timeout", c.Limits.MaxTimeout, 0, maxTimeout); err != nil {
		return err
	}
	if err := durationIn("limits.max_call_duration", c.Limits.MaxCallDuration, 0, maxTimeout); err != nil {
		return err
	}
	if err := yamlpath.At("retries", c.Retries.Validate()); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.Log.Validate(); err != nil {
		return err
	}
	if err := validatePassthrough(c.Passthrough, c.Classes, len(c.Tenants) > 0); err != nil {
		return err
	}
	if err := c.validateBatch(); err != nil {
		return err
	}
	if err := c.UpstreamLimit.validate(); err != nil {
		return err
	}
	if err := c.validateLearn(); err != nil {
		return err
	}
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if err := c.Idempotency.Validate(); err != nil {
		return err
	}
	if err := durationIn("shutdown_grace", c.ShutdownGrace, 0, maxShutdownGrace); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Classes)) {
		cl := c.Classes[name]
		if name == "" || strings.ContainsAny(name, " \t,;") {
			return fmt.Errorf("config: classes: %q is not a valid class name", name)
		}
		if cl.Rank == nil {
			if _, ok := builtinRanks[name]; !ok {
				return fmt.Errorf("config: classes.%s.rank is required for a class that is not built in", name)
			}
		}
		if cl.DefaultTimeout < 0 || cl.DefaultTimeout > c.Limits.MaxTimeout {
			return fmt.Errorf("config: classes.%s.default_timeout: %v, want 0..limits.max_timeout (%v)", name, cl.DefaultTimeout.D(), c.Limits.MaxTimeout.D())
		}
	}
	if _, ok := c.Classes[c.DefaultClass]; !ok {
		return fmt.Errorf("config: default_class: %q is not one of classes", c.DefaultClass)
	}
	if _, err := c.SpendConfig(); err != nil {
		return err
	}
	if err := c.Store.validate(c.Spend != nil); err != nil {
		return err
	}
	if err := chain.ValidateTenants(c.Tenants); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for i, t := range c.Tenants {
		path := fmt.Sprintf("tenants[%d]", i)
		if len(t.APIKeysSHA256) == 0 {
			return fmt.Errorf("config: %s.api_keys_sha256: at least one key digest is required", path)
		}
		for j, class := range t.Classes {
			if _, ok := c.Classes[class]; !ok {
				return fmt.Errorf("config: %s.classes[%d]: %q is not a class of classes (%s)", path, j, class, strings.Join(slices.Sorted(maps.Keys(c.Classes)), ", "))
			}
		}
	}
	// Last: every section is known good, and the chain checks what is
	// left by its own rule (routing among them).
	return c.validateChain()
}

// admissionConfig translates the gate's part of the config.
// maxRefusalSpread bounds admission.refusal_spread: the Python SDK
// ignores a retry-after past 60 seconds.
const maxRefusalSpread = time.Minute

// refusalSpread is the spread configured: chain.DefaultRefusalSpread when
// absent.
func (a AdmissionConfig) refusalSpread() Duration {
	if a.RefusalSpread == nil {
		return Duration(chain.DefaultRefusalSpread)
	}
	return *a.RefusalSpread
}

func (c Config) admissionConfig() (admission.Config, error) {
	a := c.Admission
	for _, err := range []error{
		intIn("admission.concurrency", a.Concurrency, 0, maxConcurrency),
		intIn("admission.max_queue", *a.MaxQueue, 0, maxQueue),
		intIn("admission.max_queue_per_tenant", a.MaxQueuePerTenant, 0, maxQueue),
		intIn("admission.service_window", a.ServiceWindow, 0, maxServiceWindow),
		durationIn("admission.initial_service_time", a.InitialServiceTime, 0, maxInitialServiceTime),
		durationIn("admission.refusal_spread", a.refusalSpread(), 0, maxRefusalSpread),
	} {
		if err != nil {
			return admission.Config{}, err
		}
	}
	var est admission.WaitEstimator
	switch a.WaitEstimator {
	case "", "mean":
		est = admission.ByMean
	case "median":
		est = admission.ByMedian
	default:
		return admission.Config{}, fmt.Errorf("config: admission.wait_estimator: %q, want mean or median", a.WaitEstimator)
	}
	ranks := admission.DefaultRanks()
	ranks.Classes = map[string]int{}
	for name, cl := range c.Classes {
		if cl.Rank != nil {
			ranks.Classes[name] = *cl.Rank
		} else {
			ranks.Classes[name] = builtinRanks[name]
		}
		if r := ranks.Classes[name]; r < 0 || r >= admission.MaxRanks {
			return admission.Config{}, fmt.Errorf("config: classes.%s.rank: %d, want 0..%d", name, r, admission.MaxRanks-1)
		}
	}
	ranks.Default = c.DefaultClass
	for _, r := range []struct {
		field string
		v     *int
		dst   *int
	}{{"ranks.retry", c.Ranks.Retry, &ranks.Retry}, {"ranks.low_tier", c.Ranks.LowTier, &ranks.LowTier}, {"ranks.high_tier_boost", c.Ranks.HighTierBoost, &ranks.HighTierBoost}} {
		if r.v == nil {
			continue
		}
		if *r.v < 0 || *r.v >= admission.MaxRanks {
			return admission.Config{}, fmt.Errorf("config: %s: %d, want 0..%d", r.field, *r.v, admission.MaxRanks-1)
		}
		*r.dst = *r.v
	}
	cfg := admission.Config{
		Concurrency:        c.startConcurrency(a.Concurrency),
		MaxQueue:           *a.MaxQueue,
		MaxQueuePerTenant:  a.MaxQueuePerTenant,
		Ranks:              ranks,
		WaitEstimator:      est,
		ServiceWindow:      a.ServiceWindow,
		InitialServiceTime: a.InitialServiceTime.D(),
		FIFOOnly:           a.FIFOOnly,
	}
	if err := cfg.Validate(); err != nil {
		return admission.Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// The largest values the config accepts; each field's comment says why.
// A bound exists for every size, time and count so that a typo (an extra
// zero, a value in the wrong unit) is an error naming the field rather
// than a limit that is silently no limit.
const (
	maxIdleConns          = 65536
	maxConcurrency        = 100_000
	maxQueue              = 1_000_000
	maxServiceWindow      = 65536
	maxInitialServiceTime = time.Hour
	maxBodyBytes          = 1 << 30
	maxTimeout            = 24 * time.Hour
	maxShutdownGrace      = time.Hour
)

// intIn checks lo ≤ v ≤ hi and names the field and the range otherwise.
func intIn[T int | int64](field string, v, lo, hi T) error {
	if v < lo || v > hi {
		return errorf("%s: %d is out of range, want %d..%d", field, v, lo, hi)
	}
	return nil
}

// durationIn checks lo ≤ v ≤ hi and names the field and the range otherwise.
func durationIn(field string, v Duration, lo, hi time.Duration) error {
	if v.D() < lo || v.D() > hi {
		return errorf("%s: %v is out of range, want %v..%v", field, v.D(), lo, hi)
	}
	return nil
}

// floatIn checks lo ≤ v ≤ hi, refusing NaN, and names the field and the
// range otherwise.
func floatIn(field string, v, lo, hi float64) error {
	if !(v >= lo && v <= hi) {
		return errorf("%s: %v is out of range, want %v..%v", field, v, lo, hi)
	}
	return nil
}

func errorf(format string, args ...any) error { return fmt.Errorf("config: "+format, args...) }
