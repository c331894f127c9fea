package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/retrybudget"
)

func newGET(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestTimeoutHeaderFromContextDeadline(t *testing.T) {
	g := newFakeGateway(t)
	tests := []struct {
		name     string
		timeout  time.Duration // 0: no deadline
		callerMs string        // X-Sluice-Timeout-Ms set by the caller
		want     string        // "" means absent
	}{
		{name: "remaining time in ms", timeout: 1500 * time.Millisecond, want: "1500"},
		{name: "rounded down", timeout: 2*time.Second + 999*time.Microsecond, want: "2000"},
		{name: "at least 1", timeout: 300 * time.Microsecond, want: "1"},
		{name: "no deadline, no header", want: ""},
		{name: "no deadline keeps the caller's header", callerMs: "700", want: "700"},
		{name: "caller's smaller value wins", timeout: 5 * time.Second, callerMs: "700", want: "700"},
		{name: "deadline's smaller value wins", timeout: time.Second, callerMs: "7000", want: "1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newTestClient(t, Config{})
				ctx := t.Context()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				req := newGET(t, ctx, g.URL)
				if tt.callerMs != "" {
					req.Header.Set(contract.HeaderTimeoutMs, tt.callerMs)
				}
				if _, err := do(t, c, req); err != nil {
					t.Fatal(err)
				}
			})
			got := g.requests()
			if h := got[len(got)-1].header; h.Get(contract.HeaderTimeoutMs) != tt.want {
				t.Fatalf("%s = %q, want %q", contract.HeaderTimeoutMs, h.Get(contract.HeaderTimeoutMs), tt.want)
			}
		})
	}
}

func TestPriorityHeader(t *testing.T) {
	g := newFakeGateway(t)
	tests := []struct {
		name   string
		config string // Config.Priority
		ctx    string // WithPriority; "" means not set
		want   string
	}{
		{name: "none", want: ""},
		{name: "from context", ctx: "batch", want: "batch"},
		{name: "from config", config: "speculative", want: "speculative"},
		{name: "context overrides config", config: "speculative", ctx: "interactive", want: "interactive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, Config{Priority: tt.config})
			ctx := t.Context()
			if tt.ctx != "" {
				ctx = WithPriority(ctx, tt.ctx)
			}
			if _, err := do(t, c, newGET(t, ctx, g.URL)); err != nil {
				t.Fatal(err)
			}
			got := g.requests()
			if h := got[len(got)-1].header.Get(contract.HeaderPriority); h != tt.want {
				t.Fatalf("%s = %q, want %q", contract.HeaderPriority, h, tt.want)
			}
		})
	}
}

func TestInvalidPriorityIsAnErrorAndNothingIsSent(t *testing.T) {
	g := newFakeGateway(t)
	c := newTestClient(t, Config{})
	body := &closeRecorder{Reader: strings.NewReader("{}")}
	req, err := http.NewRequestWithContext(WithPriority(t.Context(), "very important!"), http.MethodPost, g.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), contract.HeaderPriority) || !strings.Contains(err.Error(), "WithPriority") {
		t.Fatalf("RoundTrip error = %v, want one naming %s and WithPriority", err, contract.HeaderPriority)
	}
	if n := len(g.requests()); n != 0 {
		t.Fatalf("gateway saw %d requests, want 0", n)
	}
	if !body.closed {
		t.Fatal("request body not closed, as the RoundTripper contract requires")
	}
}

func TestInvalidAttemptHeaderIsAnError(t *testing.T) {
	g := newFakeGateway(t)
	c := newTestClient(t, Config{})
	req := newGET(t, t.Context(), g.URL)
	req.Header.Set(contract.HeaderAttempt, "-1")
	if _, err := c.RoundTrip(req); err == nil || !strings.Contains(err.Error(), contract.HeaderAttempt) {
		t.Fatalf("RoundTrip error = %v, want one naming %s", err, contract.HeaderAttempt)
	}
}

// TestWaitsForRetryAfterAndRetries checks the attempt header increments, that
// each wait is the one the server asked for (exactly, in fake time), and that
// the deadline header shrinks by the time spent.
func TestWaitsForRetryAfterAndRetries(t *testing.T) {
	g := newFakeGateway(t,
		reject(503, "queue_full", "250", "1", ""),
		reject(429, "retry_budget", "", "2", ""), // Retry-After alone: 2s
		ok,
	)
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := do(t, c, newGET(t, ctx, g.URL))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		if d := time.Since(start); d != 2250*time.Millisecond {
			t.Fatalf("took %v, want 2.25s: 250ms from retry-after-ms (preferred over Retry-After), then 2s", d)
		}
	})
	got := g.requests()
	if len(got) != 3 {
		t.Fatalf("gateway saw %d requests, want 3", len(got))
	}
	for i, want := range []struct{ attempt, timeout string }{{"0", "10000"}, {"1", "9750"}, {"2", "7750"}} {
		h := got[i].header
		if h.Get(contract.HeaderAttempt) != want.attempt || h.Get(contract.HeaderTimeoutMs) != want.timeout {
			t.Errorf("request %d: %s=%q %s=%q, want %q %q", i,
				contract.HeaderAttempt, h.Get(contract.HeaderAttempt), contract.HeaderTimeoutMs, h.Get(contract.HeaderTimeoutMs), want.attempt, want.timeout)
		}
	}
}

