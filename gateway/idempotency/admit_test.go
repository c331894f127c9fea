package idempotency

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/contract"
)

// recorded is a store whose Deps record what they were asked to count.
type recorded struct {
	*Store
	bad []string // the codes counted as bad input
}

func newRecorded(cfg Config) *recorded {
	r := &recorded{}
	r.Store = New(cfg, prometheus.NewRegistry(), Deps{BadInput: func(code string) { r.bad = append(r.bad, code) }})
	return r
}

func keyed(key, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	if key != "" {
		r.Header.Set(contract.HeaderIdempotencyKey, key)
	}
	return r
}

// admit runs Admit for a request of tenant with key and body, under a
// minute's deadline.
func (s *recorded) admit(t *testing.T, tenant, key, body string, stream bool) (*Flight, bool, *httptest.ResponseRecorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := httptest.NewRecorder()
	f, handled := s.Admit(ctx, w, keyed(key, body), tenant, []byte(body), stream)
	return f, handled, w
}

// lead makes and completes a call for key with the answer given.
func (s *recorded) lead(t *testing.T, tenant, key, body string, stream bool, status int, h http.Header, answer string) {
	t.Helper()
	f, handled, _ := s.admit(t, tenant, key, body, stream)
	if handled || f == nil {
		t.Fatalf("%s: handled %v, flight %v; want to lead", key, handled, f)
	}
	f.Respond(status, h)
	f.Capture([]byte(answer))
	f.Complete(time.Now())
}

func errorOf(t *testing.T, w *httptest.ResponseRecorder) contract.ErrorDetail {
	t.Helper()
	var b contract.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	return b.Error
}

// TestAdmitWithoutKey: a request without a key is left alone.
func TestAdmitWithoutKey(t *testing.T) {
	s := newRecorded(Config{})
	f, handled, w := s.admit(t, "a", "", "{}", false)
	if f != nil || handled || w.Code != http.StatusOK || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Fatalf("flight %v, handled %v, answer %d %q", f, handled, w.Code, w.Body)
	}
	f.Respond(200, http.Header{}) // a nil flight does nothing
	f.Capture([]byte("x"))
	if f.WantsRest() {
		t.Error("a nil flight wants the rest")
	}
	f.Complete(time.Now())
	f.Abandon()
}

// TestAdmitMalformedKey: a malformed key is a 400 invalid_header naming
// the header, counted as bad input.
func TestAdmitMalformedKey(t *testing.T) {
	s := newRecorded(Config{})
	r := keyed("", "{}")
	r.Header[contract.HeaderIdempotencyKey] = []string{"a", "b"}
	w := httptest.NewRecorder()
	if _, handled := s.Admit(context.Background(), w, r, "a", []byte("{}"), false); !handled {
		t.Fatal("not handled")
	}
	e := errorOf(t, w)
	if w.Code != http.StatusBadRequest || e.Code != "invalid_header" || e.Type != contract.ErrorTypeInvalidRequest ||
		e.Message != "Idempotency-Key: sent 2 times: a request has one key" {
		t.Errorf("answer %d %+v", w.Code, e)
	}
	if len(s.bad) != 1 || s.bad[0] != "invalid_header" {
		t.Errorf("bad input counted %v", s.bad)
	}
}

// TestAdmitReplaysStored: a duplicate after the call completed gets its
// status, headers and body, with its own Content-Length.
func TestAdmitReplaysStored(t *testing.T) {
	s := newRecorded(Config{})
	h := http.Header{"Content-Type": {"application/json"}, contract.HeaderModel: {"m"}, "Content-Length": {"999"}, "Trailer": {"X"}}
	s.lead(t, "a", "k", "{}", false, http.StatusCreated, h, `{"ok":true}`)
	f, handled, w := s.admit(t, "a", "k", "{}", false)
	if f != nil || !handled {
		t.Fatalf("flight %v, handled %v", f, handled)
	}
	if w.Code != http.StatusCreated || w.Body.String() != `{"ok":true}` {
		t.Fatalf("replay %d %q", w.Code, w.Body)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", contract.HeaderModel: "m", "Content-Length": "11", "Trailer": ""} {
		if got := w.Header().Get(k); got != v {
			t.Errorf("replay %s = %q, want %q", k, got, v)
		}
	}
	if got := testutil.ToFloat64(s.replays.WithLabelValues("stored")); got != 1 {
		t.Errorf("stored replays = %v, want 1", got)
	}
	if _, handled, _ := s.admit(t, "b", "k", "{}", false); handled {
		t.Error("another tenant's request with the key was answered from the store")
	}
}

// TestAdmitKeyReused: the key with another body is a 422, not a replay.
func TestAdmitKeyReused(t *testing.T) {
	s := newRecorded(Config{})
	s.lead(t, "a", "k", "{}", false, 200, http.Header{}, "answer")
	_, handled, w := s.admit(t, "a", "k", `{"other":1}`, false)
	if e := errorOf(t, w); !handled || w.Code != http.StatusUnprocessableEntity || e.Code != "idempotency_key_reused" {
		t.Errorf("handled %v, answer %d %+v", handled, w.Code, e)
	}
	if len(s.bad) != 1 || s.bad[0] != "idempotency_key_reused" {
		t.Errorf("bad input counted %v", s.bad)
	}
}

