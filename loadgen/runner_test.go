package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
)

func TestNaiveRetriesAtOnceOn503(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set(contract.HeaderRetryAfter, "7")
		reject(w, http.StatusServiceUnavailable, "queue_full", "7000", "6500")
	})
	clk := newFakeClock()
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, Seed: 3,
		Classes: oneClass("interactive", 10*time.Second),
		Policy:  Naive{},
	}, env{clock: clk})

	if got, want := srv.field(func(s seen) string { return s.attempt }), []string{"0", "1", "2"}; !slices.Equal(got, want) {
		t.Errorf("X-Sluice-Attempt sent = %v, want %v", got, want)
	}
	// Naive ignores Retry-After (7s): the only sleep is the wait for the
	// arrival itself.
	if s := clk.Sleeps(); len(s) != 1 {
		t.Errorf("sleeps = %v, want only the arrival wait", s)
	}
	// And every attempt gets the same fixed timeout, half the deadline.
	if got, want := srv.field(func(s seen) string { return s.timeoutMs }), []string{"5000", "5000", "5000"}; !slices.Equal(got, want) {
		t.Errorf("X-Sluice-Timeout-Ms sent = %v, want %v", got, want)
	}
	if rep.Requests != 1 || rep.Attempts != 3 || rep.AttemptsPerRequest != 3 {
		t.Errorf("requests/attempts = %d/%d (%.2f), want 1/3 (3.00)", rep.Requests, rep.Attempts, rep.AttemptsPerRequest)
	}
	if rep.Rejections["queue_full"] != 3 || rep.StatusCodes[503] != 3 || rep.Failures["queue_full"] != 1 {
		t.Errorf("rejections %v, status %v, failures %v", rep.Rejections, rep.StatusCodes, rep.Failures)
	}
	if rep.EstimatedWait != (WaitStats{Seen: 3, MedianMs: 6500, MaxMs: 6500}) {
		t.Errorf("estimated wait = %+v", rep.EstimatedWait)
	}
	if rep.OnTime != 0 || rep.Goodput != 0 || rep.SuccessRatio != 0 {
		t.Errorf("on time %d goodput %v success %v, want zeros", rep.OnTime, rep.Goodput, rep.SuccessRatio)
	}
}

func TestPoliteWaitsRetryAfterMs(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			w.Header().Set(contract.HeaderRetryAfter, "1") // retry-after-ms wins
			reject(w, http.StatusServiceUnavailable, "queue_wait", "300", "250")
			return
		}
		ok(w, r, n)
	})
	clk := newFakeClock()
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1,
		Classes: oneClass("batch", 10*time.Second),
		Policy:  Polite{},
	}, env{clock: clk})

	if s := clk.Sleeps(); len(s) != 2 || s[1] != 300*time.Millisecond {
		t.Errorf("sleeps = %v, want [arrival 300ms]", s)
	}
	if got, want := srv.field(func(s seen) string { return s.attempt }), []string{"0", "1"}; !slices.Equal(got, want) {
		t.Errorf("X-Sluice-Attempt sent = %v, want %v", got, want)
	}
	// Each attempt is given exactly what is left of the deadline.
	if got, want := srv.field(func(s seen) string { return s.timeoutMs }), []string{"10000", "9700"}; !slices.Equal(got, want) {
		t.Errorf("X-Sluice-Timeout-Ms sent = %v, want %v", got, want)
	}
	if rep.OnTime != 1 || rep.Late != 0 || rep.Attempts != 2 {
		t.Errorf("on time %d late %d attempts %d, want 1 0 2", rep.OnTime, rep.Late, rep.Attempts)
	}
	// Latency runs from the arrival and includes the wait.
	if rep.Latency.P50Ms != 300 {
		t.Errorf("latency p50 = %vms, want 300ms", rep.Latency.P50Ms)
	}
}

