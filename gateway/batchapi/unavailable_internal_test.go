package batchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/store"
)

// failingStore is a job store whose every read fails with err; the other
// methods are not called by the requests of these tests.
type failingStore struct {
	batch.JobStore
	err error
}

func (s failingStore) File(context.Context, string, string) (batch.File, error) {
	return batch.File{}, s.err
}

func (s failingStore) Batch(context.Context, string, string) (batch.Batch, error) {
	return batch.Batch{}, s.err
}

func (s failingStore) FileUsage(context.Context, string) (int, int64, error) { return 0, 0, s.err }
func (s failingStore) Close() error                                          { return nil }

// TestStoreUnavailableAnswers: a call the store cannot serve because Redis
// does not answer is a 503 that says so — Retry-After and retry-after-ms
// for the breaker's next probe (a second when there is none to wait for),
// X-Sluice-Reason and the code store_unavailable, since when in the
// message — whichever call it is; any other failure of the store stays a
// 500 batch_store_error, without Retry-After.
func TestStoreUnavailableAnswers(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	since := now.Add(-90 * time.Second)
	open := &store.UnavailableError{Since: since, RetryAt: now.Add(320 * time.Millisecond), Err: store.ErrOpen}
	upload := func() *http.Request {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "in.jsonl")
		_, _ = io.WriteString(fw, "{}\n")
		_ = mw.Close()
		r := httptest.NewRequest(http.MethodPost, "/v1/files", &body)
		r.Header.Set("Content-Type", mw.FormDataContentType())
		return r
	}
	get := func(path string) func() *http.Request {
		return func() *http.Request { return httptest.NewRequest(http.MethodGet, path, nil) }
	}
	for _, tc := range []struct {
		name        string
		err         error
		req         func() *http.Request
		status      int
		retry       string // Retry-After; retry-after-ms is retryMs
		retryMs     string
		code, inMsg string
	}{
		{"batches.retrieve, breaker open", open, get("/v1/batches/batch_x"), 503, "1", "320", CodeStoreUnavailable, "has been unreachable since 2026-03-04T05:04:37Z (for 1m30s); retry after 320 ms"},
		{"files.create, breaker open", open, upload, 503, "1", "320", CodeStoreUnavailable, "the batch store (Redis) has been unreachable"},
		{"files.retrieve, a probe 2.5s away", &store.UnavailableError{Since: since, RetryAt: now.Add(2500 * time.Millisecond), Err: store.ErrOpen},
			get("/v1/files/file-x"), 503, "3", "2500", CodeStoreUnavailable, "retry after 2500 ms"},
		{"a refused connection, the breaker closed", &store.UnavailableError{Since: now, Err: errors.New("connection refused")},
			get("/v1/batches/batch_x"), 503, "1", "1000", CodeStoreUnavailable, "(for 0s); retry after 1000 ms"},
		{"a method not served, whose id cannot be looked up", open, func() *http.Request { return httptest.NewRequest(http.MethodDelete, "/v1/batches/batch_x", nil) },
			503, "1", "320", CodeStoreUnavailable, "unreachable since"},
		{"data that does not parse", errors.New("store: redis: strconv.Atoi: parsing \"x\": invalid syntax"), get("/v1/batches/batch_x"), 500, "", "", "batch_store_error", "the batch store failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(Config{}, Deps{
				Store:    failingStore{err: tc.err},
				Handler:  func(string, string) (http.Handler, error) { return nil, ErrNotGated },
				Stats:    func() admission.Stats { return admission.Stats{Concurrency: 1} },
				ReadBody: func([]byte) (string, bool, error) { return "m", false, nil },
				Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.now = func() time.Time { return now }
			w := httptest.NewRecorder()
			if !a.Serve(w, tc.req(), "acme") {
				t.Fatal("not served")
			}
			var body contract.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			h := w.Header()
			if w.Code != tc.status || h.Get(contract.HeaderRetryAfter) != tc.retry || h.Get(contract.HeaderRetryAfterMs) != tc.retryMs {
				t.Errorf("%d, Retry-After %q, retry-after-ms %q; want %d, %q, %q", w.Code, h.Get(contract.HeaderRetryAfter), h.Get(contract.HeaderRetryAfterMs), tc.status, tc.retry, tc.retryMs)
			}
			wantType, wantReason := contract.ErrorTypeOverloaded, CodeStoreUnavailable
			if tc.status == 500 {
				wantType, wantReason = "server_error", ""
			}
			if e := body.Error; e.Code != tc.code || e.Type != wantType || !strings.Contains(e.Message, tc.inMsg) || h.Get(contract.HeaderReason) != wantReason {
				t.Errorf("X-Sluice-Reason %q, error %+v; want reason %q, code %s, type %s, a message with %q", h.Get(contract.HeaderReason), e, wantReason, tc.code, wantType, tc.inMsg)
			}
		})
	}
}
