package batchapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
)

// fileJSON is OpenAI's file object.
type fileJSON struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Bytes     int64   `json:"bytes"`
	CreatedAt int64   `json:"created_at"`
	Filename  string  `json:"filename"`
	Purpose   string  `json:"purpose"`
	ExpiresAt *int64  `json:"expires_at"`
	Status    string  `json:"status"`
	Details   *string `json:"status_details"`
}

func fileOf(f batch.File) fileJSON {
	return fileJSON{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), ExpiresAt: unix(f.ExpiresAt),
		Filename: f.Filename, Purpose: f.Purpose, Status: "processed"}
}

// formAllowance is what an upload's body may hold beyond
// batch.max_file_bytes: the form's other parts (purpose, expires_after)
// and its boundaries and part headers.
const formAllowance = 1 << 20

// MaxUploadBytes is the most POST /v1/files reads of a body: the file
// and the form around it.
func (a *API) MaxUploadBytes() int64 { return a.cfg.MaxFileBytes + formAllowance }

// liveFile is the tenant's file, or ErrNotFound once it has expired.
func (a *API) liveFile(ctx context.Context, tenant, id string) (batch.File, error) {
	f, err := a.store.File(ctx, tenant, id)
	if err == nil && f.Expired(a.now()) {
		return f, batch.ErrNotFound
	}
	return f, err
}

