package admission

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/yamlpath"
)

// MaxRanks bounds the number of ranks a gate can have.
const MaxRanks = 16

// Config configures a [Gate] or a [Core]. The zero value is not valid:
// Concurrency is required.
type Config struct {
	// Concurrency is the number of slots: how many units of work may run at
	// once. It must be at least 1; it can be changed later with
	// SetConcurrency.
	Concurrency int

	// MaxQueue is the hard bound on queued (waiting) requests. Zero means no
	// waiting room: a request either gets a free slot at once or is refused.
	// Negative is an error. There is no unbounded setting.
	MaxQueue int

	// MaxQueuePerTenant caps how many of the queued requests one tenant may
	// hold, unless its TenantShare.MaxQueue says otherwise. Zero means no
	// fixed cap; the bound is still shared fairly, because
	// at the bound a tenant holding fewer queued requests of a rank than
	// another may evict the other's last-served request of that rank.
	MaxQueuePerTenant int

	// Tenants configures tenants by name: their weight in the fair share,
	// their concurrency cap and their share of the waiting room. A tenant
	// not listed (and the anonymous tenant "", unless listed) has weight 1,
	// no concurrency cap and MaxQueuePerTenant. Nil means every tenant is
	// unlisted.
	Tenants map[string]TenantShare

	// Ranks decides the shed order. Nil means [DefaultRanks].
	Ranks *Ranks

	// WaitEstimator chooses the service time that converts queued work into
	// wait time. The zero value, [ByMean], is what Little's law asks for and
	// predicts real waits better under skewed service times (see
	// TestWaitEstimatorAccuracy); [ByMedian] is the common rule of thumb.
	WaitEstimator WaitEstimator

	// ServiceWindow is how many recent service times the estimator keeps (per
	// key and overall). Zero means 256. The window is a ring plus a
	// log-bucketed histogram, so memory is fixed whatever the traffic.
	ServiceWindow int

	// MaxKeys bounds how many distinct Request.Key values get statistics of
	// their own; further keys use the overall statistics. Zero means 64.
	MaxKeys int

	// MaxShapes bounds how many distinct Request.Shape values get
	// statistics of their own (a window of ServiceWindow samples each);
	// a shape seen when the table is full takes the place of one idle
	// for a minute, or is estimated by its Key. Zero means 256; negative
	// means none (every request is estimated by its Key).
	MaxShapes int

	// InitialServiceTime is the service time assumed before the first
	// completion is recorded. Zero means none: until the first sample the
	// gate admits by the queue bound alone and RetryAfter falls back to one
	// second.
	InitialServiceTime time.Duration

	// FIFOOnly keeps FIFO order within a rank even under overload. The zero
	// value serves newest-first the work queued while its queue stands (see
	// "Refusing early" in the package doc).
	FIFOOnly bool

	// NoDequeueExpiry grants queued requests in turn even when their
	// deadline is too close for the work to finish (a request whose caller
	// has left must still be withdrawn with Core.Cancel, as Gate does). The
	// zero value drops such requests at dequeue with reason expired, which
	// is what every deployment wants; the switch exists so that the
	// simulator can measure what expiry at dequeue is worth.
	NoDequeueExpiry bool

	// NoEarlyRefusal keeps a queued request until it is dequeued, its
	// caller leaves or its deadline passes, even once the gate knows it
	// cannot start in time, and lets a standing queue fill up to its
	// callers' deadlines. The zero value refuses such work at once and
	// bounds the wait in a standing queue (see "Refusing early" in
	// core.go), which is what every deployment wants; the switch exists so
	// that the simulator can measure what refusing early is worth.
	NoEarlyRefusal bool

	// LIFOTarget and LIFOInterval define overload, CoDel-style, for each
	// tenant's queue within a rank whose oldest item has no deadline (every
	// queue's with NoEarlyRefusal; otherwise a queue with deadlines serves
	// newest-first once it stands, see "Refusing early"): it is overloaded
	// once the age of its oldest item has stayed at or above a target for
	// LIFOInterval, and stops being overloaded as soon as that age is seen
	// below the target or the queue empties. The target is half the oldest item's time budget
	// (deadline − arrival) when it has a deadline — waiting that long eats
	// the caller's budget, whatever the time scale of the dependency — and
	// LIFOTarget when it has none. Zero means 1s and 1s.
	LIFOTarget   time.Duration
	LIFOInterval time.Duration
}

