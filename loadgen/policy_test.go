package loadgen

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func testRequest() *Request {
	return &Request{Class: "interactive", Arrival: t0, Deadline: t0.Add(10 * time.Second), AttemptTimeout: 5 * time.Second, MaxAttempts: 3}
}

func failed(number, status int, reason string) *Attempt {
	return &Attempt{Number: number, Status: status, Reason: reason, sent: true, Start: t0, End: t0}
}

func withRetryAfter(a *Attempt, d time.Duration) *Attempt {
	a.RetryAfter, a.HasRetryAfter = d, true
	return a
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		a    *Attempt
		want bool
	}{
		{failed(0, 0, ReasonTimeout), true},
		{failed(0, 0, ReasonConnectionError), true},
		{failed(0, 408, "408"), true},
		{failed(0, 429, "retry_budget"), true},
		{failed(0, 500, "500"), true},
		{failed(0, 503, "queue_full"), true},
		{failed(0, 400, "400"), false},
		{failed(0, 401, "401"), false},
		{failed(0, 404, "404"), false},
		{failed(0, 200, ReasonStreamError), false},
		{failed(0, 0, ReasonRunEnded), false},
		{failed(0, 0, ReasonCancelled), false},
		{&Attempt{Reason: ReasonClientOverflow}, false},     // never sent
		{&Attempt{Status: 200, sent: true, End: t0}, false}, // a success
		{nil, false},
	} {
		if got := Retryable(tc.a); got != tc.want {
			t.Errorf("Retryable(%+v) = %v, want %v", tc.a, got, tc.want)
		}
	}
}

func TestNaiveRule(t *testing.T) {
	r := testRequest()
	// The fixed timeout, even long past the deadline.
	for _, now := range []time.Time{t0, t0.Add(9 * time.Second), t0.Add(time.Hour)} {
		if got := (Naive{}).AttemptTimeout(r, 2, now); got != 5*time.Second {
			t.Errorf("AttemptTimeout at %v = %v, want 5s", now.Sub(t0), got)
		}
	}
	// Retry at once, whatever the server asked and however late it is.
	wait, retry := (Naive{}).Retry(r, withRetryAfter(failed(0, 503, "queue_wait"), time.Minute), t0.Add(9*time.Second))
	if wait != 0 || !retry {
		t.Errorf("Retry after 503 = (%v, %v), want (0, true)", wait, retry)
	}
	if _, retry := (Naive{}).Retry(r, failed(0, 400, "400"), t0); retry {
		t.Error("Naive retries a 400")
	}
}

func TestPoliteRule(t *testing.T) {
	r := testRequest()
	p := Polite{}
	if got := p.AttemptTimeout(r, 0, t0.Add(2500*time.Millisecond)); got != 7500*time.Millisecond {
		t.Errorf("AttemptTimeout = %v, want the remaining 7.5s", got)
	}
	if got := p.AttemptTimeout(r, 1, t0.Add(11*time.Second)); got > 0 {
		t.Errorf("AttemptTimeout past the deadline = %v, want <= 0", got)
	}
	for _, tc := range []struct {
		name  string
		a     *Attempt
		now   time.Duration // after arrival
		wait  time.Duration
		retry bool
	}{
		{"honours retry-after", withRetryAfter(failed(0, 503, "queue_wait"), 300*time.Millisecond), 0, 300 * time.Millisecond, true},
		{"zero retry-after means now", withRetryAfter(failed(0, 503, "queue_full"), 0), 0, 0, true},
		{"wait ends before deadline", withRetryAfter(failed(0, 503, "queue_wait"), 2*time.Second), 7 * time.Second, 2 * time.Second, true},
		{"wait ends at deadline", withRetryAfter(failed(0, 503, "queue_wait"), 3*time.Second), 7 * time.Second, 0, false},
		{"wait passes deadline", withRetryAfter(failed(0, 429, "tenant_budget"), 20*time.Second), 0, 0, false},
		{"backoff without retry-after", failed(0, 0, ReasonConnectionError), 0, 100 * time.Millisecond, true},
		{"backoff doubles", failed(2, 500, "500"), 0, 400 * time.Millisecond, true},
		{"backoff capped", failed(12, 500, "500"), 0, 5 * time.Second, true},
		{"backoff past deadline", failed(1, 0, ReasonTimeout), 9900 * time.Millisecond, 0, false},
		{"client error", failed(0, 400, "400"), 0, 0, false},
	} {
		wait, retry := p.Retry(r, tc.a, t0.Add(tc.now))
		if wait != tc.wait || retry != tc.retry {
			t.Errorf("%s: Retry = (%v, %v), want (%v, %v)", tc.name, wait, retry, tc.wait, tc.retry)
		}
	}
	if wait, _ := (Polite{Backoff: 10 * time.Millisecond}).Retry(r, failed(1, 502, "502"), t0); wait != 20*time.Millisecond {
		t.Errorf("custom backoff: wait = %v, want 20ms", wait)
	}
}

