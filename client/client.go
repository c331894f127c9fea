package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/retrybudget"
)

// Client is an http.RoundTripper that speaks the sluice contract: deadline,
// priority and attempt headers out, honest retries of rejections back. See
// the package documentation.
//
// A Client is safe for concurrent use.
type Client struct {
	cfg      Config
	throttle *throttle // nil when throttling is off
}

var _ http.RoundTripper = (*Client)(nil)

// New returns a Client configured by cfg, or an error naming the invalid field.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	if cfg.ThrottleK > 0 {
		c.throttle = newThrottle(cfg.ThrottleK, cfg.ThrottleWindow)
	}
	return c, nil
}

// NewHTTPClient returns an *http.Client whose transport is a Client
// configured by cfg; pass it to the OpenAI SDK with option.WithHTTPClient.
func NewHTTPClient(cfg Config) (*http.Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return c.HTTPClient(), nil
}

// HTTPClient returns an *http.Client that sends through c. It sets no
// Timeout: deadlines belong on each request's context, where they become
// X-Sluice-Timeout-Ms.
func (c *Client) HTTPClient() *http.Client { return &http.Client{Transport: c} }

// RetryBudget returns the budget c charges its retries to.
func (c *Client) RetryBudget() *retrybudget.Budget { return c.cfg.RetryBudget }