// TenantShare is one tenant's part of a [Config]; see the package's
// fairness model. It is also the YAML of a tenant's share in sluice's
// configurations (weight, max_concurrency, queue_share: the gateway's
// tenants[], a scenario's sluice.tenants.<name>); see Validate.
type TenantShare struct {
	// Weight is the tenant's weight in the fair share: within a rank,
	// tenants are served estimated cost in proportion to their weights,
	// and across ranks a tenant's fair share of the slots is weighted the
	// same way. Zero means 1. Negative, NaN, infinite or above MaxWeight
	// is an error.
	Weight float64 `yaml:"weight"`
	// MaxInFlight caps the slots the tenant may hold at once: at the cap its
	// requests queue even while slots are free for others. Zero means no
	// cap. Negative is an error.
	MaxInFlight int `yaml:"max_concurrency"`
	// MaxQueue caps how many queued requests the tenant may hold; past it
	// its newcomers are refused with reason queue_full. Zero means
	// QueueShare's part of Config.MaxQueue, or Config.MaxQueuePerTenant
	// without one. Negative is an error.
	MaxQueue int `yaml:"-"`
	// QueueShare is the fraction of Config.MaxQueue the tenant's queued
	// requests may take, at least one place, when MaxQueue is zero: with
	// several gates (a pool each) it is taken of each gate's own bound.
	// Zero means Config.MaxQueuePerTenant. Outside [0, 1], or with
	// MaxQueue, is an error.
	QueueShare float64 `yaml:"queue_share"`
}

// MaxWeight bounds a tenant's weight: beyond a million to one, shares are
// below the resolution of any cost estimate.
const MaxWeight = 1e6

// MaxConcurrency is the largest concurrency a configuration file may give,
// a gate's or a tenant's cap (Validate): no provider grants more to one
// key, and each slot is a goroutine and a connection.
const MaxConcurrency = 100_000

// IsZero reports whether tc leaves everything to the defaults.
func (tc TenantShare) IsZero() bool { return tc == TenantShare{} }

// Validate checks tc as written in a configuration file, naming the first
// bad key by its YAML name (a *yamlpath.FieldError relative to the
// tenant): weight 0 to MaxWeight, max_concurrency 0 to MaxConcurrency,
// queue_share 0 to 1.
func (tc TenantShare) Validate() error {
	switch {
	case !(tc.Weight >= 0 && tc.Weight <= MaxWeight):
		return yamlpath.Errorf("weight", "%v is out of range, want 0 (for 1) to %g", tc.Weight, float64(MaxWeight))
	case tc.MaxInFlight < 0 || tc.MaxInFlight > MaxConcurrency:
		return yamlpath.Errorf("max_concurrency", "%d is out of range, want 0 (no cap) to %d", tc.MaxInFlight, MaxConcurrency)
	case !(tc.QueueShare >= 0 && tc.QueueShare <= 1):
		return yamlpath.Errorf("queue_share", "%v is out of range, want 0 (for max_queue_per_tenant) to 1", tc.QueueShare)
	}
	return nil
}

func (tc TenantShare) validate(name string) error {
	switch {
	case math.IsNaN(tc.Weight) || tc.Weight < 0 || tc.Weight > MaxWeight:
		return fmt.Errorf("admission: Config.Tenants[%q].Weight = %v, want 0..%g", name, tc.Weight, MaxWeight)
	case tc.MaxInFlight < 0:
		return fmt.Errorf("admission: Config.Tenants[%q].MaxInFlight = %d, want ≥ 0", name, tc.MaxInFlight)
	case tc.MaxQueue < 0:
		return fmt.Errorf("admission: Config.Tenants[%q].MaxQueue = %d, want ≥ 0", name, tc.MaxQueue)
	case math.IsNaN(tc.QueueShare) || tc.QueueShare < 0 || tc.QueueShare > 1:
		return fmt.Errorf("admission: Config.Tenants[%q].QueueShare = %v, want 0..1", name, tc.QueueShare)
	case tc.QueueShare > 0 && tc.MaxQueue > 0:
		return fmt.Errorf("admission: Config.Tenants[%q] has both MaxQueue and QueueShare", name)
	}
	return nil
}

// WaitEstimator is the statistic of service time used to convert queued work
// into an estimated wait.
type WaitEstimator uint8

