package client

import (
	"time"

	"github.com/sluicehq/sluice/retrybudget"
)

// Retrier is a Client's retry discipline without HTTP and without a clock:
// the adaptive throttle, the retry budget, the backoff and the limits on
// attempts, delay and deadline. Time and the uniform draws are inputs, as
// in rate.Limiter's AllowN(now, n), so that the same code runs under a
// Client in real time and in the simulator in virtual time; a restatement
// of it elsewhere would drift.
//
// A request goes through it as RoundTrip does: Begin before its first
// attempt (Allow before each later one), Observe with each answer, and Next
// after each failed attempt to learn how long to wait before the next, or
// why to stop.
//
// A Retrier is safe for concurrent use; share one between the requests of a
// process, as a Client does.
type Retrier struct {
	maxAttempts int
	maxDelay    time.Duration
	backoff     time.Duration
	budget      *retrybudget.Budget
	throttle    *throttle // nil when throttling is off
}

// NewRetrier returns the Retrier a Client configured by cfg would use, or an
// error naming the invalid field. It reads MaxAttempts, MaxRetryDelay,
// Backoff, RetryBudget, ThrottleK and ThrottleWindow, with the same defaults;
// it never calls cfg.Now or cfg.Rand, since time and draws are its inputs.
func NewRetrier(cfg Config) (*Retrier, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newRetrier(cfg), nil
}

// newRetrier builds a Retrier from a Config whose defaults are resolved.
func newRetrier(cfg Config) *Retrier {
	r := &Retrier{
		maxAttempts: cfg.MaxAttempts,
		maxDelay:    cfg.MaxRetryDelay,
		backoff:     cfg.Backoff,
		budget:      cfg.RetryBudget,
	}
	if cfg.ThrottleK > 0 {
		r.throttle = newThrottle(cfg.ThrottleK, cfg.ThrottleWindow)
	}
	return r
}

// Begin reports whether a request's first attempt may be sent at now: the
// adaptive throttle refuses it when a draw u, uniform in [0, 1), falls below
// its refusal probability. A first attempt that is sent is deposited into
// the retry budget, since first attempts are what earns retries.
func (r *Retrier) Begin(now time.Time, u float64) bool {
	if !r.Allow(now, u) {
		return false
	}
	r.budget.Deposit(now)
	return true
}

// Allow reports whether an attempt other than a request's first may be sent
// at now, by the adaptive throttle alone (see Begin): its retry budget
// token was taken when Next decided to retry. A refused attempt counts, for
// the throttle, as a request that was not accepted. Without throttling it
// always allows.
func (r *Retrier) Allow(now time.Time, u float64) bool {
	return r.throttle == nil || r.throttle.admit(now, u)
}

// Observe counts an attempt answered at now for the throttle: accepted is
// false for a 429 or 503 rejection or a connection error. An attempt whose
// caller stopped waiting is not observed: its answer says nothing about the
// server.
func (r *Retrier) Observe(now time.Time, accepted bool) {
	if r.throttle != nil {
		r.throttle.observe(now, accepted)
	}
}

// Failure is what Next needs to know of a failed attempt.
type Failure struct {
	// Attempt numbers the failed attempt among those made through this
	// Retrier for the request: 0 for the first.
	Attempt int

	// Deadline is when the caller stops waiting for the answer. Zero means
	// no deadline.
	Deadline time.Time

	// RetryAfter is the delay the server asked for, when HasRetryAfter; a
	// connection error, or a rejection without Retry-After, has none, and
	// the wait is a backoff instead.
	RetryAfter    time.Duration
	HasRetryAfter bool

	// U is drawn uniformly from [0, 1) for the backoff's jitter. It is not
	// used when the server gave a delay.
	U float64
}

// Next decides, at now, whether the failed attempt f is retried: wait is
// how long to wait before the retry, or stop says why there is none. The
// checks run in this order: the attempts left (MaxAttempts), a server delay
// longer than MaxRetryDelay, the deadline (the retry must start before it),
// then the retry budget. A retry takes its token from the budget here,
// charged at now+wait, the time it will be sent, so that the budget's
// accrual during the wait counts: a client whose first request is rejected
// within milliseconds of starting has no token yet, but will have one 100ms
// later. The token is spent even if the caller gives up during the wait.
func (r *Retrier) Next(now time.Time, f Failure) (wait time.Duration, stop GiveUp) {
	wait = f.RetryAfter
	if !f.HasRetryAfter {
		wait = r.backoffFor(f.Attempt, f.U)
	}
	switch {
	case f.Attempt+1 >= r.maxAttempts:
		return 0, GaveUpMaxAttempts
	case f.HasRetryAfter && wait > r.maxDelay:
		return 0, GaveUpMaxDelay
	case !f.Deadline.IsZero() && !now.Add(wait).Before(f.Deadline):
		return 0, GaveUpDeadline
	case !r.budget.TryWithdraw(now.Add(wait)):
		return 0, GaveUpRetryBudget
	}
	return wait, ""
}

// backoffFor is the wait before retry number attempt+1 when the server gave
// no delay: Backoff doubled per retry, capped at MaxRetryDelay, drawn from
// the upper half with u so that clients failing together do not retry
// together.
func (r *Retrier) backoffFor(attempt int, u float64) time.Duration {
	d := r.backoff
	for range attempt {
		if d >= r.maxDelay/2 {
			d = r.maxDelay
			break
		}
		d *= 2
	}
	d = min(d, r.maxDelay)
	return d/2 + time.Duration(u*float64(d/2))
}
