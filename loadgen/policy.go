package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/sluicehq/sluice/client"
)

// Policy is the client being simulated: what a caller does between deciding
// to make a request and getting (or giving up on) its answer — per-attempt
// timeouts, retries, waits, local refusals.
//
// A Policy works at the level of HTTP transports so that any retrying client
// written as an http.RoundTripper (such as sluice's own client package, or a
// wrapper around an SDK's transport) plugs in as it is. For each logical
// request the runner sends one *http.Request through the RoundTripper that
// Transport returned; the request's context carries the *Request (see
// RequestFromContext) and is cancelled when the run ends. The policy's
// transport sends each attempt through attempt, the runner's transport, which
// counts it, measures it, enforces MaxInFlight and MaxAttempts (returning
// ErrClientOverflow and ErrMaxAttempts), and fills in the attempt headers
// Config.AttemptHeaders chooses (X-Sluice-Attempt and X-Sluice-Timeout-Ms by
// default, the deadline from the attempt context's) when the policy did not
// set them. The response the policy returns is read to its end by the
// runner; a 2xx read completely by the deadline is an on-time answer.
//
// The runner does not put the logical deadline on the context: whether a
// caller stops at its deadline is precisely what distinguishes policies.
//
// Policies built from a Rule ([Naive], [Polite], [RulePolicy]) need none of
// this: the shared loop in this package drives the rule.
type Policy interface {
	// Name identifies the policy in reports.
	Name() string
	// Transport is called once per run with the runner's attempt transport
	// and returns the transport logical requests are sent through. The
	// returned transport must be safe for concurrent use.
	Transport(attempt http.RoundTripper) (http.RoundTripper, error)
}

// Request is what a policy knows about a logical request. The runner owns it;
// policies must treat it as read-only.
type Request struct {
	// Seq is the arrival's sequence number.
	Seq int
	// Class is the class name (Class.Name: with a trace, the service). Its
	// Class.Priority is sent as X-Sluice-Priority.
	Class string
	// Arrival is the scheduled arrival time.
	Arrival time.Time
	// Deadline is Arrival plus the request's deadline (a trace call's own,
	// else its class's): after it the caller has stopped listening.
	Deadline time.Time
	// AttemptTimeout is the caller's configured fixed per-attempt timeout
	// (Class.AttemptTimeout, else Config.AttemptTimeout, else half the
	// request's deadline).
	AttemptTimeout time.Duration
	// MaxAttempts is Config.MaxAttempts after defaults; the attempt
	// transport refuses attempts beyond it.
	MaxAttempts int
}

type callKey struct{}

// RequestFromContext returns the logical request that ctx belongs to, for
// policies that need the class, deadline or arrival (for example to put the
// deadline on the context before calling a client library).
func RequestFromContext(ctx context.Context) (*Request, bool) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok {
		return nil, false
	}
	return c.r, true
}

// Errors the attempt transport returns instead of sending.
var (
	// ErrClientOverflow: Config.MaxInFlight attempts are already in flight.
	ErrClientOverflow = errors.New("loadgen: client overflow: MaxInFlight attempts in flight")
	// ErrMaxAttempts: the logical request has used Config.MaxAttempts.
	ErrMaxAttempts = errors.New("loadgen: MaxAttempts reached")
)

// Refusal is an error a Policy returns to refuse a request locally (a
// client-side throttle, an empty retry budget), naming the reason the report
// should count. Without it, a logical request that ends in an error before
// any attempt was sent is counted as "not_sent".
type Refusal struct {
	Reason string
	Err    error // the underlying error, if any
}

func (e *Refusal) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("loadgen: refused locally (%s): %v", e.Reason, e.Err)
	}
	return fmt.Sprintf("loadgen: refused locally (%s)", e.Reason)
}

func (e *Refusal) Unwrap() error { return e.Err }

