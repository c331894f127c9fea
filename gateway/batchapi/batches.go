package batchapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
)

type batchCreate struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

// parseWindow reads a completion window: OpenAI's "24h", or any duration
// in whole seconds, minutes or hours ("90m", "30s").
func parseWindow(s string) (time.Duration, bool) {
	if len(s) < 2 {
		return 0, false
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n <= 0 || n > 1e7 {
		return 0, false
	}
	switch s[len(s)-1] {
	case 's':
		return time.Duration(n) * time.Second, true
	case 'm':
		return time.Duration(n) * time.Minute, true
	case 'h':
		return time.Duration(n) * time.Hour, true
	}
	return 0, false
}

func (a *API) createBatch(w http.ResponseWriter, r *http.Request, tenant string) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		a.invalid(w, http.StatusBadRequest, "invalid_request", "", "reading the body: "+err.Error())
		return
	}
	var req batchCreate
	if err := json.Unmarshal(raw, &req); err != nil {
		a.invalid(w, http.StatusBadRequest, "invalid_json", "", "the body is not a JSON object of input_file_id, endpoint, completion_window and metadata: "+err.Error())
		return
	}
	window, ok := parseWindow(req.CompletionWindow)
	switch {
	case req.InputFileID == "":
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "input_file_id", "input_file_id is required")
		return
	case !slices.Contains(batch.Endpoints, req.Endpoint):
		a.invalid(w, http.StatusBadRequest, "invalid_value", "endpoint", fmt.Sprintf("endpoint: %q, want one of %s", contract.Echo(req.Endpoint), strings.Join(batch.Endpoints, ", ")))
		return
	case !ok || window > a.cfg.MaxWindow.D():
		a.invalid(w, http.StatusBadRequest, "invalid_value", "completion_window",
			fmt.Sprintf("completion_window: %q, want a duration such as 24h, up to batch.max_window (%v)", contract.Echo(req.CompletionWindow), a.cfg.MaxWindow.D()))
		return
	case len(req.Metadata) > 16:
		a.invalid(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata: at most 16 pairs")
		return
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			a.invalid(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata: keys up to 64 characters, values up to 512")
			return
		}
	}
	if !validID(req.InputFileID) {
		a.notFound(w, "file", req.InputFileID)
		return
	}
	f, err := a.store.File(r.Context(), tenant, req.InputFileID)
	if errors.Is(err, batch.ErrNotFound) || err == nil && f.Purpose != "batch" {
		a.notFound(w, "file", req.InputFileID)
		return
	} else if err != nil {
		a.failed(w, err)
		return
	}
	content, err := a.store.FileContent(r.Context(), tenant, req.InputFileID)
	if err != nil {
		a.failed(w, err)
		return
	}
	reqs, ierr := batch.ParseInput(content, a.cfg.MaxRequests)
	if ierr == nil {
		if ierr = batch.CheckEndpoint(reqs, req.Endpoint); ierr != nil {
			ierr.Line = lineOf(content, ierr.Line-1)
		}
	}
	if ierr != nil {
		a.invalid(w, http.StatusBadRequest, "invalid_batch_file", "input_file_id", "input file: "+ierr.Error())
		return
	}
	backlog, size, err := a.store.Backlog(r.Context(), "")
	if err != nil {
		a.failed(w, err)
		return
	}
	mine, mySize, err := a.store.Backlog(r.Context(), tenant)
	if err != nil {
		a.failed(w, err)
		return
	}
	var bodies int64
	for _, q := range reqs {
		bodies += int64(len(q.Body))
	}
	for _, bound := range []struct {
		field     string
		have, add int64
		max       int64
	}{
		{"batch.max_tenant_backlog", int64(mine), int64(len(reqs)), int64(a.cfg.MaxTenantBacklog)},
		{"batch.max_tenant_backlog_bytes", mySize, bodies, a.cfg.MaxTenantBacklogBytes},
		{"batch.max_backlog", int64(backlog), int64(len(reqs)), int64(a.cfg.MaxBacklog)},
		{"batch.max_backlog_bytes", size, bodies, a.cfg.MaxBacklogBytes},
	} {
		if bound.add > bound.max {
			a.invalid(w, http.StatusBadRequest, "batch_too_large", "input_file_id",
				fmt.Sprintf("the batch's %d alone passes %s (%d): split it", bound.add, bound.field, bound.max))
			return
		}
		if bound.have+bound.add > bound.max {
			a.backlogFull(w, bound.field, bound.have, bound.add, bound.max)
			return
		}
	}
	if est, rate, ok := a.estimate(backlog, len(reqs)); ok && est > window {
		a.cannotFinish(w, backlog, len(reqs), rate, est, window)
		return
	}
	now := a.now()
	bt := batch.Batch{ID: newID("batch_"), Tenant: tenant, Endpoint: req.Endpoint, InputFileID: req.InputFileID,
		CompletionWindow: req.CompletionWindow, Metadata: req.Metadata, CreatedAt: now, InProgressAt: now, ExpiresAt: now.Add(window)}
	if err := a.store.CreateBatch(r.Context(), bt, reqs); err != nil {
		a.failed(w, err)
		return
	}
	a.exec.Notify()
	got, err := a.store.Batch(r.Context(), tenant, bt.ID)
	if err != nil {
		a.failed(w, err)
		return
	}
	writeJSON(w, batchOf(got))
}