func TestPoliteUsesRetryAfterSecondsWithoutMs(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			w.Header().Set(contract.HeaderRetryAfter, "2")
			reject(w, http.StatusTooManyRequests, "tenant_budget", "", "")
			return
		}
		ok(w, r, n)
	})
	clk := newFakeClock()
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1,
		Classes: oneClass("batch", 30*time.Second), Policy: Polite{},
	}, env{clock: clk})
	if s := clk.Sleeps(); len(s) != 2 || s[1] != 2*time.Second {
		t.Errorf("sleeps = %v, want [arrival 2s]", s)
	}
	if rep.OnTime != 1 {
		t.Errorf("on time = %d, want 1", rep.OnTime)
	}
}

func TestPoliteGivesUpWhenWaitPassesDeadline(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reject(w, http.StatusServiceUnavailable, "queue_wait", "20000", "19000")
	})
	clk := newFakeClock()
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1,
		Classes: oneClass("interactive", 10*time.Second), Policy: Polite{},
	}, env{clock: clk})
	if n := len(srv.seen()); n != 1 {
		t.Errorf("server saw %d attempts, want 1: a 20s wait cannot fit a 10s deadline", n)
	}
	if s := clk.Sleeps(); len(s) != 1 {
		t.Errorf("sleeps = %v, want only the arrival wait", s)
	}
	if rep.Failures["queue_wait"] != 1 || rep.AttemptsPerRequest != 1 {
		t.Errorf("failures %v attempts/request %v", rep.Failures, rep.AttemptsPerRequest)
	}
}

func TestNoRetryOfClientErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   int // attempts with MaxAttempts 3
	}{
		{http.StatusBadRequest, 1},
		{http.StatusUnauthorized, 1},
		{http.StatusNotFound, 1},
		{http.StatusRequestTimeout, 3},
		{http.StatusTooManyRequests, 3},
		{http.StatusInternalServerError, 3},
		{http.StatusBadGateway, 3},
	} {
		for _, p := range []Policy{Naive{}, Polite{Backoff: time.Millisecond}} {
			t.Run(p.Name()+"/"+strconv.Itoa(tc.status), func(t *testing.T) {
				srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
					w.WriteHeader(tc.status)
				})
				rep := mustRun(t, Config{
					Target: srv.URL, Rate: 10, MaxRequests: 1, Policy: p,
					Classes: oneClass("interactive", 10*time.Second),
				}, env{clock: newFakeClock()})
				if rep.Attempts != tc.want {
					t.Errorf("attempts = %d, want %d", rep.Attempts, tc.want)
				}
				if got := rep.Failures[strconv.Itoa(tc.status)]; got != 1 {
					t.Errorf("failures = %v, want %d: 1", rep.Failures, tc.status)
				}
			})
		}
	}
}

