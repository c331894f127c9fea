package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// replayable hands out a fresh copy of a request body for each attempt.
type replayable struct {
	first   io.ReadCloser // body for the first attempt, or nil after it is taken
	getBody func() (io.ReadCloser, error)
	ok      bool // whether bodies after the first can be produced
}

// newReplayable prepares req's body for up to attempts sends. It prefers
// req.GetBody (set by http.NewRequest for in-memory bodies and by the OpenAI
// SDK); otherwise, when a retry is possible at all, it buffers up to limit
// bytes of the body. A larger body is streamed once and not retried.
func newReplayable(req *http.Request, attempts int, limit int64) (*replayable, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return &replayable{ok: true, getBody: func() (io.ReadCloser, error) { return http.NoBody, nil }}, nil
	}
	if req.GetBody != nil {
		return &replayable{first: req.Body, getBody: req.GetBody, ok: true}, nil
	}
	if attempts <= 1 {
		return &replayable{first: req.Body}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		req.Body.Close()
		return nil, fmt.Errorf("client: reading the request body to make it replayable: %w", err)
	}
	if int64(len(buf)) > limit {
		// Too big to hold: send what was read followed by the rest, once.
		return &replayable{first: struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}}, nil
	}
	req.Body.Close()
	get := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return &replayable{getBody: get, ok: true}, nil
}

// next returns the body for the next attempt.
func (r *replayable) next() (io.ReadCloser, error) {
	if r.first != nil {
		b := r.first
		r.first = nil
		return b, nil
	}
	if !r.ok {
		return nil, fmt.Errorf("client: request body cannot be sent again")
	}
	return r.getBody()
}

// close releases a first-attempt body that was never sent, as the
// http.RoundTripper contract requires of a request that is refused.
func (r *replayable) close() {
	if r.first != nil {
		r.first.Close()
		r.first = nil
	}
}