// backlogFull refuses a batch past a backlog bound: 429, and a Retry-After
// for when the excess could have drained at the rate items end (a minute
// before there is one; for a bound in bytes, items stand for bytes in
// proportion).
func (a *API) backlogFull(w http.ResponseWriter, field string, have, add, bound int64) {
	retry := time.Minute
	if rate, ok := a.exec.Rate(); ok && have > 0 {
		backlog, _, _ := a.store.Backlog(context.Background(), "")
		excess := float64(have+add-bound) / float64(have) * float64(backlog)
		retry = max(time.Second, time.Duration(excess/rate*float64(time.Second)))
	}
	retryMs := contract.RetryAfterMs(retry)
	a.deps.BadInput("batch_backlog_full")
	w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(retry), 10))
	w.Header().Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	a.deps.WriteError(w, http.StatusTooManyRequests, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("%d waiting to run and this batch's %d would pass %s (%d); retry after %d ms", have, add, field, bound, retryMs),
		Type:    contract.ErrorTypeRateLimit, Code: "batch_backlog_full", RetryAfterMs: &retryMs}})
}

// estimate is how long the backlog and n more items would take to run, at
// the rate items have been ending while there was a backlog — the spare
// capacity live work has been leaving — or, without one, at the rate the
// slots serve calls (every slot idle: an estimate that refuses only what
// cannot fit). ok is false before any call has been timed.
func (a *API) estimate(backlog, n int) (est time.Duration, rate float64, ok bool) {
	rate, ok = a.exec.Rate()
	if !ok || backlog == 0 {
		st := a.deps.Stats()
		if st.ServiceMean <= 0 {
			return 0, 0, false
		}
		rate = float64(st.Concurrency) / st.ServiceMean.Seconds()
	}
	return time.Duration(float64(backlog+n) / rate * float64(time.Second)), rate, true
}