func TestReasonsCounted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		want   string
		status int
	}{
		{"sluice reason 503", func(w http.ResponseWriter, _ *http.Request) {
			reject(w, http.StatusServiceUnavailable, "queue_wait", "100", "900")
		}, "queue_wait", 503},
		{"sluice reason 429", func(w http.ResponseWriter, _ *http.Request) {
			reject(w, http.StatusTooManyRequests, "retry_budget", "100", "")
		}, "retry_budget", 429},
		{"bare status", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
		}, "500", 500},
		{"connection dropped", func(w http.ResponseWriter, _ *http.Request) {
			panic(http.ErrAbortHandler) // closes the connection, no response
		}, ReasonConnectionError, 0},
		{"stream broken off", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"partial":`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, ReasonStreamError, 200},
		{"attempt timeout", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // hold until the client gives up
		}, ReasonTimeout, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) { tc.answer(w, r) })
			// The wall clock, so that the attempt timeout really fires;
			// it is short and bounds the test.
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 1000, MaxRequests: 1, MaxAttempts: 1,
				AttemptTimeout: 50 * time.Millisecond,
				Classes:        oneClass("interactive", 5*time.Second),
			}, env{clock: wallClock{}})
			if rep.Rejections[tc.want] != 1 || rep.Failures[tc.want] != 1 {
				t.Errorf("rejections %v failures %v, want %s: 1 in both", rep.Rejections, rep.Failures, tc.want)
			}
			if tc.status != 0 && rep.StatusCodes[tc.status] != 1 {
				t.Errorf("status codes %v, want %d: 1", rep.StatusCodes, tc.status)
			}
			if rep.Answered != 0 {
				t.Errorf("answered = %d, want 0", rep.Answered)
			}
		})
	}
}

func TestGoodputExcludesLateAnswers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		serviceIn time.Duration // virtual time the server takes
		onTime    int
	}{
		{"on time", 400 * time.Millisecond, 1},
		{"late", 2 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
				clk.Advance(tc.serviceIn)
				ok(w, r, n)
			})
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 10, MaxRequests: 1, Policy: Polite{},
				Classes: oneClass("interactive", time.Second),
			}, env{clock: clk})
			if rep.Answered != 1 {
				t.Fatalf("answered = %d, want 1", rep.Answered)
			}
			if rep.OnTime != tc.onTime || rep.Late != 1-tc.onTime || rep.Failures[ReasonLate] != 1-tc.onTime {
				t.Errorf("on time %d late %d failures %v", rep.OnTime, rep.Late, rep.Failures)
			}
			wantGoodput := float64(tc.onTime) / rep.WindowSeconds
			if rep.WindowSeconds <= 0 || rep.Goodput != wantGoodput {
				t.Errorf("goodput = %v over %vs, want %v", rep.Goodput, rep.WindowSeconds, wantGoodput)
			}
			if rep.SuccessRatio != float64(tc.onTime) {
				t.Errorf("success ratio = %v, want %d", rep.SuccessRatio, tc.onTime)
			}
			// The late answer's latency is still measured, so the tail
			// shows how late it was.
			if want := float64(tc.serviceIn.Milliseconds()); rep.Latency.P99Ms != want {
				t.Errorf("p99 = %vms, want %vms", rep.Latency.P99Ms, want)
			}
		})
	}
}

func TestRequestShapeAndHeaders(t *testing.T) {
	srv := newRecorder(t, ok)
	classes := []Class{
		{Name: "interactive", Weight: 1, Deadline: 2 * time.Second},
		{Name: "batch", Weight: 1, Deadline: 8 * time.Second},
	}
	rep := mustRun(t, Config{
		Target: srv.URL + "/", Rate: 100, MaxRequests: 20, Seed: 9,
		Classes: classes, Model: "tiny-model", MaxTokens: 7, APIKey: "sk-test",
		Headers: http.Header{"X-Tenant": {"acme"}},
	}, env{clock: newFakeClock()})
	if rep.Requests != 20 || rep.OnTime != 20 {
		t.Fatalf("requests %d on time %d, want 20 20", rep.Requests, rep.OnTime)
	}
	wantTimeout := map[string]string{"interactive": "1000", "batch": "4000"} // half the deadline
	perClass := map[string]int{}
	bodies := map[string]bool{} // each logical request its own bytes (requestBody)
	for _, s := range srv.seen() {
		if bodies[s.body] {
			t.Errorf("two requests sent the same body %s", s.body)
		}
		bodies[s.body] = true
		perClass[s.priority]++
		if s.timeoutMs != wantTimeout[s.priority] {
			t.Errorf("class %q sent X-Sluice-Timeout-Ms %q, want %q", s.priority, s.timeoutMs, wantTimeout[s.priority])
		}
		if s.attempt != "0" {
			t.Errorf("X-Sluice-Attempt = %q, want 0", s.attempt)
		}
		if got := s.header.Get("Authorization"); got != "Bearer sk-test" {
			t.Errorf("Authorization = %q", got)
		}
		if got := s.header.Get("X-Tenant"); got != "acme" {
			t.Errorf("X-Tenant = %q", got)
		}
		if got := s.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q", got)
		}
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
			MaxTokens int   `json:"max_tokens"`
			Stream    *bool `json:"stream"`
			Seed      *int  `json:"seed"`
		}
		if err := json.Unmarshal([]byte(s.body), &body); err != nil {
			t.Fatalf("body %q: %v", s.body, err)
		}
		if body.Model != "tiny-model" || body.MaxTokens != 7 || len(body.Messages) != 1 || body.Messages[0].Role != "user" || body.Stream != nil || body.Seed == nil {
			t.Errorf("body = %s", s.body)
		}
	}
	for _, c := range rep.Classes {
		if c.Requests != perClass[c.Name] {
			t.Errorf("class %s: report says %d requests, server saw %d", c.Name, c.Requests, perClass[c.Name])
		}
	}
	if perClass["interactive"] == 0 || perClass["batch"] == 0 {
		t.Errorf("mix not drawn from both classes: %v", perClass)
	}
}

func TestConfiguredAttemptTimeoutIsSent(t *testing.T) {
	srv := newRecorder(t, ok)
	mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, AttemptTimeout: 750 * time.Millisecond,
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: newFakeClock()})
	if got := srv.field(func(s seen) string { return s.timeoutMs }); !slices.Equal(got, []string{"750"}) {
		t.Errorf("X-Sluice-Timeout-Ms = %v, want [750]", got)
	}
}

// A class's own attempt timeout is its callers': it wins over the run's,
// and the run's holds for the classes that set none.
func TestClassAttemptTimeoutIsSent(t *testing.T) {
	srv := newRecorder(t, ok)
	mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 20, AttemptTimeout: 750 * time.Millisecond,
		Classes: []Class{
			{Name: "interactive", Weight: 1, Deadline: 10 * time.Second, AttemptTimeout: 2 * time.Second},
			{Name: "batch", Weight: 1, Deadline: 30 * time.Second},
		},
	}, env{clock: newFakeClock()})
	want := map[string]string{"interactive": "2000", "batch": "750"}
	got := map[string]bool{}
	for _, s := range srv.seen() {
		if s.timeoutMs != want[s.priority] {
			t.Errorf("class %s sent X-Sluice-Timeout-Ms %s, want %s", s.priority, s.timeoutMs, want[s.priority])
		}
		got[s.priority] = true
	}
	if !got["interactive"] || !got["batch"] {
		t.Fatalf("classes sent: %v, want both", got)
	}
	bad := Config{Target: srv.URL, Rate: 1, MaxRequests: 1,
		Classes: []Class{{Name: "a", Weight: 1, Deadline: time.Second, AttemptTimeout: -1}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "Classes[0].AttemptTimeout") {
		t.Errorf("a negative class attempt timeout: %v, want an error naming Classes[0].AttemptTimeout", err)
	}
}

func TestStreamCountsLastByte(t *testing.T) {
	clk := newFakeClock()
	// reading is closed when the runner starts reading the body, i.e. after
	// the headers and first chunk arrived; only then does the stream go past
	// the deadline. A runner that stopped the clock at the headers would
	// therefore see an on-time answer.
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
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-reading
		clk.Advance(2 * time.Second)
		io.WriteString(w, "data: [DONE]\n\n")
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, Stream: true, Policy: Polite{}, Client: client,
		Classes: oneClass("interactive", time.Second),
	}, env{clock: clk})
	if rep.Answered != 1 || rep.Late != 1 || rep.OnTime != 0 {
		t.Errorf("answered %d late %d on time %d, want 1 1 0", rep.Answered, rep.Late, rep.OnTime)
	}
	if rep.Latency.P50Ms < 2000 {
		t.Errorf("latency = %vms, want >= 2000ms (measured to the last byte)", rep.Latency.P50Ms)
	}
	// Its last byte came, late: an answer, not silence (the attempt's own
	// timeout did not cut it first).
	if rep.Unanswered != 0 {
		t.Errorf("unanswered = %d, want 0: the answer came, late", rep.Unanswered)
	}
	s := srv.seen()
	if len(s) != 1 || s[0].header.Get("Accept") != "text/event-stream" {
		t.Fatalf("requests seen: %+v", s)
	}
	var body struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal([]byte(s[0].body), &body); err != nil || !body.Stream || !body.StreamOptions.IncludeUsage {
		t.Errorf("body %s: stream flags not set (%v)", s[0].body, err)
	}
}

func TestOverflowIsCountedNotDropped(t *testing.T) {
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		ok(w, r, n)
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 5, MaxInFlight: 1,
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: newFakeClock(), arrivalsDone: func() { close(release) }})
	if rep.Requests != 5 || rep.Attempts != 1 || rep.ClientOverflow != 4 || rep.Failures[ReasonClientOverflow] != 4 {
		t.Errorf("requests %d attempts %d overflow %d failures %v, want 5 1 4 client_overflow:4",
			rep.Requests, rep.Attempts, rep.ClientOverflow, rep.Failures)
	}
	if rep.OnTime != 1 {
		t.Errorf("on time = %d, want 1", rep.OnTime)
	}
	if n := len(srv.seen()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestRetryOverflowEndsRequest(t *testing.T) {
	// Two requests, one slot: the first holds it; the second's first attempt
	// is refused at arrival. Then the first fails and its retry finds the
	// slot free again, so only the arrival was refused.
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			<-release
			reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
			return
		}
		ok(w, r, n)
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 2, MaxInFlight: 1,
		Classes: oneClass("interactive", 10*time.Second),
	}, env{clock: newFakeClock(), arrivalsDone: func() { close(release) }})
	if rep.ClientOverflow != 1 || rep.OnTime != 1 || rep.Attempts != 2 {
		t.Errorf("overflow %d on time %d attempts %d, want 1 1 2", rep.ClientOverflow, rep.OnTime, rep.Attempts)
	}
}

func TestRunIsBoundedAndLeaksNothing(t *testing.T) {
	var hits atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		hits.Add(1)
		<-r.Context().Done() // never answers
	})
	begin := time.Now()
	rep, err := Run(context.Background(), Config{
		Target: srv.URL, Rate: 100, Duration: 100 * time.Millisecond, Seed: 1,
		// A naive client with an hour-long attempt timeout: only the run's
		// own bound can stop it.
		AttemptTimeout: time.Hour,
		Classes:        oneClass("interactive", 200*time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	if took > 10*time.Second {
		t.Errorf("run took %v; its bound is about 300ms", took)
	}
	want := 0
	for a := range Arrivals(1, 100, oneClass("interactive", 0)) {
		if a.At >= 100*time.Millisecond {
			break
		}
		want++
	}
	if want == 0 {
		t.Fatal("seed gives no arrivals; pick another")
	}
	if rep.Requests != want || rep.Failures[ReasonRunEnded] != want || rep.Attempts != want {
		t.Errorf("requests %d attempts %d failures %v, want %d run_ended", rep.Requests, rep.Attempts, rep.Failures, want)
	}
	// The run's bound comes after every deadline: each caller had waited
	// to its deadline for nothing.
	if rep.Unanswered != want || rep.UnansweredRatio != 1 {
		t.Errorf("unanswered %d (ratio %v), want %d (1)", rep.Unanswered, rep.UnansweredRatio, want)
	}
	if rep.WindowSeconds != 0.1 || rep.WallSeconds < 0.2 {
		t.Errorf("window %vs wall %vs, want 0.1s and >= 0.2s", rep.WindowSeconds, rep.WallSeconds)
	}
	if rep.Interrupted {
		t.Error("Interrupted set on a run that ended by its bound")
	}
	// TestMain's goleak check covers the runner's goroutines and the default
	// transport's connections once the server is closed.
}

func TestCancelInterruptsRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 2 {
			cancel() // the user presses ^C while three requests are in flight
		}
		<-r.Context().Done()
	})
	rep, err := Run(ctx, Config{
		Target: srv.URL, Rate: 200, Duration: time.Hour,
		Classes: oneClass("interactive", time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted {
		t.Error("Interrupted not set")
	}
	if rep.Requests < 3 || rep.Failures[ReasonCancelled] != rep.Requests {
		t.Errorf("requests %d failures %v, want all cancelled", rep.Requests, rep.Failures)
	}
	// Cancelled long before their hour-long deadlines: nobody was left
	// waiting to their own timeout.
	if rep.Unanswered != 0 {
		t.Errorf("unanswered = %d, want 0", rep.Unanswered)
	}
}

func TestInvalidConfigIsAnError(t *testing.T) {
	_, err := Run(context.Background(), Config{Target: "http://127.0.0.1:1", Rate: -1, Duration: time.Second})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Rate" {
		t.Fatalf("err = %v, want a ConfigError for Rate", err)
	}
}

// onFirstRead calls f before the first Read of a body.
type onFirstRead struct {
	io.ReadCloser
	f func()
}

func (b *onFirstRead) Read(p []byte) (int, error) {
	b.f()
	return b.ReadCloser.Read(p)
}

func TestGoodputLeavesOutTheDrain(t *testing.T) {
	rc, err := resolve(Config{Target: "http://h", Rate: 1, Duration: time.Second, Classes: oneClass("interactive", 10*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector(rc)
	col.start = t0
	answer := func(at time.Duration) {
		c := &call{r: &Request{Arrival: t0, Deadline: t0.Add(10 * time.Second)}}
		a := &Attempt{Status: 200, sent: true, Start: t0, End: t0.Add(at)}
		c.mu.events = []*Attempt{a}
		col.record(c, true, a.End, nil)
	}
	answer(500 * time.Millisecond) // inside the 1s window
	answer(time.Second)            // at its edge
	answer(1500 * time.Millisecond)
	answer(3 * time.Second) // drained after arrivals stopped
	rep := col.report(4*time.Second, time.Second, false)
	if rep.OnTime != 4 || rep.SuccessRatio != 1 {
		t.Errorf("on time %d success %v, want 4 and 1", rep.OnTime, rep.SuccessRatio)
	}
	if rep.Goodput != 2 {
		t.Errorf("goodput = %v/s, want 2/s: only answers inside the window count", rep.Goodput)
	}
}

// lateClock oversleeps every wait by lag, as Go's timers do when the
// process is idle (they wake on millisecond ticks).
type lateClock struct {
	*fakeClock
	lag time.Duration
}

func (c lateClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return c.fakeClock.Sleep(ctx, d)
	}
	return c.fakeClock.Sleep(ctx, d+c.lag)
}

func TestAttemptLatencyLeavesOutSendLagAndEarlierAttempts(t *testing.T) {
	clk := lateClock{fakeClock: newFakeClock(), lag: 700 * time.Microsecond}
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			clk.Advance(5 * time.Millisecond)
			reject(w, http.StatusServiceUnavailable, "queue_wait", "300", "250")
			return
		}
		clk.Advance(40 * time.Millisecond)
		ok(w, r, n)
	})
	rep := mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1,
		Classes: oneClass("batch", 10*time.Second),
		Policy:  Polite{},
	}, env{clock: clk})
	if rep.OnTime != 1 || rep.Attempts != 2 {
		t.Fatalf("on time %d attempts %d, want 1 and 2", rep.OnTime, rep.Attempts)
	}
	if rep.SendLag.Count != 1 || rep.SendLag.P50Ms != 0.7 {
		t.Errorf("send lag = %+v, want one sample of 0.7ms", rep.SendLag)
	}
	// Only the answered attempt counts, from its own send.
	if rep.AttemptLatency.Count != 1 || rep.AttemptLatency.P50Ms != 40 {
		t.Errorf("attempt latency = %+v, want one sample of 40ms", rep.AttemptLatency)
	}
	// The request's latency keeps everything: lag, the refused attempt,
	// the wait it asked for (overslept too) and the answer.
	if want := 0.7 + 5 + 300 + 0.7 + 40; math.Abs(rep.Latency.P50Ms-want) > 1e-9 {
		t.Errorf("latency p50 = %vms, want %vms", rep.Latency.P50Ms, want)
	}
}