// TestAdmitStreamInFlight: a duplicate of a stream in flight is a 409
// with Retry-After, the leader's deadline.
func TestAdmitStreamInFlight(t *testing.T) {
	s := newRecorded(Config{})
	f, _, _ := s.admit(t, "a", "s", "{}", true)
	defer f.Abandon()
	_, handled, w := s.admit(t, "a", "s", "{}", true)
	if e := errorOf(t, w); !handled || w.Code != http.StatusConflict || e.Code != "idempotency_key_in_flight" {
		t.Errorf("handled %v, answer %d %+v", handled, w.Code, e)
	}
	if ra := w.Header().Get(contract.HeaderRetryAfter); ra != "60" {
		t.Errorf("Retry-After %q, want 60 (the leader's minute)", ra)
	}
}

// TestAdmitAnswerNotKept: an answer over max_entry_bytes is not kept; a
// duplicate within the window is a 409 with Retry-After, the window's
// end (synctest's clock: it does not move while the test runs).
func TestAdmitAnswerNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRecorded(Config{Window: Duration(time.Minute), MaxEntryBytes: 4})
		s.lead(t, "a", "k", "{}", false, 200, http.Header{}, "too large")
		if n, b := s.Len(); n != 1 || b != overhead+2 {
			t.Errorf("stored %d, %d bytes; want 1 of %d (the key only)", n, b, overhead+2)
		}
		_, handled, w := s.admit(t, "a", "k", "{}", false)
		if e := errorOf(t, w); !handled || w.Code != http.StatusConflict || e.Code != "idempotency_answer_not_kept" {
			t.Errorf("handled %v, answer %d %+v", handled, w.Code, e)
		}
		if ra := w.Header().Get(contract.HeaderRetryAfter); ra != "60" {
			t.Errorf("Retry-After %q, want 60", ra)
		}
	})
}

// TestAdmitWaiterGetsTheAnswer: a duplicate that arrives while the leader
// is in flight waits for it and is answered from its capture.
func TestAdmitWaiterGetsTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRecorded(Config{})
		leader, _, _ := s.admit(t, "a", "k", "{}", false)
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			_, _, w := s.admit(t, "a", "k", "{}", false)
			done <- w
		}()
		synctest.Wait() // the duplicate waits on the leader
		leader.Respond(200, http.Header{"Content-Type": {"text/plain"}})
		leader.Capture([]byte("the "))
		leader.Capture([]byte("answer"))
		if !leader.WantsRest() {
			t.Error("an answer to keep, not ended: the rest is wanted")
		}
		leader.Complete(time.Now())
		if leader.WantsRest() {
			t.Error("an ended answer: the rest is not wanted")
		}
		w := <-done
		if w.Code != 200 || w.Body.String() != "the answer" || w.Header().Get("Content-Type") != "text/plain" {
			t.Errorf("waiter's answer %d %q %v", w.Code, w.Body, w.Header())
		}
		if got := testutil.ToFloat64(s.replays.WithLabelValues("waited")); got != 1 {
			t.Errorf("waited replays = %v, want 1", got)
		}
	})
}

// TestAdmitWaiterAfterFailure: a duplicate waiting on a leader whose
// answer is not one to keep (a provider 500) makes the call itself.
func TestAdmitWaiterAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRecorded(Config{})
		leader, _, _ := s.admit(t, "a", "k", "{}", false)
		done := make(chan *Flight)
		go func() {
			f, _, _ := s.admit(t, "a", "k", "{}", false)
			done <- f
		}()
		synctest.Wait()
		leader.Respond(http.StatusInternalServerError, http.Header{})
		leader.Capture([]byte("error"))
		if leader.WantsRest() {
			t.Error("an answer not to keep: the rest is not wanted")
		}
		leader.Complete(time.Now())
		f := <-done
		if f == nil {
			t.Fatal("the waiter did not lead after the failure")
		}
		f.Abandon()
		if n, _ := s.Len(); n != 0 {
			t.Errorf("stored %d, want 0", n)
		}
	})
}

// TestAdmitWaiterDeadline: a duplicate waits no longer than its own
// deadline, then is a 504 not counted as bad input; one whose caller left
// is answered nothing.
func TestAdmitWaiterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRecorded(Config{})
		leader, _, _ := s.admit(t, "a", "k", "{}", false)
		defer leader.Abandon()

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		w := httptest.NewRecorder()
		start := time.Now()
		if f, handled := s.Admit(ctx, w, keyed("k", "{}"), "a", []byte("{}"), false); f != nil || !handled {
			t.Fatalf("flight %v, handled %v", f, handled)
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Errorf("waited %v, want the deadline's 50ms", waited)
		}
		if e := errorOf(t, w); w.Code != http.StatusGatewayTimeout || e.Code != "deadline_exceeded" || e.Type != "timeout_error" {
			t.Errorf("answer %d %+v", w.Code, e)
		}
		if len(s.bad) != 0 {
			t.Errorf("bad input counted %v", s.bad)
		}

		gone, leave := context.WithCancel(context.Background())
		r := keyed("k", "{}").WithContext(gone)
		w = httptest.NewRecorder()
		go leave()
		if _, handled := s.Admit(gone, w, r, "a", []byte("{}"), false); !handled || w.Body.Len() != 0 || w.Code != http.StatusOK {
			t.Errorf("a caller that left: handled %v, answer %d %q", handled, w.Code, w.Body)
		}
	})
}
