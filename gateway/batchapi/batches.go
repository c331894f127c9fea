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
	"github.com/sluicehq/sluice/gateway/wire"
)

// batchCreate is POST /v1/batches's body: OpenAI's parameters, and
// sluice's own sluice_completion_window.
type batchCreate struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
	OutputExpires    *struct {
		Anchor  string `json:"anchor"`
		Seconds int64  `json:"seconds"`
	} `json:"output_expires_after"`
	// SluiceWindow is sluice's extension: a completion window other than
	// OpenAI's 24h, up to batch.max_window.
	SluiceWindow string `json:"sluice_completion_window"`
}

// batchParams are batchCreate's JSON names: any other is refused.
var batchParams = []string{"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after", paramSluiceWindow}

// paramSluiceWindow is sluice's own parameter for a window other than 24h.
const paramSluiceWindow = "sluice_completion_window"

// openAIWindow is the one completion_window OpenAI takes.
const openAIWindow = "24h"

// OpenAI's bounds of output_expires_after.seconds (and files'
// expires_after): an hour to 30 days.
const (
	minExpiresAfter = 3600
	maxExpiresAfter = 2592000
)

// parseWindow reads sluice's window: any duration in whole seconds,
// minutes or hours ("90m", "30s", "72h").
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

// decodeParams decodes a JSON object into v, refusing a parameter not in
// known and a value of the wrong type, by name: what it returns is the
// 400 to answer (code, param, message), or an empty code.
func decodeParams(raw []byte, known []string, v any) (code, param, msg string) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return "invalid_json", "", "the body is not a JSON object"
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(known, k) {
			return "unknown_parameter", k, fmt.Sprintf("unknown parameter: %s (this endpoint takes %s)", contract.Echo(k), strings.Join(known, ", "))
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return "invalid_type", te.Field, fmt.Sprintf("%s: a JSON %s where the parameter takes %s", te.Field, te.Value, te.Type)
		}
		return "invalid_json", "", wire.InvalidJSON(err).Msg
	}
	return "", "", ""
}

// maxParamsBytes bounds the body of POST /v1/batches: a few parameters
// and up to 16 metadata pairs.
const maxParamsBytes = 64 << 10

