package batchapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
)

// Do runs one item as a live call of the item's tenant: the same chain
// (at the batch class), the same upstream transport, the same books —
// Deps.Handler's. A refusal of sluice's own (overload, the spend ceiling,
// a budget, draining) defers the item rather than fail it.
func (a *API) Do(ctx context.Context, c batch.Claim) batch.Response {
	if a.deps.Draining() {
		return batch.Response{Deferred: true, RetryAfter: time.Second}
	}
	if h := a.hook().BeforeItem; h != nil {
		h(c)
	}
	h, err := a.deps.Handler(c.Tenant, c.Request.URL)
	switch {
	case errors.Is(err, ErrUnknownTenant):
		return batch.Response{Status: http.StatusForbidden,
			Body: []byte(`{"error":{"message":"the batch's tenant is no longer configured","type":"invalid_request_error","code":"unknown_tenant"}}`)}
	case errors.Is(err, ErrNotGated):
		return batch.Response{Status: http.StatusNotFound, Body: []byte(`{"error":{"message":"not a batch endpoint","type":"invalid_request_error","code":"not_found"}}`)}
	case err != nil:
		return batch.Response{Err: err}
	}
	timeout := time.Until(c.Deadline)
	if a.deps.MaxTimeout > 0 {
		timeout = min(timeout, a.deps.MaxTimeout)
	}
	if timeout < time.Millisecond {
		return batch.Response{Deferred: true}
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sluice.batch"+c.Request.URL, bytes.NewReader(c.Request.Body))
	if err != nil {
		return batch.Response{Err: err}
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(contract.HeaderTimeoutMs, strconv.FormatInt(timeout.Milliseconds(), 10))
	w := &capture{header: http.Header{}}
	h.ServeHTTP(w, r)
	if w.status == 0 {
		if ctx.Err() != nil {
			return batch.Response{Err: ctx.Err()}
		}
		w.status = http.StatusBadGateway
	}
	// The provider's own request id, which the gateway moved aside from
	// X-Request-Id (that one is the gateway's id of the call): what
	// OpenAI's response.request_id is, and what its support asks for.
	resp := batch.Response{Status: w.status, RequestID: w.header.Get(contract.HeaderUpstreamRequestID), Body: w.body.Bytes()}
	resp.Usage = batch.UsageOf(resp.Body)
	if reason := w.header.Get(contract.HeaderReason); reason != "" && (w.status == http.StatusTooManyRequests || w.status == http.StatusServiceUnavailable) {
		// Refused by sluice (overload, the spend ceiling, a budget,
		// draining): deferred, not failed.
		resp.Deferred = true
		if ms, err := strconv.ParseInt(w.header.Get(contract.HeaderRetryAfterMs), 10, 64); err == nil {
			resp.RetryAfter = time.Duration(ms) * time.Millisecond
		}
	}
	return resp
}

// capture is the response writer of an item's call: it keeps the answer
// (bounded) for the output file.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

const maxItemResponse = 64 << 20

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len()+len(p) > maxItemResponse {
		return 0, errors.New("batch: response larger than 64 MiB")
	}
	return c.body.Write(p)
}
func (c *capture) Flush() {}