// uploadFile takes a multipart upload (purpose=batch, file=JSONL, and
// OpenAI's expires_after) and streams the file to the store as it is read
// (StageFile, a chunk at a time), checking as it goes that it is JSONL at
// all (batch.NewFileCheck); the lines are checked when a batch of it
// validates. Nothing of it is held whole in memory. A refusal is a 400
// naming the part; a 413 when the body is over batch.max_file_bytes plus
// formAllowance (at once, before a byte is read, when its Content-Length
// says so) or the tenant's stored bytes would pass
// batch.max_tenant_file_bytes; a 429 when the tenant holds
// batch.max_tenant_files already. Nothing is stored then.
func (a *API) uploadFile(w http.ResponseWriter, r *http.Request, tenant string) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		a.invalid(w, http.StatusBadRequest, "invalid_request", "", "POST /v1/files takes multipart/form-data with purpose and file")
		return
	}
	limit := a.cfg.MaxFileBytes
	if r.ContentLength > limit+formAllowance {
		// Refused before a byte is read: net/http then closes the
		// connection rather than drain the body.
		a.invalid(w, http.StatusRequestEntityTooLarge, "file_too_large", "file",
			fmt.Sprintf("the request body (%d bytes) is larger than batch.max_file_bytes (%d bytes) plus %d bytes for the form's other parts",
				r.ContentLength, limit, formAllowance))
		return
	}
	// The quota, before a byte is read: the count at once, the bytes as
	// far as the Content-Length tells (the file is at most the body).
	files, used, err := a.store.FileUsage(r.Context(), tenant)
	if err != nil {
		a.failed(w, err)
		return
	}
	if files >= a.cfg.MaxTenantFiles {
		a.quotaRefused(w, &batch.QuotaError{Used: int64(files), Max: int64(a.cfg.MaxTenantFiles)}, 0)
		return
	}
	room := a.cfg.MaxTenantFileBytes - used
	if r.ContentLength > 0 && r.ContentLength-formAllowance > room {
		a.quotaRefused(w, &batch.QuotaError{Bytes: true, Used: used, Max: a.cfg.MaxTenantFileBytes}, r.ContentLength-formAllowance)
		return
	}
	release, field, bound, ok := a.uploads.acquire(tenant)
	if !ok {
		a.tooManyUploads(w, field, bound)
		return
	}
	defer release()
	body := &bodyReader{ReadCloser: http.MaxBytesReader(w, r.Body, limit+formAllowance)}
	r.Body = body
	mr, err := r.MultipartReader()
	if err != nil { // no boundary: nothing was read
		a.invalid(w, http.StatusBadRequest, "invalid_request", "", "POST /v1/files takes multipart/form-data with a boundary parameter")
		return
	}
	var purpose, filename, anchor, seconds, id string
	var size int64
	committed := false
	defer func() {
		if id != "" && !committed {
			_ = a.store.AbortFile(context.WithoutCancel(r.Context()), id)
		}
	}()
	tooBig := func() {
		a.invalid(w, http.StatusRequestEntityTooLarge, "file_too_large", "file",
			fmt.Sprintf("the file is larger than batch.max_file_bytes (%d bytes)", limit))
	}
	// readFailed answers a body that could not be read: a fixed message
	// in the caller's terms (wire.BodyError), the error itself, which may
	// name both socket addresses, in the log.
	readFailed := func(err error, stored bool) {
		var mbe *http.MaxBytesError
		var ierr *batch.InputError
		switch {
		case errors.Is(err, errFileTooLarge) || errors.As(body.err, &mbe):
			tooBig()
		case errors.Is(err, errOverQuota): // the file passed the room left
			a.quotaRefused(w, &batch.QuotaError{Bytes: true, Used: used, Max: a.cfg.MaxTenantFileBytes}, 0)
		case errors.As(err, &ierr):
			a.invalid(w, http.StatusBadRequest, "invalid_file", ierr.Param, "the file was not stored: "+ierr.Msg)
		case body.err != nil:
			a.bodyError(w, wire.BodyError(body.err, "batch.max_file_bytes", limit))
		case stored && r.Context().Err() != nil:
			// The caller left while the store wrote: nobody to answer,
			// and no failure of the store's.
		case stored: // the store's own
			a.failed(w, err)
		default: // the body arrived whole: the form itself is malformed
			a.logCause(w, "invalid_request", err)
			a.invalid(w, http.StatusBadRequest, "invalid_request", "", "the request body is not a valid multipart/form-data form (a part's headers are malformed, or it ends before its closing boundary)")
		}
	}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			readFailed(err, false)
			return
		}
		name := p.FormName()
		switch name {
		case "purpose", "expires_after[anchor]", "expires_after.anchor", "expires_after[seconds]", "expires_after.seconds":
			v, err := io.ReadAll(io.LimitReader(p, 64))
			if err != nil {
				readFailed(err, false)
				return
			}
			switch name {
			case "purpose":
				purpose = string(v)
			case "expires_after[anchor]", "expires_after.anchor":
				anchor = string(v)
			default:
				seconds = string(v)
			}
		case "file":
			if id != "" {
				a.invalid(w, http.StatusBadRequest, "invalid_request", "file", "the form has more than one file part")
				return
			}
			filename = p.FileName()
			id = newID("file-")
			// Read to its end, a chunk at a time, into the store: over
			// the file's bound or the tenant's room, or not JSONL, the
			// read fails and the store drops what it wrote.
			in := &capped{r: p, max: limit, tooBig: errFileTooLarge}
			if room < limit {
				in = &capped{r: p, max: room, tooBig: errOverQuota}
			}
			src := &tagged{r: batch.NewFileCheck(in, a.cfg.MaxRequests, a.deps.MaxBodyBytes)}
			size, err = a.store.StageFile(r.Context(), id, src)
			if err != nil {
				id = "" // dropped by StageFile
				readFailed(err, src.err == nil)
				return
			}
		default:
			a.invalid(w, http.StatusBadRequest, "unknown_parameter", name,
				fmt.Sprintf("unknown parameter: %s (files.create takes file, purpose and expires_after)", contract.Echo(name)))
			return
		}
		p.Close()
	}
	switch {
	case purpose != "batch":
		a.invalid(w, http.StatusBadRequest, "invalid_value", "purpose", fmt.Sprintf("purpose: %s, want batch (the only purpose sluice serves)", contract.Echo(purpose)))
		return
	case id == "":
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "file", "missing required parameter: file")
		return
	}
	now := a.now()
	// OpenAI's default for a batch file: it expires after 30 days
	// (batch.retention here).
	expires := now.Add(a.cfg.Retention.D())
	if anchor != "" || seconds != "" {
		n, err := strconv.ParseInt(seconds, 10, 64)
		switch {
		case anchor != "created_at":
			a.invalid(w, http.StatusBadRequest, "invalid_value", "expires_after.anchor", fmt.Sprintf("expires_after.anchor: %s, want created_at", contract.Echo(anchor)))
			return
		case err != nil || n < minExpiresAfter || n > maxExpiresAfter:
			a.invalid(w, http.StatusBadRequest, "invalid_value", "expires_after.seconds",
				fmt.Sprintf("expires_after.seconds: %s, want a number of seconds in %d..%d", contract.Echo(seconds), minExpiresAfter, maxExpiresAfter))
			return
		}
		expires = now.Add(time.Duration(n) * time.Second)
	}
	if len(filename) > 256 {
		filename = filename[:256]
	}
	f := batch.File{ID: id, Tenant: tenant, Purpose: "batch", Filename: filename, Bytes: size, CreatedAt: now, ExpiresAt: expires}
	err = a.store.CommitFile(r.Context(), f, batch.Quota{MaxFiles: a.cfg.MaxTenantFiles, MaxBytes: a.cfg.MaxTenantFileBytes})
	var qe *batch.QuotaError
	switch {
	case errors.As(err, &qe):
		a.quotaRefused(w, qe, size)
		return
	case err != nil:
		a.failed(w, err)
		return
	}
	committed = true
	writeJSON(w, fileOf(f))
}

