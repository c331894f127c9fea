package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Rule is a retry policy reduced to two pure decisions, with the current time
// as an input, so that it can be tested without a clock or a server. The
// loop that drives a Rule (see RulePolicy) does the sending, waiting and
// header-setting.
//
// Implementations must be safe for concurrent use. AttemptTimeout is called
// exactly once before each attempt, and Retry exactly once after each failed
// attempt that could still be repeated (MaxAttempts not reached, run not
// ending), so stateful rules (a retry budget) can count on them. An attempt
// the runner refuses (MaxInFlight) ends the request without asking Retry.
type Rule interface {
	// AttemptTimeout returns how long attempt number attempt (0 first) of r
	// may take, starting at now; it is sent as X-Sluice-Timeout-Ms (or
	// X-Stainless-Timeout, see Config.AttemptHeaders). A result <= 0 means
	// the attempt is not sent and the request ends.
	AttemptTimeout(r *Request, attempt int, now time.Time) time.Duration
	// Retry is called after attempt a failed, at time now. It returns whether
	// to try again and how long to wait first.
	Retry(r *Request, a *Attempt, now time.Time) (wait time.Duration, retry bool)
}

// RulePolicy turns a Rule into a Policy named name.
func RulePolicy(name string, rule Rule) Policy { return rulePolicy{name: name, rule: rule} }

type rulePolicy struct {
	name string
	rule Rule
}

func (p rulePolicy) Name() string { return p.name }

func (p rulePolicy) Transport(attempt http.RoundTripper) (http.RoundTripper, error) {
	if p.rule == nil {
		return nil, errors.New("RulePolicy: nil Rule")
	}
	return &ruleTransport{rule: p.rule, next: attempt}, nil
}

// Naive is the client most SDKs ship with: every attempt gets the fixed
// Request.AttemptTimeout, and any retryable failure is retried at once,
// ignoring Retry-After and the caller's deadline. Under overload it
// multiplies the load by MaxAttempts and keeps working on answers nobody
// will read. Safe for concurrent use.
type Naive struct{}

// Name returns "naive".
func (Naive) Name() string { return "naive" }

// Transport drives Naive as a Rule.
func (n Naive) Transport(attempt http.RoundTripper) (http.RoundTripper, error) {
	return &ruleTransport{rule: n, next: attempt}, nil
}

// AttemptTimeout returns r.AttemptTimeout whatever the time.
func (Naive) AttemptTimeout(r *Request, _ int, _ time.Time) time.Duration {
	return r.AttemptTimeout
}

// Retry retries every retryable failure immediately.
func (Naive) Retry(_ *Request, a *Attempt, _ time.Time) (time.Duration, bool) {
	return 0, Retryable(a)
}

// DefaultPoliteBackoff is Polite's first backoff when the server sent no
// Retry-After.
const DefaultPoliteBackoff = 100 * time.Millisecond

// maxPoliteBackoff caps the exponential backoff used without Retry-After.
const maxPoliteBackoff = 5 * time.Second

// Polite is a well-behaved client: it waits as long as the server asks
// (retry-after-ms, else Retry-After), never retries when that wait would end
// at or past the caller's deadline, and gives each attempt exactly the time
// left until the deadline, so it never works on an answer nobody will read.
// Safe for concurrent use.
type Polite struct {
	// Backoff is the wait before the first retry when the failure carried no
	// Retry-After (timeouts, connection errors, a bare 5xx); it doubles per
	// retry up to 5s. Zero means DefaultPoliteBackoff. There is no jitter:
	// Poisson arrivals already spread retries out, and a fixed schedule
	// keeps a seeded run reproducible.
	Backoff time.Duration
}

// Name returns "polite".
func (Polite) Name() string { return "polite" }

// Transport drives Polite as a Rule.
func (p Polite) Transport(attempt http.RoundTripper) (http.RoundTripper, error) {
	if p.Backoff < 0 {
		return nil, fmt.Errorf("Polite.Backoff must not be negative, got %v", p.Backoff)
	}
	return &ruleTransport{rule: p, next: attempt}, nil
}

// AttemptTimeout returns the time left until r's deadline.
func (Polite) AttemptTimeout(r *Request, _ int, now time.Time) time.Duration {
	return r.Deadline.Sub(now)
}