// createBatch stores a batch, validating: its file's lines are checked
// after the answer, by the settle loop (settle.go), which starts it or
// fails it. What can be told at once is answered at once: the parameters,
// the file's existence, and sluice's own refusals — the backlog bounds and
// the estimate of its end — on the file's count of lines.
func (a *API) createBatch(w http.ResponseWriter, r *http.Request, tenant string) {
	if r.ContentLength > maxParamsBytes {
		a.bodyError(w, wire.BodyTooLarge("what POST /v1/batches takes", maxParamsBytes))
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxParamsBytes))
	if err != nil {
		a.bodyError(w, wire.BodyError(err, "what POST /v1/batches takes", maxParamsBytes))
		return
	}
	var req batchCreate
	if code, param, msg := decodeParams(raw, batchParams, &req); code != "" {
		a.invalid(w, http.StatusBadRequest, code, param, msg)
		return
	}
	window := 24 * time.Hour
	windowName := openAIWindow
	switch {
	case req.InputFileID == "":
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "input_file_id", "missing required parameter: input_file_id")
		return
	case req.Endpoint == "":
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "endpoint", "missing required parameter: endpoint")
		return
	case !slices.Contains(batch.Endpoints, req.Endpoint):
		a.invalid(w, http.StatusBadRequest, "invalid_value", "endpoint", fmt.Sprintf("endpoint: %s, want one of %s", contract.Echo(req.Endpoint), strings.Join(batch.Endpoints, ", ")))
		return
	case req.CompletionWindow == "":
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "completion_window", "missing required parameter: completion_window")
		return
	case req.CompletionWindow != openAIWindow:
		a.invalid(w, http.StatusBadRequest, "invalid_value", "completion_window",
			fmt.Sprintf("completion_window: %s, want 24h (for another window, up to batch.max_window, send completion_window 24h and %s, such as 1h)",
				contract.Echo(req.CompletionWindow), paramSluiceWindow))
		return
	case len(req.Metadata) > 16:
		a.invalid(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata: at most 16 pairs")
		return
	}
	if req.SluiceWindow != "" {
		d, ok := parseWindow(req.SluiceWindow)
		if !ok || d > a.cfg.MaxWindow.D() {
			a.invalid(w, http.StatusBadRequest, "invalid_value", paramSluiceWindow,
				fmt.Sprintf("%s: %s, want a duration such as 1h, 90m or 72h, up to batch.max_window (%v)", paramSluiceWindow, contract.Echo(req.SluiceWindow), a.cfg.MaxWindow.D()))
			return
		}
		window, windowName = d, req.SluiceWindow
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			a.invalid(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata: keys up to 64 characters, values up to 512")
			return
		}
	}
	var outputExpires time.Duration
	if e := req.OutputExpires; e != nil {
		switch {
		case e.Anchor != "created_at":
			a.invalid(w, http.StatusBadRequest, "invalid_value", "output_expires_after.anchor",
				fmt.Sprintf("output_expires_after.anchor: %s, want created_at", contract.Echo(e.Anchor)))
			return
		case e.Seconds < minExpiresAfter || e.Seconds > maxExpiresAfter:
			a.invalid(w, http.StatusBadRequest, "invalid_value", "output_expires_after.seconds",
				fmt.Sprintf("output_expires_after.seconds: %d is out of range, want %d..%d", e.Seconds, minExpiresAfter, maxExpiresAfter))
			return
		}
		outputExpires = time.Duration(e.Seconds) * time.Second
	}
	f, err := a.liveFile(r.Context(), tenant, req.InputFileID)
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
	// The bounds and the estimate count the file's lines, read a chunk at
	// a time: what the batch will run if it validates.
	n, bodies, err := batch.CountLines(content)
	content.Close()
	if err != nil {
		a.failed(w, err)
		return
	}
	if outputExpires == 0 {
		// Its files are kept as long as the batch (batch.retention).
		outputExpires = a.cfg.Retention.D()
	}
	if !a.admit(w, r.Context(), tenant, n, bodies, window) {
		return
	}
	now := a.now()
	bt := batch.Batch{ID: newID("batch_"), Tenant: tenant, Endpoint: req.Endpoint, InputFileID: req.InputFileID, Status: batch.StatusValidating,
		CompletionWindow: windowName, Metadata: req.Metadata, OutputExpiresAfter: outputExpires, CreatedAt: now, ExpiresAt: now.Add(window),
		Lines: n, LineBytes: bodies}
	if err := a.store.CreateBatch(r.Context(), bt, nil); err != nil {
		a.failed(w, err)
		return
	}
	a.kickSettle()
	got, err := a.store.Batch(r.Context(), tenant, bt.ID)
	if err != nil {
		a.failed(w, err)
		return
	}
	writeJSON(w, batchOf(got))
}

