package sim

import (
	"time"

	"github.com/sluicehq/sluice/client"
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
//     it (client.Config{ThrottleK: client.DefaultThrottleK}): like polite,
//     but only rejections (429/503) are retried, a long Retry-After ends the
//     request, backoff without Retry-After is jittered, every retry must
//     take a token from a client-side retry budget, and the client
//     throttles itself adaptively as the SRE book describes. All of that is
//     the client's own client.Retrier, one per tenant, driven in virtual
//     time: the simulator measures the discipline that ships.
//
// The engine implements naive and polite inline (see engine.failed); the
// client's state lives in a client.Retrier.

// caller is one process's sluice client: its retry budget and throttle, in
// the client package's Retrier.
type caller struct {
	r *client.Retrier
}

// newCaller returns the client of a tenant whose requests may each make up
// to maxAttempts attempts (zero for the client's default).
func newCaller(maxAttempts int) (*caller, error) {
	r, err := client.NewRetrier(client.Config{MaxAttempts: maxAttempts, ThrottleK: client.DefaultThrottleK})
	if err != nil {
		return nil, err
	}
	return &caller{r: r}, nil
}

// allow is the client's check before each attempt: the adaptive throttle,
// then, for a first attempt, a deposit into the retry budget.
func (cl *caller) allow(e *engine, c *call) bool {
	u := uniform(e.s.seed, saltJitter, c.seq, uint64(c.sent)|1<<32)
	check := cl.r.Allow // a retry took its budget token when it was decided
	if c.sent == 0 {
		check = cl.r.Begin
	}
	if !check(e.s.at(e.now), u) {
		e.m.throttled++
		return false
	}
	return true
}

// observe counts an attempt's answer for the throttle: accepted unless it
// was a rejection. Attempts the caller gave up on are not counted.
func (cl *caller) observe(e *engine, accepted bool) { cl.r.Observe(e.s.at(e.now), accepted) }

// retry decides whether the client retries the failed attempt a, and after
// how long, by the Retrier's rules (see client.Retrier.Next).
func (cl *caller) retry(e *engine, c *call, a *attempt, why refusal, retryAfter time.Duration, hasRA bool) (time.Duration, bool) {
	if why == refTimeout {
		return 0, false // its attempt timeout is the deadline: nothing left to retry in
	}
	wait, stop := cl.r.Next(e.s.at(e.now), client.Failure{
		Attempt:       int(a.n),
		Deadline:      e.s.at(c.deadline),
		RetryAfter:    retryAfter,
		HasRetryAfter: hasRA,
		U:             uniform(e.s.seed, saltJitter, c.seq, uint64(a.n)),
	})
	if stop == client.GaveUpRetryBudget {
		e.m.clientBudget++
	}
	return wait, stop == ""
}
