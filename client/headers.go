package client

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/contract"
)

type priorityKey struct{}

// WithPriority returns a copy of ctx that makes requests sent with it carry
// X-Sluice-Priority: priority ("interactive", "batch", "speculative", or a
// class the gateway is configured with). An invalid name is reported by
// RoundTrip, which then sends nothing.
func WithPriority(ctx context.Context, priority string) context.Context {
	return context.WithValue(ctx, priorityKey{}, priority)
}

// PriorityFrom returns the priority set on ctx by WithPriority, if any.
func PriorityFrom(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(priorityKey{}).(string)
	return p, ok
}

// checkPriority accepts what a class name reasonably is; anything else is more
// likely a bug (a user ID, a sentence) than a class, and is refused before it
// reaches a header.
func checkPriority(p string) error {
	if p == "" || len(p) > 64 {
		return fmt.Errorf("%s %q must be 1-64 characters long", contract.HeaderPriority, p)
	}
	for _, r := range p {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("%s %q may hold only letters, digits, '-', '_' and '.'", contract.HeaderPriority, p)
		}
	}
	return nil
}

// timeoutMs is the X-Sluice-Timeout-Ms value for remaining time left. It
// rounds down, so the gateway never believes the caller will wait longer than
// it will, but never below 1: 0 would read as "no time at all" to a gateway
// while the caller still has a fraction of a millisecond.
func timeoutMs(left time.Duration) int64 {
	return max(1, int64(left/time.Millisecond))
}

// headerInt parses a non-negative integer header; absent is (0, false, nil).
func headerInt(h http.Header, name string) (int64, bool, error) {
	v := h.Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("client: request header %s: %q is not a non-negative integer", name, v)
	}
	return n, true, nil
}

// serverDelayMs reads a millisecond count sent by the server (retry-after-ms,
// X-Sluice-Estimated-Wait-Ms). OpenAI's servers send fractions, so floats are
// accepted; anything unparsable, negative or not finite counts as absent,
// since a server's bad header is no reason to fail the caller's request.
func serverDelayMs(h http.Header, name string) (time.Duration, bool) {
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(ms) || ms < 0 {
		return 0, false
	}
	return durationOf(ms * float64(time.Millisecond)), true
}

// retryAfter reads the server's retry delay: retry-after-ms when present and
// valid, else Retry-After in whole seconds or as an HTTP date (relative to
// now).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := serverDelayMs(h, contract.HeaderRetryAfterMs); ok {
		return d, true
	}
	v := h.Get(contract.HeaderRetryAfter)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs < 0 {
			return 0, false
		}
		return durationOf(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// durationOf converts nanoseconds to a Duration, saturating instead of
// overflowing: a Retry-After of 1e30 seconds is "too long", not negative.
func durationOf(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}
