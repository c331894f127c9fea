package sim

import (
	"time"

	"github.com/sluicehq/sluice/retrybudget"
)

// The three caller behaviours, in the vocabulary of package loadgen:
//
//   - naive: the client most SDKs ship. Each attempt gets a fixed timeout
//     (half the class deadline unless set), and every failure — rejection
//     or timeout — is retried at once, ignoring Retry-After and the
//     deadline, up to MaxAttempts. Its third attempt runs past the deadline.
//   - polite: loadgen.Polite. Each attempt gets the time left until the
//     deadline; a failure is retried after the server's Retry-After (else
//     100ms doubling), only if the retry starts before the deadline.
//   - client: sluice's client package as loadgen's "client" policy uses
//     it (client.Config{ThrottleK: 2}): like polite, but only rejections
//     (429/503) are retried, Retry-After is capped at a minute, backoff
//     without Retry-After is 200ms doubling with jitter, every retry must
//     take a token from a client-side retry budget (the real
//     retrybudget.Budget, one per tenant), and the client throttles itself
//     adaptively as the SRE book describes.
//
// The engine implements naive and polite inline (see engine.failed); the
// client's state lives here.

// Constants of package client's defaults, as loadgen's client policy runs it.
const (
	clientBackoff       = 200 * time.Millisecond
	clientMaxRetryDelay = time.Minute
	throttleK           = 2.0
	throttleWindow      = 2 * time.Minute
	throttleBuckets     = 60
)

// caller is one process's sluice client: its retry budget and throttle.
type caller struct {
	budget   *retrybudget.Budget
	throttle throttle
}

func newCaller() (*caller, error) {
	b, err := retrybudget.New(retrybudget.Config{})
	if err != nil {
		return nil, err
	}
	return &caller{budget: b, throttle: throttle{width: throttleWindow / throttleBuckets}}, nil
}

// allow is the client's check before each attempt: the adaptive throttle,
// then, for a first attempt, a deposit into the retry budget.
func (cl *caller) allow(e *engine, c *call) bool {
	u := uniform(e.s.seed, saltJitter, c.seq, uint64(c.sent)|1<<32)
	if !cl.throttle.admit(e.now, u) {
		e.m.throttled++
		return false
	}
	if c.sent == 0 {
		cl.budget.Deposit(e.s.at(e.now))
	}
	return true
}

// observe counts an attempt's answer for the throttle: accepted unless it
// was a rejection. Attempts the caller gave up on are not counted.
func (cl *caller) observe(now time.Duration, accepted bool) { cl.throttle.observe(now, accepted) }

// retry decides whether the client retries the failed attempt a, and after
// how long: only rejections, only if the retry starts before the deadline,
// and only with a token of the retry budget, charged at the time the retry
// will be sent.
func (cl *caller) retry(e *engine, c *call, a *attempt, why refusal, retryAfter time.Duration, hasRA bool) (time.Duration, bool) {
	if why == refTimeout {
		return 0, false // its attempt timeout is the deadline: nothing left to retry in
	}
	wait := retryAfter
	if !hasRA {
		wait = clientBackoffFor(int(a.n), uniform(e.s.seed, saltJitter, c.seq, uint64(a.n)))
	} else if wait > clientMaxRetryDelay {
		return 0, false
	}
	if e.now+wait >= c.deadline {
		return 0, false
	}
	if !cl.budget.TryWithdraw(e.s.at(e.now + wait)) {
		e.m.clientBudget++
		return 0, false
	}
	return wait, true
}

// clientBackoffFor is package client's backoff: Backoff doubled per retry,
// capped at MaxRetryDelay, drawn from the upper half.
func clientBackoffFor(n int, u float64) time.Duration {
	d := clientBackoff
	for range n {
		if d >= clientMaxRetryDelay/2 {
			d = clientMaxRetryDelay
			break
		}
		d *= 2
	}
	d = min(d, clientMaxRetryDelay)
	return d/2 + time.Duration(u*float64(d/2))
}

// throttle is package client's adaptive throttling rule, restated over
// virtual time: refuse locally with probability
// max(0, (requests − K×accepts) / (requests + 1)) over a rolling window.
type throttle struct {
	width   time.Duration
	buckets [throttleBuckets]struct {
		idx               int64
		requests, accepts int64
	}
}

func (t *throttle) probability(cur int64) float64 {
	var req, acc int64
	for _, b := range t.buckets {
		if b.idx > cur-throttleBuckets && b.idx <= cur {
			req += b.requests
			acc += b.accepts
		}
	}
	return max(0, (float64(req)-throttleK*float64(acc))/float64(req+1))
}

func (t *throttle) admit(now time.Duration, u float64) bool {
	cur := int64(now / t.width)
	if u >= t.probability(cur) {
		return true
	}
	t.count(cur, false)
	return false
}

func (t *throttle) observe(now time.Duration, accepted bool) { t.count(int64(now/t.width), accepted) }

func (t *throttle) count(cur int64, accepted bool) {
	b := &t.buckets[cur%throttleBuckets]
	if b.idx != cur {
		b.idx, b.requests, b.accepts = cur, 0, 0
	}
	b.requests++
	if accepted {
		b.accepts++
	}
}
