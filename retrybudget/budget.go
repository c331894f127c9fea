package retrybudget

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/yamlpath"
)

// Defaults applied to zero fields of Config.
const (
	// DefaultRatio is the share of first attempts that may be retried: the
	// client-side retry budget of Google's SRE book allows retries up to 10% of
	// requests.
	DefaultRatio = 0.1
	// DefaultMinPerSecond is the floor, in retries per second, that a caller
	// earns whatever its traffic. It matches Finagle's RetryBudget default.
	DefaultMinPerSecond = 10
	// DefaultCapSeconds is how many seconds of the floor the balance can hold
	// when MaxTokens is zero. Ten seconds matches the window over which
	// Finagle's budget remembers deposits.
	DefaultCapSeconds = 10
)

// unit is the number of fixed-point units in one token. Deposits of ratios
// written in decimal (0.1, 0.05, 0.2) are whole numbers of units, so they add
// up to whole tokens exactly, which float64 arithmetic does not do.
const unit = 1_000_000_000

// maxTokens keeps MaxTokens×unit inside an int64 with room for one deposit.
const maxTokens = 9e9

// Config configures a Budget. The zero Config is valid and gives the defaults.
// It is also the YAML of a retry budget in sluice's configurations (the
// gateway's retries.budget and retries.per_tenant, a scenario's
// sluice.retries): see Validate for the bounds a file is held to.
type Config struct {
	// Ratio is the fraction of a token each first attempt deposits, so the
	// long-run share of retries to first attempts (above the floor). It must be
	// in (0, 1]: more than one retry per first attempt would let retries
	// outgrow the traffic they are retrying. Zero means DefaultRatio (0.1).
	Ratio float64 `yaml:"ratio"`

	// MinPerSecond is the rate, in tokens per second, at which the balance
	// grows with time alone, so that a caller too quiet to earn tokens by the
	// ratio can still retry. It must not be negative. Zero means
	// DefaultMinPerSecond (10). The floor cannot be switched off; a tiny value
	// such as 0.001 makes it negligible.
	MinPerSecond float64 `yaml:"min_per_second"`

	// MaxTokens caps the balance, which bounds the burst of retries a quiet
	// period can bank. It must be at least 1 (a smaller cap could never pay
	// for a retry) and at most 9e9. Zero means DefaultCapSeconds seconds of
	// the floor, MinPerSecond×10 (100 with the defaults), and at least 1.
	MaxTokens float64 `yaml:"max_tokens"`
}

// The largest values a configuration file may give (Validate): an extra
// zero or a value in the wrong unit is an error naming its key rather than
// a budget that is silently no bound.
const (
	MaxFileMinPerSecond = 1e6
	MaxFileTokens       = 1e7
)

// Validate checks c as written in a configuration file, naming the first
// bad key by its YAML name (a *yamlpath.FieldError relative to the
// budget's section): ratio in [0, 1], min_per_second at most 1e6,
// max_tokens at most 1e7, and whatever New would refuse.
func (c Config) Validate() error {
	for _, f := range []struct {
		key   string
		v, hi float64
	}{{"ratio", c.Ratio, 1}, {"min_per_second", c.MinPerSecond, MaxFileMinPerSecond}, {"max_tokens", c.MaxTokens, MaxFileTokens}} {
		if !(f.v >= 0 && f.v <= f.hi) {
			return yamlpath.Errorf(f.key, "%v is out of range, want %v..%v", f.v, 0, f.hi)
		}
	}
	if _, err := c.withDefaults(); err != nil {
		return yamlpath.Errorf("", "%v", err)
	}
	return nil
}