// admit applies sluice's refusals at submission to a batch of n items
// with bodies bytes: the backlog bounds (429, or 400 for a batch that
// could never fit) and the estimate of its end against its window (429).
// It answers the refusal and returns false.
func (a *API) admit(w http.ResponseWriter, ctx context.Context, tenant string, n int, bodies int64, window time.Duration) bool {
	backlog, size, err := a.store.Backlog(ctx, "")
	if err != nil {
		a.failed(w, err)
		return false
	}
	mine, mySize, err := a.store.Backlog(ctx, tenant)
	if err != nil {
		a.failed(w, err)
		return false
	}
	for _, bound := range []struct {
		field     string
		have, add int64
		max       int64
	}{
		{"batch.max_tenant_backlog", int64(mine), int64(n), int64(a.cfg.MaxTenantBacklog)},
		{"batch.max_tenant_backlog_bytes", mySize, bodies, a.cfg.MaxTenantBacklogBytes},
		{"batch.max_backlog", int64(backlog), int64(n), int64(a.cfg.MaxBacklog)},
		{"batch.max_backlog_bytes", size, bodies, a.cfg.MaxBacklogBytes},
	} {
		if bound.add > bound.max {
			a.invalid(w, http.StatusBadRequest, "batch_too_large", "input_file_id",
				fmt.Sprintf("the batch's %d alone passes %s (%d): split it", bound.add, bound.field, bound.max))
			return false
		}
		if bound.have+bound.add > bound.max {
			a.backlogFull(w, bound.field, bound.have, bound.add, bound.max)
			return false
		}
	}
	if est, rate, ok := a.estimate(backlog, n); ok && est > window {
		a.cannotFinish(w, backlog, n, rate, est, window)
		return false
	}
	return true
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

// batchJSON is OpenAI's batch object.
type batchJSON struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Model            *string           `json:"model"`
	Errors           *errorsJSON       `json:"errors"`
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
	Usage            usageJSON         `json:"usage"`
	Metadata         map[string]string `json:"metadata"`
	// SluiceWindow is sluice's window when it is not OpenAI's 24h.
	SluiceWindow string `json:"sluice_completion_window,omitempty"`
}

type errorsJSON struct {
	Object string          `json:"object"`
	Data   []lineErrorJSON `json:"data"`
}

type lineErrorJSON struct {
	Code    string  `json:"code"`
	Line    *int    `json:"line"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
}

type usageJSON struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
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
	out := batchJSON{ID: b.ID, Object: "batch", Endpoint: b.Endpoint, Model: optional(b.Model), InputFileID: b.InputFileID, CompletionWindow: openAIWindow,
		Status: string(b.Status), OutputFileID: optional(b.OutputFileID), ErrorFileID: optional(b.ErrorFileID),
		CreatedAt: b.CreatedAt.Unix(), InProgressAt: unix(b.InProgressAt), ExpiresAt: unix(b.ExpiresAt), FinalizingAt: unix(b.FinalizingAt),
		CompletedAt: unix(b.CompletedAt), FailedAt: unix(b.FailedAt), ExpiredAt: unix(b.ExpiredAt), CancellingAt: unix(b.CancellingAt), CancelledAt: unix(b.CancelledAt),
		RequestCounts: countsJSON(b.Counts), Metadata: b.Metadata}
	if b.CompletionWindow != openAIWindow {
		out.SluiceWindow = b.CompletionWindow
	}
	u := b.Usage
	out.Usage.InputTokens, out.Usage.OutputTokens, out.Usage.TotalTokens = u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens
	out.Usage.InputTokensDetails.CachedTokens, out.Usage.OutputTokensDetails.ReasoningTokens = u.CachedTokens, u.ReasoningTokens
	if len(b.Errors) > 0 {
		out.Errors = &errorsJSON{Object: "list", Data: make([]lineErrorJSON, len(b.Errors))}
		for i, e := range b.Errors {
			d := lineErrorJSON{Code: e.Code, Message: e.Message, Param: optional(e.Param)}
			if e.Line > 0 {
				d.Line = &e.Line
			}
			out.Errors.Data[i] = d
		}
	}
	return out
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
	data := make([]batchJSON, 0, len(list))
	for _, bt := range list {
		data = append(data, batchOf(bt))
	}
	writeJSON(w, pageOf(data, more, func(b *batchJSON) *string { return &b.ID }))
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
		b, _ := a.store.Batch(r.Context(), tenant, id)
		a.invalid(w, http.StatusConflict, "batch_not_cancellable", "", fmt.Sprintf("batch %s is %s: only a validating or in_progress batch can be cancelled", id, b.Status))
	case err != nil:
		a.failed(w, err)
	default:
		a.kickSettle()
		writeJSON(w, batchOf(got))
	}
}
