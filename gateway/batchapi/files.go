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
// OpenAI's expires_after), checks that the file is JSONL at all
// (batch.CheckFile) and stores it; the lines are checked when a batch of
// it validates. A refusal is a 400 naming the part, or a 413 when the
// body is over batch.max_file_bytes plus formAllowance (at once, before a
// byte is read, when its Content-Length says so), and nothing is stored.
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
	var purpose, filename, anchor, seconds string
	var content []byte
	tooBig := func() {
		a.invalid(w, http.StatusRequestEntityTooLarge, "file_too_large", "file",
			fmt.Sprintf("the file is larger than batch.max_file_bytes (%d bytes)", limit))
	}
	// readFailed answers a body that could not be read: a fixed message
	// in the caller's terms (wire.BodyError), the error itself, which may
	// name both socket addresses, in the log.
	readFailed := func(err error) {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(body.err, &mbe):
			tooBig()
		case body.err != nil:
			a.bodyError(w, wire.BodyError(body.err, "batch.max_file_bytes", limit))
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
			readFailed(err)
			return
		}
		name := p.FormName()
		switch name {
		case "purpose", "expires_after[anchor]", "expires_after.anchor", "expires_after[seconds]", "expires_after.seconds":
			v, err := io.ReadAll(io.LimitReader(p, 64))
			if err != nil {
				readFailed(err)
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
			filename = p.FileName()
			content, err = io.ReadAll(io.LimitReader(p, limit+1))
			if err != nil {
				readFailed(err)
				return
			}
			if int64(len(content)) > limit {
				tooBig()
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
	case content == nil:
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "file", "missing required parameter: file")
		return
	}
	now := a.now()
	var expires time.Time
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
	if ierr := batch.CheckFile(content, a.cfg.MaxRequests); ierr != nil {
		a.invalid(w, http.StatusBadRequest, "invalid_file", ierr.Param, "the file was not stored: "+ierr.Msg)
		return
	}
	if len(filename) > 256 {
		filename = filename[:256]
	}
	f := batch.File{ID: newID("file-"), Tenant: tenant, Purpose: "batch", Filename: filename, Bytes: int64(len(content)), CreatedAt: now, ExpiresAt: expires}
	if err := a.store.PutFile(r.Context(), f, content); err != nil {
		a.failed(w, err)
		return
	}
	writeJSON(w, fileOf(f))
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
	_, err := a.liveFile(r.Context(), tenant, id)
	var content []byte
	if err == nil {
		content, err = a.store.FileContent(r.Context(), tenant, id)
	}
	switch {
	case errors.Is(err, batch.ErrNotFound):
		a.notFound(w, "file", id)
	case err != nil:
		a.failed(w, err)
	default:
		w.Header().Set("Content-Type", "application/jsonl")
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		_, _ = w.Write(content)
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