// withDefaults validates c and returns it with zero fields resolved.
func (c Config) withDefaults() (Config, error) {
	switch {
	case math.IsNaN(c.Ratio) || c.Ratio < 0 || c.Ratio > 1:
		return c, fmt.Errorf("retrybudget: Ratio must be in (0, 1] (or 0 for the default %v), got %v", DefaultRatio, c.Ratio)
	case c.Ratio == 0:
		c.Ratio = DefaultRatio
	case c.Ratio*unit < 1:
		return c, fmt.Errorf("retrybudget: Ratio %v is below 1e-9, the resolution of the balance", c.Ratio)
	}
	switch {
	case math.IsNaN(c.MinPerSecond) || math.IsInf(c.MinPerSecond, 0) || c.MinPerSecond < 0:
		return c, fmt.Errorf("retrybudget: MinPerSecond must be a finite number >= 0 (0 for the default %v), got %v", DefaultMinPerSecond, c.MinPerSecond)
	case c.MinPerSecond == 0:
		c.MinPerSecond = DefaultMinPerSecond
	}
	switch {
	case math.IsNaN(c.MaxTokens) || c.MaxTokens < 0:
		return c, fmt.Errorf("retrybudget: MaxTokens must be >= 1 (or 0 for the default), got %v", c.MaxTokens)
	case c.MaxTokens == 0:
		c.MaxTokens = max(1, math.Min(c.MinPerSecond*DefaultCapSeconds, maxTokens))
	case c.MaxTokens < 1:
		return c, fmt.Errorf("retrybudget: MaxTokens must be >= 1, since a retry costs one token; got %v", c.MaxTokens)
	case c.MaxTokens > maxTokens:
		return c, fmt.Errorf("retrybudget: MaxTokens must be <= %v, got %v", maxTokens, c.MaxTokens)
	}
	return c, nil
}

// Stats counts what a Budget has been asked since it was made.
type Stats struct {
	Deposits    uint64 // first attempts reported with Deposit
	Withdrawals uint64 // retries allowed by TryWithdraw
	Refusals    uint64 // retries refused by TryWithdraw
}

// Budget is a retry budget: first attempts and the passage of time earn
// tokens, each retry spends one. See the package documentation for the model.
//
// The balance starts empty at the first time the Budget is given, and grows
// from there. Starting empty is deliberate: a process restart is the moment
// most likely to coincide with an incident, and it should not come with a
// banked burst of retries. With the defaults a caller earns its first retry
// 100ms after its first request, and the floor fills the cap in ten seconds.
//
// Times need not be monotonic across calls: a now earlier than one already
// seen (two goroutines that read the clock, then raced for the lock) earns
// nothing and is otherwise treated as the latest time seen.
//
// A Budget is safe for concurrent use.
type Budget struct {
	// The configuration and its units are read and, by Reconfigure,
	// written under mu.
	cfg        Config
	perDeposit int64   // units deposited by each first attempt
	perNano    float64 // units earned per nanosecond: MinPerSecond×unit/1e9
	capUnits   int64

	// A mutex rather than atomics: the critical section is a handful of
	// arithmetic operations, and one lock keeps the balance, the clock and the
	// counters consistent with each other, which the concurrency test checks.
	mu struct {
		sync.Mutex
		started bool
		last    time.Time // latest time seen; accrual is counted from here
		tokens  int64     // balance in units, 0 <= tokens <= capUnits
		frac    float64   // accrued fraction of a unit not yet credited, in [0, 1)
		stats   Stats
	}
}

// New returns a Budget configured by cfg, or an error naming the invalid field.
func New(cfg Config) (*Budget, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Budget{
		cfg:        cfg,
		perDeposit: int64(math.Round(cfg.Ratio * unit)),
		perNano:    cfg.MinPerSecond * unit / float64(time.Second),
		capUnits:   int64(math.Round(cfg.MaxTokens * unit)),
	}, nil
}

// Config returns the configuration in effect, with defaults filled in.
func (b *Budget) Config() Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg
}

// Deposit records a first attempt made at now, earning Ratio of a token.
func (b *Budget) Deposit(now time.Time) {
	b.mu.Lock()
	b.advanceLocked(now)
	b.mu.tokens = min(b.capUnits, b.mu.tokens+b.perDeposit)
	b.mu.stats.Deposits++
	b.mu.Unlock()
}