// RoundTrip sends req, retrying 429 and 503 rejections and connection errors
// when a retry can finish before the context's deadline and the retry budget
// allows it. A request that ends rejected returns a nil response and a
// *RejectedError; every other response, success or not, is returned as it is.
//
// Unlike a plain transport, RoundTrip interprets responses; that is its
// purpose. It does not modify req: each attempt is a clone.
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	closeBody := func() {
		if req.Body != nil {
			req.Body.Close()
		}
	}

	prio := c.cfg.Priority
	if p, ok := PriorityFrom(ctx); ok {
		if err := checkPriority(p); err != nil {
			closeBody()
			return nil, fmt.Errorf("client: priority from WithPriority: %w", err)
		}
		prio = p
	}
	// A caller (or the OpenAI SDK) that retries above this transport says so;
	// the attempt numbers continue from its count, and its retry is charged
	// to the budget like one of ours.
	base, err := c.priorAttempts(req.Header)
	if err != nil {
		closeBody()
		return nil, err
	}
	callerTimeoutMs, hasCallerTimeout, err := headerInt(req.Header, contract.HeaderTimeoutMs)
	if err != nil {
		closeBody()
		return nil, err
	}
	body, err := newReplayable(req, c.cfg.MaxAttempts, c.cfg.MaxBufferedBody)
	if err != nil {
		return nil, err
	}

	if base > 0 && !c.cfg.RetryBudget.TryWithdraw(c.cfg.Now()) {
		body.close()
		return nil, &RejectedError{Reason: ReasonClientRetryBudget, GaveUp: GaveUpRetryBudget}
	}

	var last *RejectedError // the latest rejection by the server
	var lastErr error       // or the latest connection error
	for attempt := 0; ; attempt++ {
		now := c.cfg.Now()
		deadline, hasDeadline := ctx.Deadline()
		if hasDeadline && !now.Before(deadline) {
			body.close()
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, context.DeadlineExceeded
		}
		if c.throttle != nil && !c.throttle.admit(now, c.cfg.Rand()) {
			body.close()
			if attempt == 0 {
				return nil, &RejectedError{Reason: ReasonClientThrottled, GaveUp: GaveUpThrottled}
			}
			return nil, giveUp(last, lastErr, attempt, GaveUpThrottled)
		}
		if attempt == 0 && base == 0 {
			c.cfg.RetryBudget.Deposit(now)
		}

		out, sent, err := newAttempt(req, body)
		if err != nil {
			return nil, err
		}
		if hasDeadline {
			ms := timeoutMs(deadline.Sub(now))
			if hasCallerTimeout {
				ms = min(ms, callerTimeoutMs)
			}
			out.Header.Set(contract.HeaderTimeoutMs, strconv.FormatInt(ms, 10))
		}
		if prio != "" {
			out.Header.Set(contract.HeaderPriority, prio)
		}
		out.Header.Set(contract.HeaderAttempt, strconv.Itoa(base+attempt))
		if out.Header.Get(contract.HeaderStainlessRetryCount) != "" {
			// Keep the SDK's count in step so a gateway reading either agrees.
			out.Header.Set(contract.HeaderStainlessRetryCount, strconv.Itoa(base+attempt))
		}
		resp, err := c.cfg.Base.RoundTrip(out)
		now = c.cfg.Now()

		var wait time.Duration
		var hinted bool
		switch {
		case err != nil:
			if ctx.Err() != nil {
				// The caller stopped waiting: nothing to learn, nothing to retry.
				return nil, err
			}
			c.observe(now, false)
			if sent() && !idempotent(req) {
				// The server may have acted on it, and billed it.
				return nil, fmt.Errorf("client: not retried, since the request may have reached the server and is not idempotent: %w", err)
			}
			last, lastErr = nil, err
		case isRejection(resp):
			c.observe(now, false)
			last, hinted = rejectionFrom(resp, now)
			last.Attempts = attempt + 1
			wait, lastErr = last.RetryAfter, nil
		default:
			c.observe(now, true)
			return resp, nil
		}

		if !hinted {
			wait = c.backoff(attempt)
		}
		var stop GiveUp
		switch {
		case attempt+1 >= c.cfg.MaxAttempts:
			stop = GaveUpMaxAttempts
		case !body.ok:
			stop = GaveUpBodyNotReplayable
		case hinted && wait > c.cfg.MaxRetryDelay:
			stop = GaveUpMaxDelay
		case hasDeadline && !now.Add(wait).Before(deadline):
			stop = GaveUpDeadline
		case !c.cfg.RetryBudget.TryWithdraw(now.Add(wait)):
			// The retry is charged at the time it will be sent, after the
			// wait, so the floor's accrual during the wait counts: a client
			// whose first request is rejected within milliseconds of starting
			// has no token yet, but will have one 100ms later. (The token is
			// spent even if the caller gives up during the wait.)
			stop = GaveUpRetryBudget
		}
		if stop != "" {
			return nil, giveUp(last, lastErr, attempt+1, stop)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// priorAttempts is how many attempts were made above this transport.
func (c *Client) priorAttempts(h http.Header) (int, error) {
	n, ok, err := headerInt(h, contract.HeaderAttempt)
	if err != nil || ok {
		return int(n), err
	}
	n, _, err = headerInt(h, contract.HeaderStainlessRetryCount)
	return int(n), err
}

// newAttempt clones req, with the next copy of its body, for one attempt.
// sent reports, after the attempt, whether the request may have reached the
// server.
func newAttempt(req *http.Request, body *replayable) (out *http.Request, sent func() bool, err error) {
	// Whether the request was written is learnt from httptrace. A transport
	// that reports no connection at all (not an http.Transport) tells us
	// nothing, and then the request must be assumed sent. The hooks run on
	// the transport's goroutines, hence the atomics.
	var gotConnInfo, wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		GetConn: func(string) { gotConnInfo.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	b, err := body.next()
	if err != nil {
		return nil, nil, err
	}
	out = req.Clone(httptrace.WithClientTrace(req.Context(), trace))
	out.Body = b
	if body.ok {
		out.GetBody = body.getBody // lets http.Transport replay on a dead keep-alive connection
	}
	return out, func() bool { return wrote.Load() || !gotConnInfo.Load() }, nil
}

// idempotent mirrors net/http's rule for requests it may resend itself.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header.Get(contract.HeaderIdempotencyKey) != "" || req.Header.Get("X-Idempotency-Key") != ""
}

func (c *Client) observe(now time.Time, accepted bool) {
	if c.throttle != nil {
		c.throttle.observe(now, accepted)
	}
}

// backoff is the wait before retry number attempt+1 when the server gave no
// delay: Backoff doubled per retry, capped, drawn from the upper half.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.Backoff
	for range attempt {
		if d >= c.cfg.MaxRetryDelay/2 {
			d = c.cfg.MaxRetryDelay
			break
		}
		d *= 2
	}
	d = min(d, c.cfg.MaxRetryDelay)
	return d/2 + time.Duration(c.cfg.Rand()*float64(d/2))
}

// giveUp returns the error a request ends with: the last rejection, marked
// with why it was not retried, or the last connection error.
func giveUp(last *RejectedError, lastErr error, attempts int, why GiveUp) error {
	if last != nil {
		last.GaveUp = why
		return last
	}
	return fmt.Errorf("client: gave up after %d attempt(s) (%s): %w", attempts, why, lastErr)
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
