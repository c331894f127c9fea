package loadgen

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// checkFelt checks the figures of what callers felt, overall and for the one
// class of a oneClass run.
func checkFelt(t *testing.T, rep *Report, unanswered, refusals int, refusalMs float64) {
	t.Helper()
	if len(rep.Classes) != 1 {
		t.Fatalf("%d classes, want 1", len(rep.Classes))
	}
	cr := rep.Classes[0]
	wantRatio := float64(unanswered) / float64(rep.Attempts)
	if rep.Unanswered != unanswered || rep.UnansweredRatio != wantRatio {
		t.Errorf("unanswered %d (ratio %v) of %d attempts, want %d (%v)", rep.Unanswered, rep.UnansweredRatio, rep.Attempts, unanswered, wantRatio)
	}
	if cr.Unanswered != rep.Unanswered || cr.UnansweredRatio != rep.UnansweredRatio {
		t.Errorf("class: unanswered %d ratio %v, want the report's %d %v", cr.Unanswered, cr.UnansweredRatio, rep.Unanswered, rep.UnansweredRatio)
	}
	if rep.RefusalTime.Count != refusals {
		t.Errorf("refusal time counted %d refusals, want %d (%+v)", rep.RefusalTime.Count, refusals, rep.RefusalTime)
	}
	if refusalMs >= 0 && (rep.RefusalTime.P50Ms != refusalMs || rep.RefusalTime.MaxMs != refusalMs) {
		t.Errorf("refusal time = %+v, want every refusal at %vms", rep.RefusalTime, refusalMs)
	}
	if cr.RefusalTime != rep.RefusalTime {
		t.Errorf("class refusal time %+v, want the report's %+v", cr.RefusalTime, rep.RefusalTime)
	}
}

