package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/contract"
)

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		ms, sec string
		want    time.Duration
		ok      bool
	}{
		{name: "neither"},
		{name: "retry-after-ms", ms: "1500", want: 1500 * time.Millisecond, ok: true},
		{name: "fractional ms", ms: "12.5", want: 12500 * time.Microsecond, ok: true},
		{name: "ms preferred", ms: "250", sec: "3", want: 250 * time.Millisecond, ok: true},
		{name: "seconds", sec: "3", want: 3 * time.Second, ok: true},
		{name: "bad ms falls back to seconds", ms: "soon", sec: "2", want: 2 * time.Second, ok: true},
		{name: "negative ms falls back", ms: "-1", sec: "1", want: time.Second, ok: true},
		{name: "HTTP date", sec: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second, ok: true},
		{name: "HTTP date in the past", sec: now.Add(-time.Minute).Format(http.TimeFormat), want: 0, ok: true},
		{name: "garbage", sec: "later", ok: false},
		{name: "NaN", sec: "NaN", ok: false},
		{name: "huge saturates", sec: "1e30", want: time.Duration(1<<63 - 1), ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.ms != "" {
				h.Set(contract.HeaderRetryAfterMs, tt.ms)
			}
			if tt.sec != "" {
				h.Set(contract.HeaderRetryAfter, tt.sec)
			}
			got, ok := retryAfter(h, now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("retryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestBackoffWithoutRetryAfter: a 503 that gives no delay is retried after
// Backoff, doubling, with the jitter drawn from the injected Rand.
func TestBackoffWithoutRetryAfter(t *testing.T) {
	g := newFakeGateway(t, reject(503, "", "", "", ""), reject(503, "", "", "", ""), ok)
	synctest.Test(t, func(t *testing.T) {
		// Rand 0.5: each wait is 3/4 of the doubled backoff: 300ms, then 600ms.
		c := newTestClient(t, Config{Backoff: 400 * time.Millisecond, Rand: func() float64 { return 0.5 }})
		start := time.Now()
		if _, err := do(t, c, newGET(t, t.Context(), g.URL)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 900*time.Millisecond {
			t.Fatalf("took %v, want 900ms", d)
		}
	})
}

// countingTransport counts attempts on the way to a real transport.
type countingTransport struct {
	http.RoundTripper
	n atomic.Int32
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.RoundTripper.RoundTrip(req)
}

func TestConnectionRefusedIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused

	synctest.Test(t, func(t *testing.T) {
		base := &countingTransport{RoundTripper: &http.Transport{DisableKeepAlives: true}}
		c := newTestClient(t, Config{Base: base, Rand: func() float64 { return 0 }})
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = c.RoundTrip(req)
		var opErr *net.OpError
		if !errors.As(err, &opErr) || !strings.Contains(err.Error(), string(GaveUpMaxAttempts)) {
			t.Fatalf("error = %v, want the dial error, after max attempts", err)
		}
		if n := base.n.Load(); n != 3 {
			t.Fatalf("%d attempts, want 3: a refused connection never reached the server, so even a POST is retried", n)
		}
		// Rand 0: each backoff is half the doubled base, 100ms then 200ms.
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Fatalf("took %v, want 300ms of backoff", d)
		}
	})
}

// TestConnectionDroppedAfterTheRequestWasSent: the server read the request
// and hung up. It may have acted on it, so only idempotent requests are sent
// again.
func TestConnectionDroppedAfterTheRequestWasSent(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		header  string // Idempotency-Key, if set
		retried bool
	}{
		{"POST is not resent", http.MethodPost, "", false},
		{"POST with Idempotency-Key is resent", http.MethodPost, "k-123", true},
		{"GET is resent", http.MethodGet, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGateway(t)
			g.handler = func(w http.ResponseWriter, r *http.Request) bool {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
				return true
			}
			synctest.Test(t, func(t *testing.T) {
				c := newTestClient(t, Config{MaxAttempts: 2})
				req, err := http.NewRequestWithContext(t.Context(), tt.method, g.URL, strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				if tt.header != "" {
					req.Header.Set("Idempotency-Key", tt.header)
				}
				if _, err := c.RoundTrip(req); err == nil {
					t.Fatal("RoundTrip succeeded against a server that hangs up")
				}
			})
			want := 1
			if tt.retried {
				want = 2
			}
			if n := len(g.requests()); n != want {
				t.Fatalf("gateway saw %d requests, want %d", n, want)
			}
		})
	}
}

// endless is an unbounded body source of the given size without GetBody.
type endless struct{ left int }

func (e *endless) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), e.left)
	clear(p[:n])
	e.left -= n
	return n, nil
}

func (e *endless) Close() error { return nil }

func TestBodyTooLargeToBufferIsSentOnceInFull(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "1000", "", ""), ok)
	const limit = 4096
	size := limit + 1000
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{MaxBufferedBody: limit})
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.URL, &endless{left: size})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.RoundTrip(req)
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.GaveUp != GaveUpBodyNotReplayable {
			t.Fatalf("error = %v, want a rejection not retried for its body", err)
		}
	})
	got := g.requests()
	if len(got) != 1 || len(got[0].body) != size || !bytes.Equal([]byte(got[0].body[:10]), make([]byte, 10)) {
		t.Fatalf("gateway saw %d requests (first body %d bytes), want 1 of %d bytes", len(got), len(got[0].body), size)
	}
}

func TestRejectedErrorMessage(t *testing.T) {
	tests := []struct {
		err  RejectedError
		want string
	}{
		{
			RejectedError{StatusCode: 503, Reason: "queue_wait", RetryAfter: 2 * time.Second, EstimatedWait: 1500 * time.Millisecond, Attempts: 1, GaveUp: GaveUpDeadline, Message: "wait 1.5s"},
			"sluice client: rejected with 503 (queue_wait), retry after 2s, estimated wait 1.5s; 1 attempt(s), gave up: deadline: wait 1.5s",
		},
		{
			RejectedError{Reason: ReasonClientThrottled, GaveUp: GaveUpThrottled},
			"sluice client: refused locally (client_throttled); 0 attempt(s), gave up: throttled",
		},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q\nwant      %q", got, tt.want)
		}
	}
}

// TestRoundTripDoesNotModifyTheRequest: the RoundTripper contract.
func TestRoundTripDoesNotModifyTheRequest(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "1000", "", ""), ok)
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{Priority: "batch"})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		req := newGET(t, ctx, g.URL)
		req.Header.Set("X-Custom", "1")
		if _, err := do(t, c, req); err != nil {
			t.Fatal(err)
		}
		if len(req.Header) != 1 || req.Header.Get("X-Custom") != "1" {
			t.Fatalf("caller's headers changed to %v", req.Header)
		}
	})
}

// TestErrorMessageOfOtherServers: the message of an error body is read
// whatever the other fields hold, since a server that is not sluice (the
// provider, a proxy) may send a numeric code or an object param.
func TestErrorMessageOfOtherServers(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"error":{"message":"queue full","type":"overloaded_error","param":null,"code":"queue_full","reason":"queue_full","estimated_wait_ms":5,"retry_after_ms":9}}`, "queue full"},
		{`{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":null}}`, "Rate limit reached"},
		{`{"error":{"message":"slow down","code":429,"param":{"name":"x"}}}`, "slow down"},
		{`{"error":"plain"}`, ""},
		{`not json`, ""},
	} {
		if got := errorMessage(strings.NewReader(tc.body)); got != tc.want {
			t.Errorf("errorMessage(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
