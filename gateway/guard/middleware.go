package guard

import (
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// Middleware applies the per-request part of the connection policy before
// next sees a request: the body's read deadline (l.ReadBody, as
// Config.Limits resolves it: never zero), and marking the connection
// authenticated, out of its address's unauthenticated count, once it has
// sent a request that identified reports known (a valid tenant key; with
// no tenants, any request) and that request's whole body. identified is
// asked only about requests on a connection of NewListener's (handed over
// by ConnContext) that still counts as unauthenticated; it decides the
// accounting only, and next still answers every request, a 401 included.
//
// On a trusted proxy's connection that sent no PROXY header (client.go),
// the request's client is read from X-Forwarded-For (l.TrustedProxies),
// ClientAddr returns it, and the request itself counts as its client's
// unauthenticated connection would: from here until it has sent a known
// request's whole body, or ended. A client at max_unauthenticated_per_ip
// is answered a 429 in the canned refusal's shape, and the connection is
// closed after it, since its body is not read; identified is asked about
// every such request.
//
// maxBody says the most a request's route takes of a body; with a derived
// read_body_timeout (l.ReadBodyPerRequest) the deadline fits the body:
// BodyTimeout of its Content-Length, or of maxBody when it is chunked. Nil
// means l.ReadBody for every body.
func Middleware(next http.Handler, l Limits, identified func(*http.Request) bool, maxBody func(*http.Request) int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, _ := r.Context().Value(connKey{}).(*trackedConn)
		if tc != nil && tc.perRequest() {
			serveForwarded(next, w, r, tc, l, identified, maxBody)
			return
		}
		// Identify only while the connection still counts as
		// unauthenticated: one extra key hash per connection, not per
		// request. The gateway identifies again and answers 401 itself.
		known := tc != nil && !tc.isAuthenticated() && identified(r)
		if !hasBody(r) {
			if known {
				tc.authenticate()
			}
			next.ServeHTTP(w, r)
			return
		}
		setBodyDeadline(w, r, l, maxBody)
		if known {
			// On a shallow copy: the server's own request keeps its
			// body, whose unread size tells net/http, once a handler
			// answers without reading it (a 413 from Content-Length),
			// to close the connection rather than wait to drain it.
			r = r.WithContext(r.Context())
			r.Body = &authBody{ReadCloser: r.Body, done: tc.authenticate}
		}
		next.ServeHTTP(w, r)
	})
}

// serveForwarded serves a request on a trusted proxy's connection: it
// counts under its X-Forwarded-For client while it is unauthenticated.
func serveForwarded(next http.Handler, w http.ResponseWriter, r *http.Request, tc *trackedConn, l Limits, identified func(*http.Request) bool, maxBody func(*http.Request) int64) {
	client := forwardedClient(l.TrustedProxies, tc.ip, r.Header.Values("X-Forwarded-For"))
	r = withClient(r, client)
	if tc.l.isAnonymous() {
		next.ServeHTTP(w, r)
		return
	}
	slot := tc.l.claim(client)
	if slot == nil {
		tc.l.countRefusal("unauthenticated_per_ip", client)
		writeRefusal(w, refusePerIPStatus, "unauthenticated_per_ip", refusePerIPBody)
		return
	}
	defer slot.release()
	known := identified(r)
	if !hasBody(r) {
		if known {
			slot.release()
		}
		next.ServeHTTP(w, r)
		return
	}
	setBodyDeadline(w, r, l, maxBody)
	if known {
		r.Body = &authBody{ReadCloser: r.Body, done: slot.release} // on withClient's copy of the request
	}
	next.ServeHTTP(w, r)
}

func hasBody(r *http.Request) bool { return r.Body != nil && r.Body != http.NoBody }

// setBodyDeadline sets the request body's read deadline: l.bodyTimeout,
// which fits it to the body's size when read_body_timeout is derived.
//
// A deadline on the connection, not a timer per read: the poller enforces
// it, and a blocked read returns as soon as it passes. It is never set on
// a request without a body: the server already has a read pending on its
// connection, to notice the client leaving, and a deadline passing under
// it would cancel the answer, a stream included. For a body, net/http
// lifts the deadline itself when the body ends and it starts that pending
// read.
func setBodyDeadline(w http.ResponseWriter, r *http.Request, l Limits, maxBody func(*http.Request) int64) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(l.bodyTimeout(r, maxBody)))
}

// writeRefusal answers a request as the listener's canned refusal answers
// a connection, through the server: the same headers and body, and
// Connection: close, so that net/http closes the connection rather than
// read a body that may never come.
func writeRefusal(w http.ResponseWriter, status int, reason string, body string) {
	h := w.Header()
	h.Set("Retry-After", "1")
	h.Set("retry-after-ms", "1000")
	h.Set(contract.HeaderReason, reason)
	h.Set("Content-Type", "application/json")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// authBody calls done once the body of a request with a valid key has been
// read to its end: from then on the client has shown both a key and that
// it sends what it declares.
type authBody struct {
	io.ReadCloser
	done func()
}

func (b *authBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done()
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
