package batchapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/batch"
)

// fileJSON is OpenAI's file object.
type fileJSON struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Bytes     int64   `json:"bytes"`
	CreatedAt int64   `json:"created_at"`
	Filename  string  `json:"filename"`
	Purpose   string  `json:"purpose"`
	Status    string  `json:"status"`
	Details   *string `json:"status_details"`
}

func fileOf(f batch.File) fileJSON {
	return fileJSON{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Filename: f.Filename, Purpose: f.Purpose, Status: "processed"}
}

// uploadFile takes a multipart upload (purpose=batch, file=JSONL), checks
// every line (and each body as a live call's would be) and stores it; a
// fault is a 400 naming the line, and nothing is stored.
func (a *API) uploadFile(w http.ResponseWriter, r *http.Request, tenant string) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		a.invalid(w, http.StatusBadRequest, "invalid_request", "", "POST /v1/files takes multipart/form-data with purpose and file")
		return
	}
	limit := a.cfg.MaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20) // the file plus the form's other parts
	mr, err := r.MultipartReader()
	if err != nil {
		a.invalid(w, http.StatusBadRequest, "invalid_request", "", "reading the multipart form: "+err.Error())
		return
	}
	var purpose, filename string
	var content []byte
	tooBig := func() {
		a.invalid(w, http.StatusBadRequest, "file_too_large", "file",
			fmt.Sprintf("the file is larger than batch.max_file_bytes (%d bytes)", limit))
	}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooBig()
				return
			}
			a.invalid(w, http.StatusBadRequest, "invalid_request", "", "reading the multipart form: "+err.Error())
			return
		}
		switch p.FormName() {
		case "purpose":
			v, err := io.ReadAll(io.LimitReader(p, 64))
			if err != nil {
				a.invalid(w, http.StatusBadRequest, "invalid_request", "purpose", "reading purpose: "+err.Error())
				return
			}
			purpose = string(v)
		case "file":
			filename = p.FileName()
			content, err = io.ReadAll(io.LimitReader(p, limit+1))
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					tooBig()
					return
				}
				a.invalid(w, http.StatusBadRequest, "invalid_request", "file", "reading the file: "+err.Error())
				return
			}
			if int64(len(content)) > limit {
				tooBig()
				return
			}
		}
		p.Close()
	}
	switch {
	case purpose != "batch":
		a.invalid(w, http.StatusBadRequest, "invalid_request", "purpose", fmt.Sprintf("purpose: %q, want batch (the only purpose sluice serves)", purpose))
		return
	case content == nil:
		a.invalid(w, http.StatusBadRequest, "missing_required_parameter", "file", "file is required")
		return
	}
	reqs, ierr := batch.ParseInput(content, a.cfg.MaxRequests)
	if ierr == nil {
		for i, req := range reqs {
			model, stream, err := a.deps.ReadBody(req.Body)
			switch {
			case err != nil:
				ierr = &batch.InputError{Line: lineOf(content, i), Param: "body", Msg: "body: " + err.Error()}
			case stream:
				ierr = &batch.InputError{Line: lineOf(content, i), Param: "body.stream", Msg: "body: stream is not supported in a batch"}
			case model == "":
				ierr = &batch.InputError{Line: lineOf(content, i), Param: "body.model", Msg: "body: model is required"}
			}
			if ierr != nil {
				break
			}
		}
	}
	if ierr != nil {
		a.invalid(w, http.StatusBadRequest, "invalid_batch_file", "file", "the file was not stored: "+ierr.Error())
		return
	}
	if len(filename) > 256 {
		filename = filename[:256]
	}
	f := batch.File{ID: newID("file-"), Tenant: tenant, Purpose: "batch", Filename: filename, Bytes: int64(len(content)), CreatedAt: a.now()}
	if err := a.store.PutFile(r.Context(), f, content); err != nil {
		a.failed(w, err)
		return
	}
	writeJSON(w, fileOf(f))
}

// lineOf is the 1-based line of the i-th request (blank lines skipped).
func lineOf(content []byte, i int) int {
	n, seen := 0, -1
	for l := range bytes.Lines(content) {
		n++
		if len(bytes.TrimSpace(l)) > 0 {
			if seen++; seen == i {
				return n
			}
		}
	}
	return n
}

func (a *API) getFile(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if !validID(id) {
		a.notFound(w, "file", id)
		return
	}
	f, err := a.store.File(r.Context(), tenant, id)
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
	content, err := a.store.FileContent(r.Context(), tenant, id)
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
