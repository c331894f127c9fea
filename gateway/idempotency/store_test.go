package idempotency

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func TestStorableStatus(t *testing.T) {
	for code, want := range map[int]bool{
		200: true, 201: true, 204: true, 400: true, 404: true, 413: true, 422: true,
		101: false, 302: false, 401: false, 403: false, 408: false, 409: false, 425: false,
		429: false, 500: false, 502: false, 503: false, 504: false,
	} {
		if got := storableStatus(code); got != want {
			t.Errorf("storableStatus(%d) = %v, want %v", code, got, want)
		}
	}
}

// storeAnswer makes and completes a call for key at now.
func storeAnswer(t *testing.T, s *Store, key string, body []byte, now time.Time) {
	t.Helper()
	state, _, f := s.begin(tenantKey{key: key}, sha256.Sum256(nil), false, now.Add(time.Minute), now)
	if state != stateLead {
		t.Fatalf("%s: state %v, want lead", key, state)
	}
	f.Respond(200, http.Header{})
	f.Capture(body)
	f.Complete(now)
}

// TestStoreExpiry: an answer is kept for the window after it completes
// and not a moment longer; time is an input.
func TestStoreExpiry(t *testing.T) {
	s := New(Config{Window: Duration(time.Minute)}, nil, Deps{})
	t0 := time.Unix(1_000_000, 0)
	storeAnswer(t, s, "k", []byte("answer"), t0)
	k, sum := tenantKey{key: "k"}, sha256.Sum256(nil)
	if state, e, _ := s.begin(k, sum, false, t0, t0.Add(time.Minute-time.Nanosecond)); state != stateStored || string(e.answer.body) != "answer" {
		t.Fatalf("within the window: state %v", state)
	}
	if state, _, _ := s.begin(k, sum, false, t0, t0.Add(time.Minute)); state != stateLead {
		t.Fatalf("at the window's end: state %v, want lead", state)
	}
	if n, b := s.Len(); n != 0 || b != 0 {
		t.Errorf("after expiry: %d entries, %d bytes", n, b)
	}
}

// TestStoreMaxBytes: the oldest answers are evicted until the bytes
// fit.
func TestStoreMaxBytes(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 1000)
	s := New(Config{MaxBytes: 3 * (1000 + overhead + 1)}, nil, Deps{})
	t0 := time.Unix(1_000_000, 0)
	for i, k := range []string{"a", "b", "c", "d"} {
		storeAnswer(t, s, k, body, t0.Add(time.Duration(i)*time.Second))
	}
	if n, b := s.Len(); n != 3 || b > s.cfg.MaxBytes {
		t.Fatalf("%d entries, %d bytes; want 3 within %d", n, b, s.cfg.MaxBytes)
	}
	sum := sha256.Sum256(nil)
	if state, _, _ := s.begin(tenantKey{key: "a"}, sum, false, t0, t0.Add(5*time.Second)); state != stateLead {
		t.Errorf("a: state %v, want evicted", state)
	}
	if state, _, _ := s.begin(tenantKey{key: "d"}, sum, false, t0, t0.Add(5*time.Second)); state != stateStored {
		t.Errorf("d: state %v, want stored", state)
	}
}

// TestStoreWaiterWokenOnAbandon: a waiter is woken when the leader
// gives up, and becomes the leader itself.
func TestStoreWaiterWokenOnAbandon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{}, nil, Deps{})
		k, sum, now := tenantKey{tenant: "a", key: "k"}, sha256.Sum256(nil), time.Now()
		_, _, leader := s.begin(k, sum, false, now, now)
		state, e, _ := s.begin(k, sum, false, now, now)
		if state != stateWait {
			t.Fatalf("state %v, want wait", state)
		}
		got := make(chan keyState)
		go func() {
			<-e.done
			state, _, f := s.begin(k, sum, false, now, now)
			f.Abandon()
			got <- state
		}()
		synctest.Wait()
		leader.Abandon()
		leader.Abandon() // twice is safe
		if st := <-got; st != stateLead {
			t.Fatalf("after the leader gave up: state %v, want lead", st)
		}
		if state, _, _ := s.begin(tenantKey{tenant: "b", key: "k"}, sum, false, now, now); state != stateLead {
			t.Errorf("another tenant's key: state %v, want lead", state)
		}
	})
}