const (
	// ByMean divides queued work by concurrency / mean service time.
	ByMean WaitEstimator = iota
	// ByMedian divides by concurrency / median (p50) service time.
	ByMedian
)

func (w WaitEstimator) String() string {
	switch w {
	case ByMean:
		return "mean"
	case ByMedian:
		return "median"
	}
	return fmt.Sprintf("WaitEstimator(%d)", uint8(w))
}

// Ranks decides the order in which work is shed: higher ranks are served first
// and shed last. A request's rank is the rank of its class, capped at Retry
// for retries and at LowTier for low-tier or over-quota tenants, and lifted by
// HighTierBoost for first attempts of high-tier tenants whose class ranks at
// least HighTierMin. Ranks run from 0 to MaxRanks-1.
type Ranks struct {
	// Classes maps a class name to its rank. It must not be empty.
	Classes map[string]int
	// Default is the class of a request that names none.
	Default string
	// Retry is the highest rank a retry (Attempt ≥ 1) can have.
	Retry int
	// LowTier is the highest rank a low-tier or over-quota request can have.
	LowTier int
	// HighTierBoost is added to the rank of a high-tier tenant's first
	// attempts whose class rank is at least HighTierMin.
	HighTierBoost int
	HighTierMin   int

	list []classRank // Classes as a list, made by clone
}

type classRank struct {
	name string
	rank int
}

// DefaultRanks returns the default shed order, first shed to last:
// speculative (0) → retries (1) → low-tier or over-quota tenants (2) → batch
// (3) → interactive (4) → interactive from high-tier tenants (5). A high-tier
// tenant's first batch attempt ranks 4, with standard interactive work.
func DefaultRanks() *Ranks {
	return &Ranks{
		Classes: map[string]int{
			ClassSpeculative: 0,
			ClassBatch:       3,
			ClassInteractive: 4,
		},
		Default:       ClassInteractive,
		Retry:         1,
		LowTier:       2,
		HighTierBoost: 1,
		HighTierMin:   3,
	}
}

// Count is the number of ranks in use: one more than the highest rank any
// request can get.
func (r *Ranks) Count() int {
	top := max(r.Retry, r.LowTier)
	for _, v := range r.Classes {
		top = max(top, v)
		if v >= r.HighTierMin {
			top = max(top, v+r.HighTierBoost)
		}
	}
	return top + 1
}

// Rank returns the rank of req, or an error when its class is unknown or its
// attempt number negative.
func (r *Ranks) Rank(req *Request) (int, error) {
	class := req.Class
	if class == "" {
		class = r.Default
	}
	rank, ok := r.classRank(class)
	if !ok {
		return 0, fmt.Errorf("admission: unknown priority class %q", req.Class)
	}
	if req.Attempt < 0 {
		return 0, fmt.Errorf("admission: negative attempt %d", req.Attempt)
	}
	if req.Attempt > 0 {
		rank = min(rank, r.Retry)
	}
	if req.Tier == TierLow || req.OverQuota {
		rank = min(rank, r.LowTier)
	} else if req.Tier == TierHigh && req.Attempt == 0 && rank >= r.HighTierMin {
		rank += r.HighTierBoost
	}
	return rank, nil
}

// classRank looks the class up in the list made by clone: a handful of
// string comparisons beat hashing on the admission path.
func (r *Ranks) classRank(class string) (int, bool) {
	if r.list == nil {
		v, ok := r.Classes[class]
		return v, ok
	}
	for i := range r.list {
		if r.list[i].name == class {
			return r.list[i].rank, true
		}
	}
	return 0, false
}

func (r *Ranks) validate() error {
	if len(r.Classes) == 0 {
		return errors.New("admission: Ranks.Classes is empty")
	}
	if _, ok := r.Classes[r.Default]; !ok {
		return fmt.Errorf("admission: Ranks.Default %q is not in Ranks.Classes", r.Default)
	}
	check := func(name string, v int) error {
		if v < 0 || v >= MaxRanks {
			return fmt.Errorf("admission: %s = %d, want 0..%d", name, v, MaxRanks-1)
		}
		return nil
	}
	for name, v := range r.Classes {
		if name == "" {
			return errors.New("admission: Ranks.Classes has an empty class name")
		}
		if err := check(fmt.Sprintf("Ranks.Classes[%q]", name), v); err != nil {
			return err
		}
	}
	if err := check("Ranks.Retry", r.Retry); err != nil {
		return err
	}
	if err := check("Ranks.LowTier", r.LowTier); err != nil {
		return err
	}
	if r.HighTierBoost < 0 {
		return fmt.Errorf("admission: Ranks.HighTierBoost = %d, want ≥ 0", r.HighTierBoost)
	}
	if n := r.Count(); n > MaxRanks {
		return fmt.Errorf("admission: Ranks.HighTierBoost = %d lifts a rank past %d", r.HighTierBoost, MaxRanks-1)
	}
	return nil
}