// Retry waits as the server asked, or backs off exponentially, unless the
// retry could not start before the deadline.
func (p Polite) Retry(r *Request, a *Attempt, now time.Time) (time.Duration, bool) {
	if !Retryable(a) {
		return 0, false
	}
	wait := a.RetryAfter
	if !a.HasRetryAfter {
		base := p.Backoff
		if base <= 0 {
			base = DefaultPoliteBackoff
		}
		wait = base << min(a.Number, 16)
		if wait > maxPoliteBackoff || wait <= 0 {
			wait = maxPoliteBackoff
		}
	}
	if !now.Add(wait).Before(r.Deadline) {
		return 0, false
	}
	return wait, true
}

var (
	_ Policy = Naive{}
	_ Policy = Polite{}
	_ Rule   = Naive{}
	_ Rule   = Polite{}
)

// Errors of the rule loop; the runner maps them to report reasons.
var (
	errNoTime = errors.New("loadgen: the policy gave the attempt no time")
	errGaveUp = errors.New("loadgen: the policy gave up")
)

// ruleTransport is the retry loop shared by every Rule. It uses the run's
// clock, so tests drive Retry-After waits in virtual time.
type ruleTransport struct {
	rule Rule
	next http.RoundTripper
}

func (t *ruleTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, ok := req.Context().Value(callKey{}).(*call)
	if !ok {
		closeBody(req)
		return nil, errors.New("loadgen: a rule policy's transport works only inside loadgen.Run")
	}
	clk, r := c.rn.clk, c.r
	for n := 0; ; n++ {
		timeout := t.rule.AttemptTimeout(r, n, clk.Now())
		if timeout <= 0 {
			if n == 0 {
				closeBody(req)
			}
			return nil, errNoTime
		}
		areq, cancel, err := attemptRequest(req, n, timeout, clk, c.rn.cfg.AttemptHeaders)
		if err != nil {
			return nil, err
		}
		resp, err := t.next.RoundTrip(areq)
		if err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
			// The answer is the body: keep the attempt's timeout running
			// until the runner has read it.
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		if err == nil {
			// Drain so that the attempt's end is recorded and the
			// connection can be reused.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		if errors.Is(err, ErrMaxAttempts) || errors.Is(err, ErrClientOverflow) {
			// The runner's own bounds: nothing was sent, nothing to retry.
			return nil, err
		}
		a := c.last()
		if a == nil {
			return nil, fmt.Errorf("loadgen: attempt %d left no record: %v", n, err)
		}
		if n+1 >= r.MaxAttempts || req.Context().Err() != nil {
			return nil, fmt.Errorf("%w after %d attempts: %s", errGaveUp, n+1, a.Reason)
		}
		wait, retry := t.rule.Retry(r, a, clk.Now())
		if !retry {
			return nil, fmt.Errorf("%w after %d attempts: %s", errGaveUp, n+1, a.Reason)
		}
		if err := clk.Sleep(req.Context(), wait); err != nil {
			return nil, err
		}
	}
}

// attemptRequest derives attempt n of the logical request req, with its own
// timeout and the attempt headers of mode. The first attempt takes req's
// body; later ones get a fresh copy from GetBody. The loop declares the
// timeout the rule chose, exactly, rather than leaving the attempt transport
// to read it back from the context a moment later.
func attemptRequest(req *http.Request, n int, timeout time.Duration, clk clock, mode AttemptHeaders) (*http.Request, context.CancelFunc, error) {
	actx, cancel := clk.WithTimeout(req.Context(), timeout)
	areq := req.Clone(actx)
	if n > 0 && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			cancel()
			return nil, nil, errors.New("loadgen: request body cannot be sent again (no GetBody)")
		}
		body, err := req.GetBody()
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("loadgen: copying the request body for a retry: %w", err)
		}
		areq.Body = body
	}
	mode.declare(areq.Header, n, timeout, true, true)
	return areq, cancel, nil
}

// timeoutMs formats an X-Sluice-Timeout-Ms value. It truncates, so the
// server never believes the caller will wait longer than it will, but never
// below 1: 0 would read as "no time at all" while a fraction of a millisecond
// is left.
func timeoutMs(d time.Duration) string {
	return strconv.FormatInt(max(1, d.Milliseconds()), 10)
}

// cancelOnClose releases an attempt's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
