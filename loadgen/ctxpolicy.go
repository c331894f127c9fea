package loadgen

import (
	"context"
	"errors"
	"net/http"
)

// ContextPolicy adapts a retrying client that takes the caller's deadline
// from the request context — the usual contract of Go client libraries,
// sluice's client package among them — into a Policy named name.
//
// wrap receives the runner's attempt transport (to use as the client's base
// transport) and returns the client's RoundTripper. For every logical
// request, ContextPolicy puts the request's Deadline on the context before
// calling it, and keeps that context alive until the runner has read the
// answer's body. The logical request already carries X-Sluice-Priority.
//
// For example, with sluice's client package:
//
//	loadgen.ContextPolicy("client", func(attempt http.RoundTripper) (http.RoundTripper, error) {
//		return client.New(client.Config{Base: attempt})
//	})
func ContextPolicy(name string, wrap func(attempt http.RoundTripper) (http.RoundTripper, error)) Policy {
	return contextPolicy{name: name, wrap: wrap}
}

type contextPolicy struct {
	name string
	wrap func(http.RoundTripper) (http.RoundTripper, error)
}

func (p contextPolicy) Name() string { return p.name }

func (p contextPolicy) Transport(attempt http.RoundTripper) (http.RoundTripper, error) {
	if p.wrap == nil {
		return nil, errors.New("ContextPolicy: nil wrap function")
	}
	rt, err := p.wrap(attempt)
	if err != nil {
		return nil, err
	}
	if rt == nil {
		return nil, errors.New("ContextPolicy: wrap returned a nil RoundTripper")
	}
	return &deadlineTransport{next: rt}, nil
}

// deadlineTransport puts the logical deadline on each request's context.
type deadlineTransport struct{ next http.RoundTripper }

func (t *deadlineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r, ok := RequestFromContext(req.Context())
	if !ok {
		closeBody(req)
		return nil, errors.New("loadgen: a ContextPolicy's transport works only inside loadgen.Run")
	}
	ctx, cancel := context.WithDeadline(req.Context(), r.Deadline)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}