// clone copies r so that a caller mutating its Ranks after New cannot change
// a running gate.
func (r *Ranks) clone() *Ranks {
	c := *r
	c.Classes = make(map[string]int, len(r.Classes))
	c.list = make([]classRank, 0, len(r.Classes))
	for k, v := range r.Classes {
		c.Classes[k] = v
		c.list = append(c.list, classRank{k, v})
	}
	return &c
}

// normalize validates cfg and fills in the documented defaults.
// Validate checks the configuration as NewCore and New would, naming the
// first invalid field.
func (cfg Config) Validate() error {
	_, err := cfg.normalize()
	return err
}

func (cfg Config) normalize() (Config, error) {
	switch {
	case cfg.Concurrency < 1:
		return cfg, fmt.Errorf("admission: Config.Concurrency = %d, want ≥ 1", cfg.Concurrency)
	case cfg.MaxQueue < 0:
		return cfg, fmt.Errorf("admission: Config.MaxQueue = %d, want ≥ 0", cfg.MaxQueue)
	case cfg.MaxQueuePerTenant < 0:
		return cfg, fmt.Errorf("admission: Config.MaxQueuePerTenant = %d, want ≥ 0", cfg.MaxQueuePerTenant)
	case cfg.WaitEstimator > ByMedian:
		return cfg, fmt.Errorf("admission: Config.WaitEstimator = %d, want ByMean or ByMedian", cfg.WaitEstimator)
	case cfg.ServiceWindow < 0:
		return cfg, fmt.Errorf("admission: Config.ServiceWindow = %d, want ≥ 0", cfg.ServiceWindow)
	case cfg.ServiceWindow > 1<<20:
		return cfg, fmt.Errorf("admission: Config.ServiceWindow = %d, want ≤ %d", cfg.ServiceWindow, 1<<20)
	case cfg.MaxKeys < 0:
		return cfg, fmt.Errorf("admission: Config.MaxKeys = %d, want ≥ 0", cfg.MaxKeys)
	case cfg.InitialServiceTime < 0:
		return cfg, fmt.Errorf("admission: Config.InitialServiceTime = %v, want ≥ 0", cfg.InitialServiceTime)
	case cfg.LIFOTarget < 0:
		return cfg, fmt.Errorf("admission: Config.LIFOTarget = %v, want ≥ 0", cfg.LIFOTarget)
	case cfg.LIFOInterval < 0:
		return cfg, fmt.Errorf("admission: Config.LIFOInterval = %v, want ≥ 0", cfg.LIFOInterval)
	}
	if cfg.Tenants != nil {
		// Copied, like Ranks, so that the caller's map cannot change a
		// running gate.
		tenants := make(map[string]TenantShare, len(cfg.Tenants))
		for name, tc := range cfg.Tenants {
			if err := tc.validate(name); err != nil {
				return cfg, err
			}
			if tc.Weight == 0 {
				tc.Weight = 1
			}
			if tc.QueueShare > 0 {
				// At least one place: a share rounding to nothing would
				// mean the default, not none.
				tc.MaxQueue, tc.QueueShare = max(int(tc.QueueShare*float64(cfg.MaxQueue)), 1), 0
			}
			tenants[name] = tc
		}
		cfg.Tenants = tenants
	}
	if cfg.Ranks == nil {
		cfg.Ranks = DefaultRanks()
	}
	if err := cfg.Ranks.validate(); err != nil {
		return cfg, err
	}
	cfg.Ranks = cfg.Ranks.clone()
	if cfg.ServiceWindow == 0 {
		cfg.ServiceWindow = 256
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 64
	}
	if cfg.MaxShapes == 0 {
		cfg.MaxShapes = 256
	}
	if cfg.LIFOTarget == 0 {
		cfg.LIFOTarget = time.Second
	}
	if cfg.LIFOInterval == 0 {
		cfg.LIFOInterval = time.Second
	}
	return cfg, nil
}
