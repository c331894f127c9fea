package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/gateway/wire"
)

// upstream is the gateway's side of every call's transport: it retries the
// provider on the gateway's own account (before any byte of a response
// reached the caller, since RoundTrip returns before the proxy writes
// anything), and feeds every answer to the concurrency controller.
type upstream struct {
	g           *Gateway
	base        http.RoundTripper
	maxAttempts int
	backoff     time.Duration
}

// RoundTrip makes the call the transport of its own proxy (call.forward):
// the gateway's upstream, told which call it carries.
func (c *call) RoundTrip(req *http.Request) (*http.Response, error) {
	return c.g.upstream.roundTrip(c, req)
}

func (u *upstream) roundTrip(c *call, req *http.Request) (*http.Response, error) {
	same := 1         // attempts at the call's current deployment
	retarget := false // a failover moved the call: point the request again
	for attempt := 1; ; attempt++ {
		// The call's trace (see Gateway.serveCall) counts the attempts
		// whose headers were written: this one wrote if the count moves.
		written := c.headersWritten.Load()
		cp := *req
		out := &cp
		// The body, from the gateway's copy, on every attempt: an
		// io.NopCloser around a *bytes.Reader is a body the Transport
		// knows is in memory, so it sends the headers and the body in one
		// write; behind ReverseProxy's own wrapper it would flush the
		// headers first, in a write (and a TCP segment) of their own.
		out.Body = io.NopCloser(bytes.NewReader(c.body))
		if retarget {
			u2 := *req.URL
			out.URL, out.Header = &u2, req.Header.Clone()
			u.g.deploymentOf(c).target(c.in, out)
			out.ContentLength = int64(len(c.body))
			out.Header.Set("Content-Length", strconv.Itoa(len(c.body)))
		}
		s := u.g.sending(time.Now(), c)
		resp, err := u.g.attempt(u.base, out, c, attempt) // in a span when tracing (trace.go)
		now := time.Now()
		u.g.observe(s, now, resp, c)
		wrote := c.headersWritten.Load() != written
		wait, why, ok := u.retryable(resp, err, wrote, same)
		if !ok {
			return resp, err
		}
		// Another deployment of the model before the same one again
		// (pools.go): it has no reason to fail too.
		if u.failover(req, c, resp, err) {
			discard(resp)
			retarget, same = true, 1
			continue
		}
		if err != nil && !wrote && upstreamFailure(err) == failUnreachable {
			// No connection: the call never reached a provider, and no
			// other deployment can serve it in time. It is refused (503,
			// Retry-After; proxyError), not tried again at a deployment
			// known to be unreachable — its probe says when it is back.
			if rej := c.permit.Unreachable(); rej != nil {
				return nil, rej
			}
		}
		if same >= u.maxAttempts || !u.worthIt(now, c, wait) || !u.g.chain.UpstreamRetry(now) {
			return resp, err
		}
		same++
		discard(resp)
		u.g.metrics.upstreamRetries.WithLabelValues(why).Inc()
		if !sleep(req.Context(), wait) {
			return nil, req.Context().Err()
		}
	}
}

// discard drains and closes an answer that is not passed on.
func discard(resp *http.Response) {
	if resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
}

// failover moves call c to the next pool of its model's route after its
// deployment failed it (resp or err), and reports whether it did: within
// the call's deadline and the retry budget, before any byte reached the
// caller (RoundTrip returns before the proxy writes anything).
func (u *upstream) failover(req *http.Request, c *call, resp *http.Response, err error) bool {
	from := c.permit.Request().Pool
	o := chain.Outcome{Result: admission.Failure}
	switch {
	case err != nil:
		o.Unreachable = upstreamFailure(err) == failUnreachable
	case resp.StatusCode == http.StatusTooManyRequests:
		o.RateLimited = true
	}
	if !c.permit.Failover(req.Context(), o) {
		return false
	}
	u.g.metrics.failovers.WithLabelValues(u.g.pools[from].info.Name).Inc()
	if sent := servedModel(c.permit.Request()); sent != c.model {
		// The next deployment knows the model by another name.
		if raw, err := rewriteModel(c.body, sent); err == nil {
			c.body, c.model = raw, sent
		}
	}
	c.queue += c.permit.QueueTime()
	return true
}

// retryable says whether the gateway may call the provider again, after how
// long, and why.
func (u *upstream) retryable(resp *http.Response, err error, wrote bool, attempt int) (time.Duration, string, bool) {
	backoff := u.backoff << (attempt - 1)
	switch {
	case err != nil:
		// Only a failure before any byte was sent: once the provider may
		// have the request, a second call could be billed twice.
		if wrote || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return 0, "", false
		}
		return backoff, "connection", true
	case resp.StatusCode == http.StatusTooManyRequests:
		return wire.RetryAfter(resp.Header, backoff), "429", true
	case resp.StatusCode >= 500:
		return wire.RetryAfter(resp.Header, backoff), "5xx", true
	}
	return 0, "", false
}

// worthIt: a retry must be able to finish inside the caller's deadline.
func (u *upstream) worthIt(now time.Time, c *call, wait time.Duration) bool {
	if c.deadline.IsZero() {
		return true
	}
	p95 := u.g.gateOf(c).KeyStats(c.model).P95
	return !now.Add(wait + p95).After(c.deadline)
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
