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
	cfg     Config
	retrier *Retrier
}

var _ http.RoundTripper = (*Client)(nil)

// New returns a Client configured by cfg, or an error naming the invalid field.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, retrier: newRetrier(cfg)}, nil
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
		// A request whose earlier attempts were made above this transport
		// had its first attempt deposited there, or not at all.
		var allowed bool
		if attempt == 0 && base == 0 {
			allowed = c.retrier.Begin(now, c.cfg.Rand())
		} else {
			allowed = c.retrier.Allow(now, c.cfg.Rand())
		}
		if !allowed {
			body.close()
			if attempt == 0 {
				return nil, &RejectedError{Reason: ReasonClientThrottled, GaveUp: GaveUpThrottled}
			}
			return nil, giveUp(last, lastErr, attempt, GaveUpThrottled)
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

		f := Failure{Attempt: attempt, Deadline: deadline}
		switch {
		case err != nil:
			if ctx.Err() != nil {
				// The caller stopped waiting: nothing to learn, nothing to retry.
				return nil, err
			}
			c.retrier.Observe(now, false)
			if sent() && !idempotent(req) {
				// The server may have acted on it, and billed it.
				return nil, fmt.Errorf("client: not retried, since the request may have reached the server and is not idempotent: %w", err)
			}
			last, lastErr = nil, err
		case isRejection(resp):
			c.retrier.Observe(now, false)
			last, f.HasRetryAfter = rejectionFrom(resp, now)
			last.Attempts = attempt + 1
			f.RetryAfter, lastErr = last.RetryAfter, nil
		default:
			c.retrier.Observe(now, true)
			return resp, nil
		}

		if !f.HasRetryAfter {
			f.U = c.cfg.Rand()
		}
		var wait time.Duration
		var stop GiveUp
		if !body.ok && attempt+1 < c.cfg.MaxAttempts {
			// Checked before Next, which would take a retry budget token
			// for a retry that cannot be sent.
			stop = GaveUpBodyNotReplayable
		} else {
			wait, stop = c.retrier.Next(now, f)
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
