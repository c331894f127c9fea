package batchapi

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
)

// TestDo: what Do makes of each answer of Deps.Handler, and of the
// gateway's state around it — sluice's own refusals and a drain defer the
// item, the provider's answers (a 429 included) are its result, a tenant
// or path the gateway no longer serves is a 403 or 404 without a call.
func TestDo(t *testing.T) {
	answer := func(status int, h map[string]string, body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			for k, v := range h {
				w.Header().Set(k, v)
			}
			if status != 0 {
				w.WriteHeader(status)
				_, _ = w.Write([]byte(body))
			}
		}
	}
	for _, tc := range []struct {
		name     string
		draining bool
		err      error // Deps.Handler's
		serve    func(http.ResponseWriter, *http.Request)
		deadline time.Duration
		want     batch.Response
	}{
		{name: "answered", serve: answer(200, map[string]string{"X-Request-Id": "gateway-id", contract.HeaderUpstreamRequestID: "req-1"}, `{"ok":true}`),
			want: batch.Response{Status: 200, RequestID: "req-1", Body: []byte(`{"ok":true}`)}},
		{name: "refused by sluice", serve: answer(503, map[string]string{contract.HeaderReason: "queue_full", contract.HeaderRetryAfterMs: "1500"}, `{}`),
			want: batch.Response{Status: 503, Body: []byte(`{}`), Deferred: true, RetryAfter: 1500 * time.Millisecond}},
		{name: "refused by the provider", serve: answer(429, nil, `{}`),
			want: batch.Response{Status: 429, Body: []byte(`{}`)}},
		{name: "no answer", serve: answer(0, nil, ""), want: batch.Response{Status: http.StatusBadGateway, Body: []byte{}}},
		{name: "draining", draining: true, want: batch.Response{Deferred: true, RetryAfter: time.Second}},
		{name: "window over", deadline: -time.Second, serve: answer(200, nil, ""), want: batch.Response{Deferred: true}},
		{name: "unknown tenant", err: ErrUnknownTenant, want: batch.Response{Status: http.StatusForbidden,
			Body: []byte(`{"error":{"message":"the batch's tenant is no longer configured","type":"invalid_request_error","code":"unknown_tenant"}}`)}},
		{name: "not gated", err: ErrNotGated, want: batch.Response{Status: http.StatusNotFound,
			Body: []byte(`{"error":{"message":"not a batch endpoint","type":"invalid_request_error","code":"not_found"}}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var timeoutMs string
			a := newTestAPI(t, Deps{
				Draining:   func() bool { return tc.draining },
				MaxTimeout: 2 * time.Second,
				Handler: func(tenant, path string) (http.Handler, error) {
					if tenant != "acme" || path != "/v1/chat/completions" {
						t.Errorf("Handler(%q, %q)", tenant, path)
					}
					if tc.err != nil {
						return nil, tc.err
					}
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						timeoutMs = r.Header.Get(contract.HeaderTimeoutMs)
						tc.serve(w, r)
					}), nil
				},
			})
			deadline := tc.deadline
			if deadline == 0 {
				deadline = time.Hour
			}
			got := a.Do(t.Context(), batch.Claim{Batch: "b", Tenant: "acme", Deadline: time.Now().Add(deadline),
				Request: batch.Request{CustomID: "c", URL: "/v1/chat/completions", Body: []byte(`{"model":"m"}`)}})
			if got.Status != tc.want.Status || got.RequestID != tc.want.RequestID || string(got.Body) != string(tc.want.Body) ||
				got.Deferred != tc.want.Deferred || got.RetryAfter != tc.want.RetryAfter || got.Err != nil {
				t.Fatalf("Do: %+v (body %s), want %+v (body %s)", got, got.Body, tc.want, tc.want.Body)
			}
			// The call's budget: the item's window, bounded by MaxTimeout.
			if ms, err := strconv.Atoi(timeoutMs); timeoutMs != "" && (err != nil || ms < 1900 || ms > 2000) {
				t.Errorf("%s: %q, want MaxTimeout's 2000", contract.HeaderTimeoutMs, timeoutMs)
			}
		})
	}
}

// TestDoCancelled: an item whose run is cancelled before its call answers
// has no result (it goes back to the queue), whatever the handler left.
func TestDoCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	a := newTestAPI(t, Deps{Handler: func(string, string) (http.Handler, error) {
		return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { cancel() }), nil
	}})
	got := a.Do(ctx, batch.Claim{Tenant: "acme", Deadline: time.Now().Add(time.Hour), Request: batch.Request{URL: "/v1/chat/completions"}})
	if !errors.Is(got.Err, context.Canceled) || got.Status != 0 {
		t.Fatalf("Do: %+v, want context.Canceled", got)
	}
}

// TestWaiting: the items waiting are the gate's depth at Deps.Rank.
func TestWaiting(t *testing.T) {
	a := newTestAPI(t, Deps{Rank: 1, Stats: func() admission.Stats { return admission.Stats{Depth: []int{5, 3}} }})
	if n := a.Waiting(); n != 3 {
		t.Fatalf("Waiting: %d, want the depth at rank 1", n)
	}
	a.deps.Rank = 2 // a rank the gate has no queue for
	if n := a.Waiting(); n != 0 {
		t.Fatalf("Waiting: %d at a rank past the gate's", n)
	}
}

// newTestAPI is an API on a bbolt store in the test's directory, with
// deps's fields and stand-ins for the required ones it leaves nil.
func newTestAPI(t *testing.T, deps Deps) *API {
	t.Helper()
	if deps.Handler == nil {
		deps.Handler = func(string, string) (http.Handler, error) { return http.NotFoundHandler(), nil }
	}
	if deps.Stats == nil {
		deps.Stats = func() admission.Stats { return admission.Stats{Concurrency: 1} }
	}
	if deps.ReadBody == nil {
		deps.ReadBody = func([]byte) (string, bool, error) { return "m", false, nil }
	}
	a, err := New(Config{Path: filepath.Join(t.TempDir(), "batch.db")}, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// TestNewRequiresDeps: New refuses Deps without what it cannot run
// without, and closes the store it was given.
func TestNewRequiresDeps(t *testing.T) {
	bs, err := batch.OpenBolt(filepath.Join(t.TempDir(), "batch.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{}, Deps{Store: bs}); err == nil {
		t.Fatal("New without Handler, Stats and ReadBody: no error")
	}
	if _, _, err := bs.Backlog(t.Context(), ""); err == nil {
		t.Error("the store New was given is still open after New failed")
	}
}
