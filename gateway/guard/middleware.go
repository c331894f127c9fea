package guard

import (
	"io"
	"net/http"
	"time"
)

// Middleware applies the per-request part of the connection policy before
// next sees a request: the body's read deadline (l.ReadBody, as
// Config.Limits resolves it: never zero), and marking the connection
// authenticated, out of its address's unauthenticated count, once it has
// sent a request that identified reports known (a valid tenant key; with
// no tenants, any request) and that request's whole body. identified is asked only about requests on a connection of
// NewListener's (handed over by ConnContext) that still counts as
// unauthenticated; it decides the accounting only, and next still answers
// every request, a 401 included.
//
// maxBody says the most a request's route takes of a body; with a derived
// read_body_timeout (l.ReadBodyPerRequest) the deadline fits the body:
// BodyTimeout of its Content-Length, or of maxBody when it is chunked. Nil
// means l.ReadBody for every body.
func Middleware(next http.Handler, l Limits, identified func(*http.Request) bool, maxBody func(*http.Request) int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, _ := r.Context().Value(connKey{}).(*trackedConn)
		// Identify only while the connection still counts as
		// unauthenticated: one extra key hash per connection, not per
		// request. The gateway identifies again and answers 401 itself.
		known := tc != nil && !tc.isAuthenticated() && identified(r)
		if r.Body == nil || r.Body == http.NoBody {
			if known {
				tc.authenticate()
			}
			next.ServeHTTP(w, r)
			return
		}
		// A deadline on the connection, not a timer per read: the poller
		// enforces it, and a blocked read returns as soon as it passes. It
		// is never set on a request without a body: the server already has
		// a read pending on its connection, to notice the client leaving,
		// and a deadline passing under it would cancel the answer, a stream
		// included. For a body, net/http lifts the deadline itself when the
		// body ends and it starts that pending read.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(l.bodyTimeout(r, maxBody)))
		if known {
			// On a shallow copy: the server's own request keeps its
			// body, whose unread size tells net/http, once a handler
			// answers without reading it (a 413 from Content-Length),
			// to close the connection rather than wait to drain it.
			r = r.WithContext(r.Context())
			r.Body = &authBody{ReadCloser: r.Body, tc: tc}
		}
		next.ServeHTTP(w, r)
	})
}

// authBody counts its connection as authenticated once the body of a
// request with a valid key has been read to its end: from then on the
// client has shown both a key and that it sends what it declares.
type authBody struct {
	io.ReadCloser
	tc *trackedConn
}

func (b *authBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.tc.authenticate()
	}
	return n, err
}

// bodyTimeout is r's body's read deadline, from the end of its headers.
// A Content-Length over what the route takes is answered 413 before the
// body is read, so the smaller of the two is what may be read.
func (l Limits) bodyTimeout(r *http.Request, maxBody func(*http.Request) int64) time.Duration {
	if !l.ReadBodyPerRequest || maxBody == nil {
		return l.ReadBody
	}
	size := maxBody(r)
	if r.ContentLength >= 0 {
		size = min(size, r.ContentLength)
	}
	return BodyTimeout(size)
}