// Errors of capped: the file passed batch.max_file_bytes, or the tenant's
// room under batch.max_tenant_file_bytes.
var (
	errFileTooLarge = errors.New("batchapi: the file is over batch.max_file_bytes")
	errOverQuota    = errors.New("batchapi: the file is over the tenant's room under batch.max_tenant_file_bytes")
)

// capped reads r up to max bytes, then fails with tooBig.
type capped struct {
	r      io.Reader
	max    int64
	n      int64
	tooBig error
}

func (c *capped) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n += int64(n); c.n > c.max {
		return 0, c.tooBig
	}
	return n, err
}

// tagged keeps the error its reader returned: StageFile's error is the
// upload's when tagged has one, else the store's.
type tagged struct {
	r   io.Reader
	err error
}

func (t *tagged) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		t.err = err
	}
	return n, err
}

// quotaRefused answers an upload past the tenant's quota: 429 for the
// count (files expire or may be deleted: it says so), 413 for the bytes.
// size is the file's, when known.
func (a *API) quotaRefused(w http.ResponseWriter, qe *batch.QuotaError, size int64) {
	if qe.Bytes {
		msg := fmt.Sprintf("the tenant's files hold %d bytes, and batch.max_tenant_file_bytes is %d", qe.Used, qe.Max)
		if size > 0 {
			msg = fmt.Sprintf("the tenant's files hold %d bytes, and this file's %d would pass batch.max_tenant_file_bytes (%d)", qe.Used, size, qe.Max)
		}
		a.invalid(w, http.StatusRequestEntityTooLarge, "file_storage_exceeded", "file", msg+": delete files (DELETE /v1/files/{id}) or wait for them to expire")
		return
	}
	a.deps.BadInput("too_many_files")
	w.Header().Set(headerShouldRetry, "false")
	a.deps.WriteError(w, http.StatusTooManyRequests, contract.ErrorBody{Error: contract.ErrorDetail{
		Message: fmt.Sprintf("the tenant has %d files, batch.max_tenant_files: delete files (DELETE /v1/files/{id}) or wait for them to expire", qe.Used),
		Type:    contract.ErrorTypeRateLimit, Code: "too_many_files"}})
}

func (a *API) getFile(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		a.notFound(w, "file", id)
		return
	}
	f, err := a.liveFile(r.Context(), tenant, id)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "file", id)
	case err != nil:
		a.failed(w, err)
	default:
		writeJSON(w, fileOf(f))
	}
}