func TestGivesUpAtOnceWhenRetryAfterExceedsDeadline(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_wait", "", "5", "4500"))
	var err error
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err = do(t, c, newGET(t, ctx, g.URL))
		if d := time.Since(start); d != 0 {
			t.Errorf("gave up after %v, want at once", d)
		}
	})
	var rej *RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("error %v (%T) is not a *RejectedError", err, err)
	}
	want := RejectedError{
		StatusCode: 503, Reason: "queue_wait", RetryAfter: 5 * time.Second, EstimatedWait: 4500 * time.Millisecond,
		Message: "rejected: queue_wait", Attempts: 1, GaveUp: GaveUpDeadline,
	}
	if *rej != want {
		t.Fatalf("rejection = %+v, want %+v", *rej, want)
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("gateway saw %d requests, want 1", n)
	}
}

// TestRetryAfterEqualToDeadlineIsNotRetried pins the boundary: a retry that
// would be sent exactly at the deadline has no time left to be served.
func TestRetryAfterEqualToDeadlineIsNotRetried(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_wait", "2000", "", ""), ok)
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := do(t, c, newGET(t, ctx, g.URL))
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.GaveUp != GaveUpDeadline {
			t.Fatalf("error = %v, want a rejection given up on the deadline", err)
		}
	})
}

func TestGivesUpWhenRetryAfterExceedsMaxRetryDelay(t *testing.T) {
	g := newFakeGateway(t, reject(429, "tenant_budget", "", "3600", ""), ok)
	c := newTestClient(t, Config{MaxRetryDelay: time.Minute})
	_, err := do(t, c, newGET(t, t.Context(), g.URL)) // no deadline
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.GaveUp != GaveUpMaxDelay || rej.RetryAfter != time.Hour || rej.StatusCode != 429 {
		t.Fatalf("error = %v, want a 429 rejection with a 1h retry delay, given up on MaxRetryDelay", err)
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "1000", "", ""))
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{MaxAttempts: 4})
		_, err := do(t, c, newGET(t, t.Context(), g.URL))
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.GaveUp != GaveUpMaxAttempts || rej.Attempts != 4 {
			t.Fatalf("error = %v, want a rejection after 4 attempts, given up on max attempts", err)
		}
	})
	if n := len(g.requests()); n != 4 {
		t.Fatalf("gateway saw %d requests, want 4", n)
	}
}

