package client

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/retrybudget"
)

// TestRetrierNext drives a Retrier in virtual time: every case makes a
// first attempt at t0 (depositing 0.1 of a token into a budget whose floor
// earns 10 a second) and asks Next about its failure at t0+at.
func TestRetrierNext(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		cfg      Config
		at       time.Duration // when the attempt failed, after t0
		f        Failure
		wantWait time.Duration
		wantStop GiveUp
	}{
		// Backoff bounds with a fixed draw: DefaultBackoff (200ms) doubled
		// per retry, drawn from its upper half.
		{name: "backoff, low draw", at: time.Second, f: Failure{U: 0}, wantWait: 100 * ms},
		{name: "backoff, middle draw", at: time.Second, f: Failure{U: 0.5}, wantWait: 150 * ms},
		{name: "backoff doubles", cfg: Config{MaxAttempts: 5}, at: time.Second, f: Failure{Attempt: 2, U: 0.75}, wantWait: 700 * ms},
		{name: "backoff capped by MaxRetryDelay", cfg: Config{MaxAttempts: 5, Backoff: 40 * time.Second}, at: time.Second,
			f: Failure{Attempt: 1, U: 0}, wantWait: 30 * time.Second},
		{name: "server delay replaces backoff", at: time.Second, f: Failure{RetryAfter: 3 * time.Second, HasRetryAfter: true, U: 0.5},
			wantWait: 3 * time.Second},

		// The retry budget is charged at the time the retry will be sent:
		// 0.1 + 0.6 tokens 60ms after the first attempt are not enough,
		// 0.1 + 1.0 after 100ms are.
		{name: "budget short at send time", at: 10 * ms, f: Failure{RetryAfter: 50 * ms, HasRetryAfter: true}, wantStop: GaveUpRetryBudget},
		{name: "budget charged at send time", at: 0, f: Failure{RetryAfter: 100 * ms, HasRetryAfter: true}, wantWait: 100 * ms},

		// The retry must start before the deadline.
		{name: "retry at the deadline", at: time.Second, f: Failure{Deadline: t0.Add(2 * time.Second), RetryAfter: time.Second, HasRetryAfter: true},
			wantStop: GaveUpDeadline},
		{name: "retry just before the deadline", at: time.Second, f: Failure{Deadline: t0.Add(2*time.Second + 1), RetryAfter: time.Second, HasRetryAfter: true},
			wantWait: time.Second},
		{name: "backoff past the deadline", at: time.Second, f: Failure{Deadline: t0.Add(time.Second + 100*ms), U: 0}, wantStop: GaveUpDeadline},

		{name: "last attempt", at: time.Second, f: Failure{Attempt: 2}, wantStop: GaveUpMaxAttempts},
		{name: "one attempt only", cfg: Config{MaxAttempts: 1}, at: time.Second, f: Failure{}, wantStop: GaveUpMaxAttempts},
		{name: "server delay over MaxRetryDelay", at: time.Second, f: Failure{RetryAfter: time.Minute + 1, HasRetryAfter: true},
			wantStop: GaveUpMaxDelay},
		{name: "server delay at MaxRetryDelay", cfg: Config{MaxRetryDelay: 5 * time.Second}, at: time.Second,
			f: Failure{RetryAfter: 5 * time.Second, HasRetryAfter: true}, wantWait: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRetrier(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Begin(t0, 0) {
				t.Fatal("first attempt refused without throttling")
			}
			wait, stop := r.Next(t0.Add(tt.at), tt.f)
			if wait != tt.wantWait || stop != tt.wantStop {
				t.Errorf("Next = %v, %q; want %v, %q", wait, stop, tt.wantWait, tt.wantStop)
			}
		})
	}
}

// TestRetrierThrottle: with K=2 and n rejections observed, Begin refuses
// with probability n/(n+1): a draw below it is refused, one at it is not.
// Allow applies the same throttle to later attempts, and a refusal counts
// as a request that was not accepted.
func TestRetrierThrottle(t *testing.T) {
	tests := []struct {
		name               string
		rejected, accepted int
		u                  float64
		retry, wantAllowed bool
	}{
		{name: "healthy", accepted: 10, u: 0, wantAllowed: true},
		{name: "half rejected: at the threshold", rejected: 5, accepted: 5, u: 0, wantAllowed: true},
		{name: "3 of 3 rejected, draw below 3/4", rejected: 3, u: 0.74, wantAllowed: false},
		{name: "3 of 3 rejected, draw at 3/4", rejected: 3, u: 0.75, wantAllowed: true},
		{name: "retry, draw below", rejected: 3, u: 0.74, retry: true, wantAllowed: false},
		{name: "retry, draw at", rejected: 3, u: 0.75, retry: true, wantAllowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRetrier(Config{ThrottleK: 2})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.rejected + tt.accepted {
				r.Observe(t0, i >= tt.rejected)
			}
			check := r.Begin
			if tt.retry {
				check = r.Allow
			}
			if got := check(t0, tt.u); got != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v", got, tt.wantAllowed)
			}
			// Refused or sent-and-rejected, the attempt was one more request
			// without an accept: the probability rises to (n+1)/(n+2).
			if !tt.wantAllowed {
				n := float64(tt.rejected + 1)
				// An allowed attempt is not counted until it is observed.
				if !r.Begin(t0, n/(n+1)) || r.Begin(t0, n/(n+1)-1e-9) {
					t.Errorf("after a refusal the probability is not %v/%v", n, n+1)
				}
			}
		})
	}
}

// TestRetrierBeginDepositsAllowDoesNot: only a first attempt earns the
// budget; an attempt the throttle refuses earns nothing.
func TestRetrierBeginDepositsAllowDoesNot(t *testing.T) {
	budget, err := retrybudget.New(retrybudget.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRetrier(Config{ThrottleK: 2, RetryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	r.Allow(t0, 0)
	r.Observe(t0, false) // throttle p = 1/2 from here
	r.Begin(t0, 0)       // refused
	if got := budget.Stats().Deposits; got != 0 {
		t.Fatalf("deposits after Allow and a refused Begin: %d, want 0", got)
	}
	r.Begin(t0, 0.99)
	if got := budget.Stats().Deposits; got != 1 {
		t.Fatalf("deposits after an allowed Begin: %d, want 1", got)
	}
}

func TestNewRetrierNamesTheInvalidField(t *testing.T) {
	for field, cfg := range map[string]Config{"MaxAttempts": {MaxAttempts: -1}, "ThrottleK": {ThrottleK: 0.5}, "Backoff": {Backoff: -1}} {
		if _, err := NewRetrier(cfg); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("NewRetrier with a bad %s: error %v, want one naming it", field, err)
		}
	}
}