func TestUnansweredAndRefusalTime(t *testing.T) {
	// One attempt, a 1s deadline; the server takes serviceIn of virtual time
	// before it answers. For polite the attempt's timeout is the deadline;
	// naive's hour-long timeout keeps it waiting past the deadline, and it
	// hears what comes then: a refusal, or a late answer — not silence.
	for _, tc := range []struct {
		name       string
		policy     Policy
		serviceIn  time.Duration
		answer     func(w http.ResponseWriter, r *http.Request)
		unanswered int
		refusals   int
	}{
		{"answer in time", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, r *http.Request) { ok(w, r, 0) }, 0, 0},
		{"503 in time", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, _ *http.Request) {
			reject(w, http.StatusServiceUnavailable, "queue_wait", "100", "900")
		}, 0, 1},
		{"bare 429 in time", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
		}, 0, 1},
		{"500 with a sluice reason", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, _ *http.Request) {
			reject(w, http.StatusInternalServerError, "upstream_error", "", "")
		}, 0, 1},
		// An error status is an answer of sorts, not a silence, but not
		// one of the refusals that are timed.
		{"bare 500 in time", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
		}, 0, 0},
		{"connection dropped in time", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, _ *http.Request) {
			panic(http.ErrAbortHandler)
		}, 0, 0},
		{"stream broken off in time", Polite{}, 300 * time.Millisecond, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"partial":`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, 0, 0},
		{"503 after the deadline", Naive{}, 2 * time.Second, func(w http.ResponseWriter, _ *http.Request) {
			reject(w, http.StatusServiceUnavailable, "queue_wait", "100", "900")
		}, 0, 1},
		{"answer after the deadline", Naive{}, 2 * time.Second, func(w http.ResponseWriter, r *http.Request) { ok(w, r, 0) }, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				clk.Advance(tc.serviceIn)
				tc.answer(w, r)
			})
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 10, MaxRequests: 1, MaxAttempts: 1, Policy: tc.policy,
				AttemptTimeout: time.Hour, Classes: oneClass("interactive", time.Second),
			}, env{clock: clk})
			if rep.Attempts != 1 {
				t.Fatalf("attempts = %d, want 1", rep.Attempts)
			}
			refusalMs := -1.0
			if tc.refusals > 0 {
				refusalMs = float64(tc.serviceIn.Milliseconds())
			}
			checkFelt(t, rep, tc.unanswered, tc.refusals, refusalMs)
		})
	}
}

// shortFirst gives the first attempt 50ms and later ones 10s, and retries
// at once: a caller whose first attempt times out and whose retry is
// refused.
type shortFirst struct{}

func (shortFirst) AttemptTimeout(_ *Request, n int, _ time.Time) time.Duration {
	if n == 0 {
		return 50 * time.Millisecond
	}
	return 10 * time.Second
}

func (shortFirst) Retry(_ *Request, a *Attempt, _ time.Time) (time.Duration, bool) {
	return 0, Retryable(a)
}

func TestUnansweredWhenTheAttemptTimeoutPasses(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			<-r.Context().Done() // hold until the caller gives up
			return
		}
		reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
	})
	// The wall clock, so that the first attempt's timeout really fires; it
	// is short and bounds the test.
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 1000, MaxRequests: 1, MaxAttempts: 2,
		Policy:  RulePolicy("short-first", shortFirst{}),
		Classes: oneClass("interactive", 20*time.Second),
	}, env{clock: wallClock{}})
	if rep.Attempts != 2 || rep.Rejections[ReasonTimeout] != 1 || rep.Rejections["queue_full"] != 1 {
		t.Fatalf("attempts %d rejections %v, want a timeout and a queue_full", rep.Attempts, rep.Rejections)
	}
	// The timed-out attempt is unanswered, the refused one is not; the
	// refusal's time is the wall clock's, so only its count is pinned.
	checkFelt(t, rep, 1, 1, -1)
}

func TestUnansweredLeavesOutUnsentAttempts(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		<-r.Context().Done() // hold until the caller gives up
	})
	// The wall clock, so that the attempt's timeout really fires; it is
	// short and bounds the test. The three arrivals come within a few
	// milliseconds, while the first attempt holds the one place.
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 1000, MaxRequests: 3, MaxInFlight: 1, MaxAttempts: 1,
		AttemptTimeout: 200 * time.Millisecond, Classes: oneClass("interactive", 20*time.Second),
	}, env{clock: wallClock{}})
	if rep.Attempts != 1 || rep.ClientOverflow != 2 {
		t.Fatalf("attempts %d overflow %d, want 1 and 2", rep.Attempts, rep.ClientOverflow)
	}
	// One sent attempt, timed out: 1 of 1, not 1 of 3.
	checkFelt(t, rep, 1, 0, -1)
}

func TestUnansweredWhenTheClientTimesOut(t *testing.T) {
	// A caller's own timeout need not be on the context: here it is the
	// HTTP client's wait for headers. The virtual clock never reaches the
	// deadline, so only the timeout itself can say the caller gave up.
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done()
	})
	tr := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	t.Cleanup(tr.CloseIdleConnections)
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, MaxAttempts: 1, Client: &http.Client{Transport: tr},
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: newFakeClock()})
	if rep.Rejections[ReasonTimeout] != 1 {
		t.Fatalf("rejections = %v, want timeout: 1", rep.Rejections)
	}
	checkFelt(t, rep, 1, 0, -1)
}

func TestRefusalSettlesAtItsHeaders(t *testing.T) {
	// A 503 whose headers arrive at once and whose body then drags on past
	// the deadline: the caller heard "no" in time, however long the error
	// body took.
	clk := newFakeClock()
	reading := make(chan struct{})
	var once sync.Once
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body = &onFirstRead{ReadCloser: resp.Body, f: func() { once.Do(func() { close(reading) }) }}
		}
		return resp, err
	})}
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		clk.Advance(100 * time.Millisecond)
		w.Header().Set(contract.HeaderReason, "queue_full")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":`)
		w.(http.Flusher).Flush()
		<-reading
		clk.Advance(2 * time.Second)
		io.WriteString(w, `{"code":"queue_full"}}`)
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, MaxAttempts: 1, Policy: Polite{}, Client: client,
		Classes: oneClass("interactive", time.Second),
	}, env{clock: clk})
	checkFelt(t, rep, 0, 1, 100)
}