func TestRetryBudgetStopsRetries(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "1000", "", ""))
	synctest.Test(t, func(t *testing.T) {
		// A floor this low earns nothing in the test; only deposits count:
		// every 10 first attempts pay for one retry.
		budget, err := retrybudget.New(retrybudget.Config{MinPerSecond: 1e-6, MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		c := newTestClient(t, Config{RetryBudget: budget, MaxAttempts: 2})
		var allowed, refused int
		for range 20 {
			_, err := do(t, c, newGET(t, t.Context(), g.URL))
			var rej *RejectedError
			if !errors.As(err, &rej) {
				t.Fatalf("error = %v, want a rejection", err)
			}
			switch rej.GaveUp {
			case GaveUpMaxAttempts: // the retry was sent, and rejected too
				allowed++
			case GaveUpRetryBudget:
				refused++
				if rej.Attempts != 1 || rej.Reason != "queue_full" {
					t.Fatalf("rejection = %+v, want the last (first) rejection by the gateway", rej)
				}
			default:
				t.Fatalf("gave up on %s", rej.GaveUp)
			}
		}
		if allowed != 2 || refused != 18 {
			t.Fatalf("retries allowed %d, refused %d; want 2 and 18 (10%% of 20 first attempts)", allowed, refused)
		}
		if st := budget.Stats(); st.Deposits != 20 || st.Withdrawals != 2 || st.Refusals != 18 {
			t.Fatalf("budget stats %+v", st)
		}
	})
	if n := len(g.requests()); n != 22 {
		t.Fatalf("gateway saw %d requests, want 22", n)
	}
}

// TestRetryAboveTheTransportIsChargedToTheBudget: a request that arrives
// already marked as a retry (by the OpenAI SDK, say) is a retry for the
// budget too, and its attempt numbering continues.
func TestRetryAboveTheTransportIsChargedToTheBudget(t *testing.T) {
	g := newFakeGateway(t)
	budget, err := retrybudget.New(retrybudget.Config{MinPerSecond: 1e-6, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, Config{RetryBudget: budget})
	req := newGET(t, t.Context(), g.URL)
	req.Header.Set(contract.HeaderStainlessRetryCount, "2")
	_, err = do(t, c, req)
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Reason != ReasonClientRetryBudget || rej.StatusCode != 0 {
		t.Fatalf("error = %v, want a local %s rejection", err, ReasonClientRetryBudget)
	}
	if n := len(g.requests()); n != 0 {
		t.Fatalf("gateway saw %d requests, want 0", n)
	}

	for range 10 { // ten first attempts earn one retry
		if _, err := do(t, c, newGET(t, t.Context(), g.URL)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := do(t, c, req.Clone(t.Context())); err != nil {
		t.Fatalf("a funded retry: %v", err)
	}
	got := g.requests()
	if h := got[len(got)-1].header; h.Get(contract.HeaderAttempt) != "2" || h.Get(contract.HeaderStainlessRetryCount) != "2" {
		t.Fatalf("attempt headers %q/%q, want 2/2", h.Get(contract.HeaderAttempt), h.Get(contract.HeaderStainlessRetryCount))
	}
}

func TestOtherStatusesAreReturnedAsTheyAre(t *testing.T) {
	g := newFakeGateway(t, reply{status: 500, body: "boom"}, ok)
	c := newTestClient(t, Config{})
	resp, err := c.HTTPClient().Get(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || string(b) != "boom" {
		t.Fatalf("got %d %q, want the 500 as sent", resp.StatusCode, b)
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("gateway saw %d requests, want 1", n)
	}
}

func TestExpiredDeadlineSendsNothing(t *testing.T) {
	g := newFakeGateway(t)
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		time.Sleep(time.Second) // fake time: the deadline passes
		if _, err := do(t, c, newGET(t, ctx, g.URL)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error = %v, want context.DeadlineExceeded", err)
		}
	})
	if n := len(g.requests()); n != 0 {
		t.Fatalf("gateway saw %d requests, want 0", n)
	}
}

func TestCancelDuringRetryWaitReturnsPromptly(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "30000", "", ""), ok)
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := do(t, c, newGET(t, ctx, g.URL))
			errc <- err
		}()
		time.Sleep(10 * time.Second) // fake time; the client is waiting out its 30s
		synctest.Wait()
		start := time.Now()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("returned %v after cancel, want at once", d)
		}
	})
	if n := len(g.requests()); n != 1 {
		t.Fatalf("gateway saw %d requests, want 1", n)
	}
}

// closeRecorder is a request body without GetBody that records Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestBodyReplayedOnRetry(t *testing.T) {
	const payload = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name string
		body func() io.Reader
	}{
		{"with GetBody", func() io.Reader { return strings.NewReader(payload) }},
		{"without GetBody, buffered", func() io.Reader { return &closeRecorder{Reader: strings.NewReader(payload)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGateway(t, reject(503, "queue_full", "1000", "", ""), reject(503, "queue_full", "1000", "", ""), ok)
			synctest.Test(t, func(t *testing.T) {
				c := newTestClient(t, Config{})
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.URL, tt.body())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := do(t, c, req); err != nil {
					t.Fatal(err)
				}
				if cr, isRecorder := req.Body.(*closeRecorder); isRecorder && !cr.closed {
					t.Error("the caller's body was not closed")
				}
			})
			got := g.requests()
			if len(got) != 3 {
				t.Fatalf("gateway saw %d requests, want 3", len(got))
			}
			for i, s := range got {
				if s.body != payload {
					t.Errorf("attempt %d body = %q, want %q", i, s.body, payload)
				}
			}
		})
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{BaseURL: "gateway:8080"}, "BaseURL"},
		{Config{BaseURL: "ftp://gateway"}, "BaseURL"},
		{Config{BaseURL: "http://[::1"}, "BaseURL"},
		{Config{MaxAttempts: -1}, "MaxAttempts"},
		{Config{MaxRetryDelay: -time.Second}, "MaxRetryDelay"},
		{Config{Backoff: -time.Second}, "Backoff"},
		{Config{MaxBufferedBody: -1}, "MaxBufferedBody"},
		{Config{Priority: "not a class"}, "Priority"},
		{Config{ThrottleK: 0.5}, "ThrottleK"},
		{Config{ThrottleK: -2}, "ThrottleK"},
		{Config{ThrottleK: 2, ThrottleWindow: time.Millisecond}, "ThrottleWindow"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("New(%+v) error = %v, want one naming %s", tt.cfg, err, tt.field)
		}
		if _, err := NewHTTPClient(tt.cfg); err == nil {
			t.Errorf("NewHTTPClient(%+v) accepted an invalid config", tt.cfg)
		}
	}
}
