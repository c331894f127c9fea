package chain

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/yamlpath"
	"github.com/sluicehq/sluice/retrybudget"
)

// RetryConfig is retries: the configuration's `retries:` section, the
// gateway's and the simulator's. It bounds the callers' retries (their
// budgets, and the recognition of retries sent without a header) and the
// shell's own retries of the provider (UpstreamAttempts, UpstreamBackoff:
// the chain grants them from the budget, [Chain.UpstreamRetry], and the
// shell makes them).
type RetryConfig struct {
	// Budget is the budget of all retries, callers' and the shell's own.
	// Zero fields take retrybudget's defaults: 10% of first attempts,
	// plus 10 a second, capped at 100.
	Budget retrybudget.Config `yaml:"budget"`
	// PerTenant is each tenant's own budget for its retries. Zero fields
	// take the same defaults.
	PerTenant retrybudget.Config `yaml:"per_tenant"`
	// Disabled leaves the retry budgets stage out: every retry goes on to
	// the gate, at the retry rank, and [Chain.UpstreamRetry] always
	// refuses, so the shell does not retry the provider.
	Disabled bool `yaml:"disabled"`
	// UpstreamAttempts bounds the shell's calls to the provider for one
	// request, the first included: on a connection failure before
	// anything was sent, a 5xx or a 429, it may call again inside the
	// caller's deadline and the budget. Zero means
	// DefaultUpstreamAttempts; 1 disables them; at most
	// MaxUpstreamAttempts.
	UpstreamAttempts int `yaml:"upstream_attempts"`
	// UpstreamBackoff is the wait before the shell's own retry when the
	// provider gave no Retry-After, doubled at each. Zero means
	// DefaultUpstreamBackoff; at most MaxUpstreamBackoff.
	UpstreamBackoff time.Duration `yaml:"upstream_backoff"`
	// Recognise finds the retries callers send without a retry header
	// (see RecogniseConfig). On unless disabled.
	Recognise RecogniseConfig `yaml:"recognise"`
}

// The shell's own retries of the provider: the defaults and bounds of
// RetryConfig.UpstreamAttempts and UpstreamBackoff. A bound exists so that
// a typo (an extra zero) is an error naming the key, not a storm.
const (
	DefaultUpstreamAttempts = 2
	DefaultUpstreamBackoff  = 100 * time.Millisecond
	MaxUpstreamAttempts     = 10
	MaxUpstreamBackoff      = time.Minute
)

// Validate checks every field, naming the first bad one by its YAML path
// inside the section (budget.ratio, upstream_attempts, ...).
func (r RetryConfig) Validate() error {
	if err := yamlpath.At("budget", r.Budget.Validate()); err != nil {
		return err
	}
	if err := yamlpath.At("per_tenant", r.PerTenant.Validate()); err != nil {
		return err
	}
	if r.UpstreamAttempts < 0 || r.UpstreamAttempts > MaxUpstreamAttempts {
		return yamlpath.Errorf("upstream_attempts", "%d is out of range, want 0..%d", r.UpstreamAttempts, MaxUpstreamAttempts)
	}
	if r.UpstreamBackoff < 0 || r.UpstreamBackoff > MaxUpstreamBackoff {
		return yamlpath.Errorf("upstream_backoff", "%v is out of range, want 0s..%v", r.UpstreamBackoff, MaxUpstreamBackoff)
	}
	return yamlpath.At("recognise", r.Recognise.Validate())
}

// Upstream returns the shell's own retries of the provider, the defaults
// filled in: how many calls at most, and the first backoff.
func (r RetryConfig) Upstream() (attempts int, backoff time.Duration) {
	attempts, backoff = r.UpstreamAttempts, r.UpstreamBackoff
	if attempts == 0 {
		attempts = DefaultUpstreamAttempts
	}
	if backoff == 0 {
		backoff = DefaultUpstreamBackoff
	}
	return attempts, backoff
}

// retries is the retry budgets stage: a first attempt deposits into its
// tenant's budget and the global one; a retry withdraws from both, or is
// refused with 429 retry_budget and the time until a token accrues.
type retries struct {
	global    *retrybudget.Budget
	perTenant retrybudget.Config
	mu        sync.Mutex
	tenant    map[string]*retrybudget.Budget
}

func newRetries(cfg RetryConfig) (*retries, error) {
	if cfg.Disabled {
		return nil, nil
	}
	g, err := retrybudget.New(cfg.Budget)
	if err != nil {
		return nil, err
	}
	if _, err := retrybudget.New(cfg.PerTenant); err != nil {
		return nil, err
	}
	return &retries{global: g, perTenant: cfg.PerTenant, tenant: map[string]*retrybudget.Budget{}}, nil
}

// forTenant returns the tenant's budget. Tenants are the configured ones,
// the anonymous one, or those a trusted shell names, so the map stays as
// bounded as they are.
func (b *retries) forTenant(name string) *retrybudget.Budget {
	b.mu.Lock()
	defer b.mu.Unlock()
	rb := b.tenant[name]
	if rb == nil {
		rb, _ = retrybudget.New(b.perTenant) // validated in newRetries
		b.tenant[name] = rb
	}
	return rb
}

// Admit books the call. The token a retry spends is not given back if a
// later stage refuses it: the retry was made, and counting it is what keeps
// a storm of refused retries from retrying without bound.
//
// A retry the recognise stage inferred (RetrySeen) that finds no token is
// not refused here: it goes on, marked, and the gate gives it a slot only
// if one is free now with nobody waiting, refusing it for its budget
// otherwise. Recognition is a guess — the copy may be another caller's
// first attempt of a popular prompt — so what it decides may rank a call
// below every first attempt and keep it out of the queue, but never leave
// a slot idle that the call could have used. A declared retry is what its
// caller said, and the budget refuses it outright: that is what stops a
// storm of retries of a failing provider even while slots are free.
func (b *retries) Admit(now time.Time, r *Request) (Hold, error) {
	tb := b.forTenant(r.Tenant)
	if r.Attempt == 0 {
		tb.Deposit(now)
		b.global.Deposit(now)
		return nil, nil
	}
	var rej *admission.Rejection
	if !tb.TryWithdraw(now) {
		rej = refusal(tb, tb.RetryAfter(now))
	} else if !b.global.TryWithdraw(now) {
		tb.Refund(now) // this retry is not sent: its tenant keeps the token
		rej = refusal(b.global, b.global.RetryAfter(now))
	}
	if rej != nil && r.RetrySeen {
		r.overRetryBudget = rej
		return nil, nil
	}
	if rej != nil {
		return nil, rej
	}
	return nil, nil
}

// refusal is a retry refused by budget rb, which has a token again after
// retryAfter. Callers refused together are spread one token of the
// budget's floor apart: the refill it is certain of (deposits only come
// sooner).
func refusal(rb *retrybudget.Budget, retryAfter time.Duration) *admission.Rejection {
	return &admission.Rejection{Reason: admission.ReasonRetryBudget, RetryAfter: max(retryAfter, time.Millisecond),
		Interval: time.Duration(float64(time.Second) / rb.Config().MinPerSecond)}
}