func TestPolicyByName(t *testing.T) {
	for _, name := range PolicyNames() {
		p, err := PolicyByName(name)
		if err != nil || p.Name() != name {
			t.Errorf("PolicyByName(%q) = %v, %v", name, p, err)
		}
	}
	if !slices.Equal(PolicyNames(), []string{"client", "naive", "polite"}) {
		t.Errorf("PolicyNames() = %v", PolicyNames())
	}
	if _, err := PolicyByName("eager"); err == nil {
		t.Error("PolicyByName(eager) succeeded")
	}
}

func TestParseHeaders(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h                     http.Header
		retryAfter, estimated time.Duration
		hasRA, hasEst         bool
		malformed             []string
	}{
		{h: http.Header{"Retry-After-Ms": {"1500.5"}, "Retry-After": {"9"}}, retryAfter: 1500500 * time.Microsecond, hasRA: true},
		{h: http.Header{"Retry-After": {"3"}}, retryAfter: 3 * time.Second, hasRA: true},
		{h: http.Header{"Retry-After": {now.Add(4 * time.Second).Format(http.TimeFormat)}}, retryAfter: 4 * time.Second, hasRA: true},
		{h: http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, retryAfter: 0, hasRA: true},
		{h: http.Header{"X-Sluice-Estimated-Wait-Ms": {"1200"}}, estimated: 1200 * time.Millisecond, hasEst: true},
		{h: http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"-1"}, "X-Sluice-Estimated-Wait-Ms": {"NaN"}},
			malformed: []string{contract.HeaderRetryAfterMs, contract.HeaderRetryAfter, contract.HeaderEstimatedWaitMs}},
	} {
		var a Attempt
		readHeaders(&a, tc.h, now)
		if a.RetryAfter != tc.retryAfter || a.HasRetryAfter != tc.hasRA || a.EstimatedWait != tc.estimated ||
			a.HasEstimatedWait != tc.hasEst || !slices.Equal(a.malformed, tc.malformed) {
			t.Errorf("readHeaders(%v) = %+v", tc.h, a)
		}
	}
}

// shotPolicy is a policy written the way an external client library is: an
// http.RoundTripper around the runner's attempt transport, with its own loop
// and its own headers. It proves such a client plugs in without the runner
// knowing about it.
type shotPolicy struct{ refuse bool }

func (shotPolicy) Name() string { return "shot" }

func (p shotPolicy) Transport(attempt http.RoundTripper) (http.RoundTripper, error) {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		r, ok := RequestFromContext(req.Context())
		if !ok {
			return nil, errors.New("no request in context")
		}
		if p.refuse {
			req.Body.Close()
			return nil, &Refusal{Reason: "client_throttled"}
		}
		// Like a client library: the deadline goes on the context.
		ctx, cancel := context.WithDeadline(req.Context(), r.Deadline)
		defer cancel()
		for n := 0; ; n++ {
			areq := req.Clone(ctx)
			if n > 0 {
				areq.Body, _ = req.GetBody()
			}
			areq.Header.Set(contract.HeaderAttempt, strconv.Itoa(10+n)) // its own numbering
			resp, err := attempt.RoundTrip(areq)
			if err != nil {
				return nil, err // ErrMaxAttempts ends the loop
			}
			if resp.StatusCode == http.StatusOK {
				// Reading the body here keeps the sketch short; a real
				// client would hand it on and cancel on Close.
				return bufferBody(resp)
			}
			resp.Body.Close()
		}
	}), nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportPolicyPlugsIn(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, MaxAttempts: 4, Policy: shotPolicy{},
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: wallClock{}})
	if got := srv.field(func(s seen) string { return s.attempt }); !slices.Equal(got, []string{"10", "11", "12", "13"}) {
		t.Errorf("X-Sluice-Attempt = %v: the runner must keep what the policy set, and stop it at MaxAttempts", got)
	}
	for _, s := range srv.seen() {
		ms, err := strconv.Atoi(s.timeoutMs)
		if err != nil || ms <= 0 || ms > 10000 {
			t.Errorf("X-Sluice-Timeout-Ms = %q, want the context's remaining deadline", s.timeoutMs)
		}
	}
	if rep.Policy != "shot" || rep.Attempts != 4 || rep.Failures["queue_full"] != 1 {
		t.Errorf("policy %q attempts %d failures %v", rep.Policy, rep.Attempts, rep.Failures)
	}

	refused := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, Policy: shotPolicy{refuse: true},
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: wallClock{}})
	if refused.Attempts != 0 || refused.Failures["client_throttled"] != 1 {
		t.Errorf("refusal: attempts %d failures %v, want 0 and client_throttled: 1", refused.Attempts, refused.Failures)
	}
}