func (a *API) fileContent(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		a.notFound(w, "file", id)
		return
	}
	f, err := a.liveFile(r.Context(), tenant, id)
	var content io.ReadCloser
	if err == nil {
		content, err = a.store.FileContent(r.Context(), tenant, id)
	}
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "file", id)
		return
	case err != nil:
		a.failed(w, err)
		return
	}
	defer content.Close()
	// Served as it is read from the store, a chunk at a time. A read
	// that fails past the headers (the file deleted meanwhile, the store
	// down) can only cut the body short of its Content-Length, which the
	// client sees.
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	if _, err := io.Copy(w, content); err != nil && r.Context().Err() == nil {
		a.deps.Log.Warn("batch: serving a file's content failed", "file", id, "request_id", w.Header().Get(contract.HeaderRequestID), "err", err)
	}
}

// listFiles is files.list: the tenant's files, newest first (order desc)
// or oldest (asc), of purpose when given, limit (1 to 10000, 10000 by
// default, as OpenAI's) a page, after the file id after.
func (a *API) listFiles(w http.ResponseWriter, r *http.Request, tenant string) {
	q := r.URL.Query()
	for k := range q {
		if k != "limit" && k != "after" && k != "order" && k != "purpose" {
			a.invalid(w, http.StatusBadRequest, "unknown_parameter", k,
				fmt.Sprintf("unknown parameter: %s (files.list takes after, limit, order and purpose)", contract.Echo(k)))
			return
		}
	}
	limit := 10000
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			a.invalid(w, http.StatusBadRequest, "invalid_value", "limit", fmt.Sprintf("limit: %s, want 1 to 10000", contract.Echo(s)))
			return
		}
		limit = n
	}
	asc := false
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		asc = true
	default:
		a.invalid(w, http.StatusBadRequest, "invalid_value", "order", fmt.Sprintf("order: %s, want asc or desc", contract.Echo(o)))
		return
	}
	purpose := q.Get("purpose")
	after := q.Get("after")
	if after != "" && !validID(after) {
		a.notFound(w, "file", after)
		return
	}
	list, more, err := a.store.Files(r.Context(), tenant, purpose, after, limit, asc)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "file", after)
		return
	case err != nil:
		a.failed(w, err)
		return
	}
	data := []fileJSON{}
	now := a.now()
	for _, f := range list {
		if !f.Expired(now) { // expired, not yet purged
			data = append(data, fileOf(f))
		}
	}
	writeJSON(w, pageOf(data, more, func(f *fileJSON) *string { return &f.ID }))
}

// page is a list answer as OpenAI pages them: the items, the ids of the
// first and last (null when empty), and whether more follow.
type page[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// pageOf is the page of data (never null), id reading an item's id.
func pageOf[T any](data []T, more bool, id func(*T) *string) page[T] {
	p := page[T]{Object: "list", Data: data, HasMore: more}
	if p.Data == nil {
		p.Data = []T{}
	}
	if n := len(p.Data); n > 0 {
		p.FirstID, p.LastID = id(&p.Data[0]), id(&p.Data[n-1])
	}
	return p
}

// deleteFile is files.delete: the file and its bytes are gone at once. A
// batch validating from it fails (file_not_found); one running already
// has its requests.
func (a *API) deleteFile(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		a.notFound(w, "file", id)
		return
	}
	err := a.store.DeleteFile(r.Context(), tenant, id)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "file", id)
	case err != nil:
		a.failed(w, err)
	default:
		writeJSON(w, struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Deleted bool   `json:"deleted"`
		}{id, "file", true})
	}
}

// bodyReader keeps the first error of the body's own reads other than its
// end: the multipart reader wraps it, or turns it into io.ErrUnexpectedEOF,
// and a body that stalled or was cut is told from a form that is malformed
// by this, not by the multipart reader's error.
type bodyReader struct {
	io.ReadCloser
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}
