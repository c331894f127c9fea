package loadgen

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/contract"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a virtual clock: Sleep advances it instead of waiting, and
// records what was asked for, so waits are asserted rather than slept
// through. Its WithTimeout never fires on its own; tests of real timeouts
// use the wall clock with short bounds.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return nil
}

func (c *fakeClock) WithTimeout(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// seen is one request as the test server received it.
type seen struct {
	priority, timeoutMs, attempt string
	header                       http.Header
	body                         string
}

// recorder is a loopback test server that records every request and answers
// with the handler the test supplies.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		n := len(rec.reqs)
		rec.reqs = append(rec.reqs, seen{
			priority:  r.Header.Get(contract.HeaderPriority),
			timeoutMs: r.Header.Get(contract.HeaderTimeoutMs),
			attempt:   r.Header.Get(contract.HeaderAttempt),
			header:    r.Header.Clone(),
			body:      string(body),
		})
		rec.mu.Unlock()
		if r.URL.Path != ChatCompletionsPath || r.Method != http.MethodPost {
			http.Error(w, "wrong endpoint "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		answer(w, r, n)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) seen() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.reqs...)
}

func (rec *recorder) field(f func(seen) string) []string {
	var out []string
	for _, s := range rec.seen() {
		out = append(out, f(s))
	}
	return out
}

func ok(w http.ResponseWriter, _ *http.Request, _ int) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
}

// reject answers like a sluice gateway rejecting a request.
func reject(w http.ResponseWriter, status int, reason string, retryAfterMs string, estimatedMs string) {
	if reason != "" {
		w.Header().Set(contract.HeaderReason, reason)
	}
	if retryAfterMs != "" {
		w.Header().Set(contract.HeaderRetryAfterMs, retryAfterMs)
	}
	if estimatedMs != "" {
		w.Header().Set(contract.HeaderEstimatedWaitMs, estimatedMs)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, `{"error":{"message":"overloaded","type":"overloaded","code":"`+reason+`"}}`)
}

// oneClass is a single-class mix, so that tests control the deadline.
func oneClass(name string, deadline time.Duration) []Class {
	return []Class{{Name: name, Weight: 1, Deadline: deadline}}
}

func mustRun(t *testing.T, cfg Config, e env) *Report {
	t.Helper()
	rep, err := run(context.Background(), cfg, e)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return rep
}

// bufferBody reads a response body into memory and closes it.
func bufferBody(resp *http.Response) (*http.Response, error) {
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}