// TryWithdraw reports whether a retry may be sent at now. If it may, one token
// is spent; if not, the refusal is counted and the balance is unchanged.
func (b *Budget) TryWithdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	if b.mu.tokens >= unit {
		b.mu.tokens -= unit
		b.mu.stats.Withdrawals++
		return true
	}
	b.mu.stats.Refusals++
	return false
}

// Refund gives back the token of a withdrawal whose retry was not sent after
// all — for example because a second budget, checked after this one, refused
// it. The balance stays capped, and the withdrawal is no longer counted.
func (b *Budget) Refund(now time.Time) {
	b.mu.Lock()
	b.advanceLocked(now)
	b.mu.tokens = min(b.capUnits, b.mu.tokens+unit)
	if b.mu.stats.Withdrawals > 0 {
		b.mu.stats.Withdrawals--
	}
	b.mu.Unlock()
}

// RetryAfter returns how long after now a token will be available: zero if
// one is available at now, and more than zero otherwise.
//
// Only the floor (MinPerSecond) is counted on. Deposits depend on first
// attempts that have not happened yet and may never happen (a caller that is
// only retrying makes none), so counting on them could promise a token that
// never comes. The floor is certain, so the answer is an upper bound: deposits
// in the meantime can only make a token available sooner, never later. A
// caller that waits RetryAfter(now) and then calls TryWithdraw succeeds unless
// someone else spent the token first.
func (b *Budget) RetryAfter(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	need := unit - b.mu.tokens
	if need <= 0 {
		return 0
	}
	return b.waitFor(need, b.mu.frac)
}

// waitFor is how long the floor takes to accrue need units on top of frac.
func (b *Budget) waitFor(need int64, frac float64) time.Duration {
	// Rounding up makes the promise hold: after d nanoseconds the accrual
	// d×perNano + frac is at least need, and need is a whole number of units.
	d := math.Ceil((float64(need) - frac) / b.perNano)
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return max(time.Duration(d), 1)
}

// Balance returns the number of tokens available at now: how many retries
// could be sent at once.
func (b *Budget) Balance(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return float64(b.mu.tokens) / unit
}

// Stats returns the counts of deposits, withdrawals and refusals so far.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.stats
}

// Peek answers what TryWithdraw and RetryAfter would at now — whether a
// retry could be sent, and if not how long until one could — without
// spending, counting or moving the budget's clock: an estimate asked any
// number of times leaves the budget as it was.
func (b *Budget) Peek(now time.Time) (ok bool, retryAfter time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens, frac := b.mu.tokens, b.mu.frac
	if b.mu.started && now.After(b.mu.last) {
		tokens, frac = b.accrued(now.Sub(b.mu.last))
	}
	if tokens >= unit {
		return true, 0
	}
	return false, b.waitFor(unit-tokens, frac)
}

// advanceLocked credits the floor's accrual from the latest time seen to now.
// The caller holds b.mu.
func (b *Budget) advanceLocked(now time.Time) {
	if !b.mu.started {
		b.mu.started = true
		b.mu.last = now
		return
	}
	if !now.After(b.mu.last) {
		return
	}
	elapsed := now.Sub(b.mu.last) // saturates rather than overflows
	b.mu.last = now
	b.mu.tokens, b.mu.frac = b.accrued(elapsed)
}

// accrued is the balance and fraction the floor's accrual over elapsed
// brings the current ones to, without storing them. The caller holds b.mu.
func (b *Budget) accrued(elapsed time.Duration) (tokens int64, frac float64) {
	room := b.capUnits - b.mu.tokens
	if room <= 0 {
		return b.mu.tokens, 0
	}
	// The fraction of a unit is carried over so that a budget consulted very
	// often (more often than once per unit of accrual) still earns the floor
	// in full instead of losing a rounding error on every call.
	earned := float64(elapsed)*b.perNano + b.mu.frac
	if earned >= float64(room) {
		return b.capUnits, 0
	}
	whole := math.Floor(earned)
	return b.mu.tokens + int64(whole), earned - whole
}
