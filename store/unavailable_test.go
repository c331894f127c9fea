package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStateAndUnavailable walks a Redis's breaker through an outage with
// time as an input, the calls' errors given by f: the state and since
// when after each call, and what the call's error says — whether it
// matches ErrUnavailable (and ErrOpen), since when Redis has not
// answered, and when to retry.
func TestStateAndUnavailable(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	t0 := clk.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	client := redis.NewClient(&redis.Options{Addr: closedPort(t)}) // f never uses it
	r, err := NewRedis(Options{Client: client, Now: clk.Now, Logger: quiet, Backoff: time.Second, MaxBackoff: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st, since := r.State(); st != StateUp || !since.Equal(t0) {
		t.Fatalf("new: %s since %v, want up since %v", st, since, t0)
	}

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	const notCalled = "refused: f is not called"
	steps := []struct {
		at          time.Duration
		err         error         // f's; notCalled when the breaker refuses
		refused     bool          // f is not called
		unavailable bool          // the error matches ErrUnavailable
		since       time.Duration // the error's Since
		retryAt     time.Duration // the error's RetryAt; -1 for zero
		state       string        // after the call
		stateSince  time.Duration
		comment     string
	}{
		{time.Second, nil, false, false, 0, -1, StateUp, 0, "an answer: up since NewRedis"},
		{2 * time.Second, refused, false, true, 2 * time.Second, -1, StateUp, 0, "refused connection: unavailable since now, the breaker still closed"},
		{3 * time.Second, context.DeadlineExceeded, false, true, 2 * time.Second, -1, StateUp, 0, "a timeout: since the first failure"},
		{4 * time.Second, io.EOF, false, true, 2 * time.Second, 5 * time.Second, StateDown, 2 * time.Second, "a dropped connection, the third: open for 1s, down since the first failure"},
		{4500 * time.Millisecond, nil, true, true, 2 * time.Second, 5 * time.Second, StateDown, 2 * time.Second, notCalled},
		{5 * time.Second, refused, false, true, 2 * time.Second, 7 * time.Second, StateDown, 2 * time.Second, "the probe fails: open for 2s, since unmoved"},
		{6 * time.Second, nil, true, true, 2 * time.Second, 7 * time.Second, StateDown, 2 * time.Second, notCalled},
		{7 * time.Second, nil, false, false, 0, -1, StateUp, 7 * time.Second, "the probe succeeds: up since now"},
		{8 * time.Second, redis.ErrCrossSlot, false, false, 0, -1, StateUp, 7 * time.Second, "a reply that is an error: Redis answered"},
		{9 * time.Second, &strconv.NumError{Func: "Atoi", Num: "x", Err: strconv.ErrSyntax}, false, false, 0, -1, StateUp, 7 * time.Second, "data that does not parse"},
	}
	for i, s := range steps {
		clk.Set(at(s.at))
		called := false
		err := r.Do(context.Background(), func(context.Context, redis.UniversalClient) error {
			called = true
			return s.err
		})
		if called == s.refused {
			t.Fatalf("step %d (%s): f called = %v", i, s.comment, called)
		}
		if got := errors.Is(err, ErrUnavailable); got != s.unavailable {
			t.Fatalf("step %d (%s): %v matches ErrUnavailable = %v", i, s.comment, err, got)
		}
		if got := errors.Is(err, ErrOpen); got != s.refused {
			t.Errorf("step %d (%s): %v matches ErrOpen = %v", i, s.comment, err, got)
		}
		if s.err != nil && !errors.Is(err, s.err) {
			t.Errorf("step %d (%s): %v does not match f's error", i, s.comment, err)
		}
		var ue *UnavailableError
		if errors.As(err, &ue) != s.unavailable {
			t.Fatalf("step %d (%s): %v is an *UnavailableError = %v", i, s.comment, err, !s.unavailable)
		}
		if ue != nil {
			wantRetry := time.Time{}
			if s.retryAt >= 0 {
				wantRetry = at(s.retryAt)
			}
			if !ue.Since.Equal(at(s.since)) || !ue.RetryAt.Equal(wantRetry) {
				t.Errorf("step %d (%s): since %v, retry at %v; want %v, %v", i, s.comment, ue.Since, ue.RetryAt, at(s.since), wantRetry)
			}
		}
		if st, since := r.State(); st != s.state || !since.Equal(at(s.stateSince)) {
			t.Errorf("step %d (%s): %s since %v, want %s since %v", i, s.comment, st, since, s.state, at(s.stateSince))
		}
	}

	// While the probe is out, the breaker is probing since the outage
	// began — at the first of the failures in a row, 8s: the breaker
	// counts every error, replies too — and the other calls are refused
	// with no time to wait for.
	if err := r.Do(context.Background(), func(context.Context, redis.UniversalClient) error { return refused }); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the third failure in a row: %v", err)
	}
	if st, _ := r.State(); st != StateDown {
		t.Fatalf("after the third failure in a row: %s, want down", st)
	}
	clk.Set(at(time.Minute))
	_ = r.Do(context.Background(), func(ctx context.Context, _ redis.UniversalClient) error {
		if st, since := r.State(); st != StateProbing || !since.Equal(at(8*time.Second)) {
			t.Errorf("during the probe: %s since %v, want probing since the outage began", st, since)
		}
		err := r.Do(ctx, func(context.Context, redis.UniversalClient) error { t.Error("a second call went through"); return nil })
		var ue *UnavailableError
		if !errors.As(err, &ue) || !errors.Is(err, ErrOpen) || !ue.RetryAt.IsZero() {
			t.Errorf("a call during the probe: %v, want ErrOpen with no retry time", err)
		}
		return nil
	})
	if !r.Up() || !r.LastErrorAt().Equal(at(9*time.Second)) {
		t.Errorf("after the probe: up %v, last error at %v", r.Up(), r.LastErrorAt())
	}
}

// TestUnavailableErrorText: the message says Redis is unavailable and
// why, once.
func TestUnavailableErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&UnavailableError{Err: ErrOpen}, "store: redis unavailable (circuit breaker open)"},
		{&UnavailableError{Err: io.EOF}, "store: redis unavailable: EOF"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}