// cannotFinish refuses a batch whose estimated completion is past its
// window: 429 with the estimate, and a Retry-After for when enough of the
// backlog ahead will have drained (the whole of it when the batch could
// not fit even alone).
func (a *API) cannotFinish(w http.ResponseWriter, backlog, n int, rate float64, est, window time.Duration) {
	retry := est - window
	alone := time.Duration(float64(n) / rate * float64(time.Second))
	if alone > window {
		retry = time.Duration(float64(backlog) / rate * float64(time.Second))
	}
	retry = max(retry, time.Second)
	estMs, retryMs := contract.RetryAfterMs(est), contract.RetryAfterMs(retry)
	a.deps.BadInput("batch_cannot_finish")
	h := w.Header()
	h.Set(contract.HeaderRetryAfter, strconv.FormatInt(contract.RetryAfterSeconds(retry), 10))
	h.Set(contract.HeaderRetryAfterMs, strconv.FormatInt(retryMs, 10))
	h.Set(contract.HeaderEstimatedWaitMs, strconv.FormatInt(estMs, 10))
	msg := fmt.Sprintf("the batch cannot finish inside its completion_window (%v): %d items ahead and its %d at %.1f items/s would take until about %s (%d ms); retry after %d ms",
		window, backlog, n, rate, a.now().Add(est).UTC().Format(time.RFC3339), estMs, retryMs)
	if alone > window {
		msg += fmt.Sprintf(", or split it: its own %d items need about %v at that rate", n, alone.Round(time.Second))
	}
	a.deps.WriteError(w, http.StatusTooManyRequests, contract.ErrorBody{Error: contract.ErrorDetail{Message: msg,
		Type: contract.ErrorTypeRateLimit, Code: "batch_cannot_finish", EstimatedWaitMs: &estMs, RetryAfterMs: &retryMs}})
}

type batchJSON struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *struct{}         `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    countsJSON        `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
}

func unix(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	u := t.Unix()
	return &u
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func batchOf(b batch.Batch) batchJSON {
	return batchJSON{ID: b.ID, Object: "batch", Endpoint: b.Endpoint, InputFileID: b.InputFileID, CompletionWindow: b.CompletionWindow,
		Status: string(b.Status), OutputFileID: optional(b.OutputFileID), ErrorFileID: optional(b.ErrorFileID),
		CreatedAt: b.CreatedAt.Unix(), InProgressAt: unix(b.InProgressAt), ExpiresAt: unix(b.ExpiresAt), FinalizingAt: unix(b.FinalizingAt),
		CompletedAt: unix(b.CompletedAt), ExpiredAt: unix(b.ExpiredAt), CancellingAt: unix(b.CancellingAt), CancelledAt: unix(b.CancelledAt),
		RequestCounts: countsJSON(b.Counts), Metadata: b.Metadata}
}

type countsJSON struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

func (a *API) getBatch(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		a.notFound(w, "batch", id)
		return
	}
	got, err := a.store.Batch(r.Context(), tenant, id)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "batch", id)
	case err != nil:
		a.failed(w, err)
	default:
		writeJSON(w, batchOf(got))
	}
}

func (a *API) listBatches(w http.ResponseWriter, r *http.Request, tenant string) {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			a.invalid(w, http.StatusBadRequest, "invalid_value", "limit", "limit: want 1 to 100")
			return
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !validID(after) {
		a.notFound(w, "batch", after)
		return
	}
	list, more, err := a.store.Batches(r.Context(), tenant, after, limit)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "batch", after)
		return
	case err != nil:
		a.failed(w, err)
		return
	}
	out := struct {
		Object  string      `json:"object"`
		Data    []batchJSON `json:"data"`
		FirstID *string     `json:"first_id"`
		LastID  *string     `json:"last_id"`
		HasMore bool        `json:"has_more"`
	}{Object: "list", Data: []batchJSON{}, HasMore: more}
	for _, bt := range list {
		out.Data = append(out.Data, batchOf(bt))
	}
	if len(list) > 0 {
		out.FirstID, out.LastID = &list[0].ID, &list[len(list)-1].ID
	}
	writeJSON(w, out)
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		a.notFound(w, "batch", id)
		return
	}
	got, err := a.store.Cancel(r.Context(), tenant, id, a.now())
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "batch", id)
	case errors.Is(err, batch.ErrConflict):
		a.invalid(w, http.StatusConflict, "batch_not_cancellable", "", err.Error())
	case err != nil:
		a.failed(w, err)
	default:
		writeJSON(w, batchOf(got))
	}
}
