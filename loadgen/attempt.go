package loadgen

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// Failure reasons the runner assigns itself; the server's reasons come from
// X-Sluice-Reason, and a rejection without one is named by its status code.
const (
	// ReasonTimeout: the attempt's timeout passed before its last byte.
	ReasonTimeout = "timeout"
	// ReasonConnectionError: no response (refused, reset, malformed).
	ReasonConnectionError = "connection_error"
	// ReasonStreamError: a 2xx body broke off before its end.
	ReasonStreamError = "stream_error"
	// ReasonAbandoned: a 2xx body was closed by the policy before its end.
	ReasonAbandoned = "abandoned"
	// ReasonCancelled: Run's context was cancelled (e.g. SIGINT).
	ReasonCancelled = "cancelled"
	// ReasonRunEnded: the run's time bound cancelled the request; by then
	// its deadline had passed.
	ReasonRunEnded = "run_ended"
	// ReasonClientOverflow: MaxInFlight attempts were already in flight, so
	// the load generator did not send this one.
	ReasonClientOverflow = "client_overflow"
	// ReasonDeadline: the policy gave the first attempt no time (the
	// deadline had passed), so nothing was sent.
	ReasonDeadline = "deadline"
	// ReasonNotSent: the policy ended the request with an error before
	// sending anything, without naming a reason (see Refusal).
	ReasonNotSent = "not_sent"
	// ReasonPolicyError: the policy returned an error after its last
	// attempt had succeeded.
	ReasonPolicyError = "policy_error"
	// ReasonLate: an answer arrived, but after the request's deadline. Only
	// used in Report.Failures.
	ReasonLate = "late"
)

// errRunEnded is the cancellation cause when the run's time bound expires.
var errRunEnded = errors.New("loadgen: run time bound reached")

// errClosedEarly marks a body closed before its end.
var errClosedEarly = errors.New("loadgen: body closed before its end")

// attemptTransport is the runner's end of every policy: one RoundTrip is one
// attempt, sent with Config.Client, recorded on the logical request's call.
type attemptTransport struct{ rn *runner }

func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok {
		closeBody(req)
		return nil, errors.New("loadgen: the attempt transport works only inside loadgen.Run")
	}
	rn := t.rn
	a, err := c.start(rn.clk.Now())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	out := req.Clone(ctx)
	var timeout time.Duration
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		timeout = dl.Sub(rn.clk.Now())
	}
	rn.cfg.AttemptHeaders.declare(out.Header, a.Number, timeout, hasDeadline, false)
	resp, err := rn.client.Do(out)
	if err != nil {
		c.finish(a, ctx, err)
		return nil, err
	}
	c.respond(a, resp)
	resp.Body = &attemptBody{rc: resp.Body, c: c, a: a, ctx: ctx}
	return resp, nil
}

// attemptBody records the end of an attempt when its body reaches EOF, fails,
// or is closed; the answer counts from its last byte, not its headers.
type attemptBody struct {
	rc  io.ReadCloser
	c   *call
	a   *Attempt
	ctx context.Context
}

func (b *attemptBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.c.finish(b.a, b.ctx, nil)
	} else if err != nil {
		b.c.finish(b.a, b.ctx, err)
	}
	return n, err
}

func (b *attemptBody) Close() error {
	err := b.rc.Close()
	b.c.finish(b.a, b.ctx, errClosedEarly) // no-op after EOF
	return err
}

// errReason names a transport failure. The run's own cancellation is checked
// first, because it also surfaces as the attempt's context being done.
func (rn *runner) errReason(actx context.Context, err error) string {
	if rn.runCtx.Err() != nil {
		if errors.Is(context.Cause(rn.runCtx), errRunEnded) {
			return ReasonRunEnded
		}
		return ReasonCancelled
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	return ReasonConnectionError
}

// readHeaders extracts the backpressure signals from a response. Unparsable
// values are counted, not guessed at.
func readHeaders(a *Attempt, h http.Header, now time.Time) {
	if v := h.Get(contract.HeaderRetryAfterMs); v != "" {
		if d, ok := parseMillis(v); ok {
			a.RetryAfter, a.HasRetryAfter = d, true
		} else {
			a.malformed = append(a.malformed, contract.HeaderRetryAfterMs)
		}
	}
	if v := h.Get(contract.HeaderRetryAfter); v != "" && !a.HasRetryAfter {
		if d, ok := parseRetryAfter(v, now); ok {
			a.RetryAfter, a.HasRetryAfter = d, true
		} else {
			a.malformed = append(a.malformed, contract.HeaderRetryAfter)
		}
	}
	if v := h.Get(contract.HeaderEstimatedWaitMs); v != "" {
		if d, ok := parseMillis(v); ok {
			a.EstimatedWait, a.HasEstimatedWait = d, true
		} else {
			a.malformed = append(a.malformed, contract.HeaderEstimatedWaitMs)
		}
	}
}

// parseMillis parses a non-negative number of milliseconds; fractions are
// allowed because the OpenAI SDKs parse retry-after-ms as a float.
func parseMillis(v string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, false
	}
	return time.Duration(f * float64(time.Millisecond)), true
}

// parseRetryAfter parses Retry-After: delay-seconds or an HTTP date, which is
// turned into a delay from now (a date in the past means no wait).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 || secs > math.MaxInt64/int64(time.Second) {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