func TestContextPolicyPutsDeadlineOnContext(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		io.WriteString(w, `{"choices":[`)
		w.(http.Flusher).Flush()
		io.WriteString(w, `]}`)
	})
	var gotDeadline, wantDeadline time.Time
	p := ContextPolicy("ctx", func(attempt http.RoundTripper) (http.RoundTripper, error) {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			r, _ := RequestFromContext(req.Context())
			wantDeadline = r.Deadline
			gotDeadline, _ = req.Context().Deadline()
			// Hand the body on unread: the context must outlive this call.
			return attempt.RoundTrip(req)
		}), nil
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, Policy: p,
		Classes: oneClass("batch", 30*time.Second),
	}, env{clock: wallClock{}})
	if gotDeadline.IsZero() || !gotDeadline.Equal(wantDeadline) {
		t.Errorf("context deadline = %v, want the request's %v", gotDeadline, wantDeadline)
	}
	if rep.OnTime != 1 || rep.Policy != "ctx" {
		t.Errorf("on time %d policy %q, want 1 ctx (failures %v)", rep.OnTime, rep.Policy, rep.Failures)
	}
	s := srv.seen()
	if ms, err := strconv.Atoi(s[0].timeoutMs); err != nil || ms <= 29000 || ms > 30000 {
		t.Errorf("X-Sluice-Timeout-Ms = %q, want the ~30000ms left, derived from the context", s[0].timeoutMs)
	}
	if s[0].priority != "batch" || s[0].attempt != "0" {
		t.Errorf("priority %q attempt %q", s[0].priority, s[0].attempt)
	}
	if _, err := ContextPolicy("nil", nil).Transport(nil); err == nil {
		t.Error("nil wrap accepted")
	}
}

func TestOverflowOnALaterAttempt(t *testing.T) {
	got := make(chan struct{})
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		close(got)
		<-release
		reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
	})
	// A hedging policy: a second attempt while the first is in flight. With
	// one in-flight slot the runner must refuse it and say so.
	var hedgeErr error
	hedge := ContextPolicy("hedge", func(attempt http.RoundTripper) (http.RoundTripper, error) {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			first := make(chan error, 1)
			go func() {
				resp, err := attempt.RoundTrip(req.Clone(req.Context()))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				first <- err
			}()
			<-got
			second := req.Clone(req.Context())
			second.Body, _ = req.GetBody()
			_, hedgeErr = attempt.RoundTrip(second)
			close(release)
			<-first
			return nil, hedgeErr
		}), nil
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, MaxInFlight: 1, Policy: hedge,
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: wallClock{}})
	if !errors.Is(hedgeErr, ErrClientOverflow) {
		t.Errorf("second attempt: err = %v, want ErrClientOverflow", hedgeErr)
	}
	if rep.Attempts != 1 || rep.ClientOverflow != 1 || rep.Failures[ReasonClientOverflow] != 1 || rep.Rejections["queue_full"] != 1 {
		t.Errorf("attempts %d overflow %d failures %v rejections %v", rep.Attempts, rep.ClientOverflow, rep.Failures, rep.Rejections)
	}
}