// Attempt is the outcome of one attempt, as the runner recorded it.
type Attempt struct {
	// Number counts the logical request's attempts from 0.
	Number int
	// Status is the HTTP status code, or 0 when no response arrived.
	Status int
	// Reason classifies a failure: the X-Sluice-Reason header when present,
	// else the status code ("503"), or one of the Reason constants of this
	// package ("timeout", "connection_error", ...). Empty for a success.
	Reason string
	// RetryAfter is the server's requested delay, from retry-after-ms when
	// present, else from Retry-After; HasRetryAfter tells whether either
	// header was present and parsable (a zero delay is a valid answer).
	RetryAfter    time.Duration
	HasRetryAfter bool
	// EstimatedWait is X-Sluice-Estimated-Wait-Ms; HasEstimatedWait tells
	// whether it was present and parsable.
	EstimatedWait    time.Duration
	HasEstimatedWait bool
	// Start is when the attempt was sent; End is when its last byte arrived,
	// its body was closed, or it failed. Zero until then.
	Start, End time.Time
	// HeadersAt is when the response headers arrived: the moment a refusal
	// reached the caller. Zero when no response arrived.
	HeadersAt time.Time

	// sent is false for an attempt the runner refused (client_overflow):
	// recorded so it can end the request, but not counted as an attempt.
	sent bool
	// refused marks a refusal (see isRefusal), timed in Report.RefusalTime.
	refused bool
	// malformed names response headers whose values could not be parsed.
	malformed []string
}

// OK reports whether the attempt delivered an answer: a 2xx response read to
// its end.
func (a *Attempt) OK() bool {
	return a.sent && a.Reason == "" && a.Status >= 200 && a.Status < 300 && !a.End.IsZero()
}

// unanswered reports whether a was left with neither an answer nor a
// refusal by its caller's own timeout: its own timeout fired, or the
// request's deadline passed, while it waited for the response headers or for
// the rest of a 2xx body. A refusal settles an attempt when its headers
// arrive; anything else (an answer, a connection error, a body the policy
// closed, the run cancelled) when it ends.
func (a *Attempt) unanswered() bool {
	if !a.sent {
		return false
	}
	switch a.Reason {
	case ReasonTimeout:
		return true // the caller's own timeout fired
	case ReasonRunEnded:
		return true // the run's bound comes after every request's deadline
	}
	return false
}

// Retryable reports whether a failed attempt is worth repeating: no response
// at all (timeouts, connection errors), 408, 429 and 5xx. Other 4xx mean the
// request itself is wrong and would fail again; a 2xx whose body broke off is
// not repeated either (its answer was already being produced and billed). An
// attempt the runner refused, or that the end of the run cancelled, is never
// retried.
func Retryable(a *Attempt) bool {
	if a == nil || !a.sent || a.OK() {
		return false
	}
	switch a.Reason {
	case ReasonCancelled, ReasonRunEnded, ReasonClientOverflow:
		return false
	}
	switch {
	case a.Status == 0:
		return true
	case a.Status == http.StatusRequestTimeout, a.Status == http.StatusTooManyRequests:
		return true
	case a.Status >= 500:
		return true
	}
	return false
}

// policies maps the names accepted by PolicyByName to constructors.
var policies = map[string]func() Policy{
	"naive":  func() Policy { return Naive{} },
	"polite": func() Policy { return Polite{} },
	"client": ClientPolicy,
}

// ClientPolicy is a caller using sluice's Go client package: it sends its
// deadline and attempt number, retries only when the gateway's Retry-After
// fits inside the deadline, keeps a client-side retry budget and throttles
// adaptively (K = 2) when the gateway keeps refusing. One client serves the
// whole run, as one process's http.Client would.
func ClientPolicy() Policy {
	return ContextPolicy("client", func(attempt http.RoundTripper) (http.RoundTripper, error) {
		return client.New(client.Config{Base: attempt, ThrottleK: client.DefaultThrottleK})
	})
}

// PolicyNames lists the names PolicyByName accepts, sorted.
func PolicyNames() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PolicyByName returns the built-in policy called name with its default
// settings.
func PolicyByName(name string) (Policy, error) {
	mk, ok := policies[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q (known: %v)", name, PolicyNames())
	}
	return mk(), nil
}
