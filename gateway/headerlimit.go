package gateway

import "net/http"

// Header size limits. Go's server refuses an oversized header block itself,
// with a plain-text 431 that no client of the contract can parse; the
// gateway sets the server's cut at twice its own limit (ServerMaxHeaderBytes)
// and answers what lies between with the JSON error. Errors Go's server
// raises before any handler runs (a malformed request line, a missing Host,
// an unsupported HTTP version or transfer encoding, headers past twice the
// limit) stay plain text: the protocol leaves no handler to answer them.
const (
	DefaultMaxHeaderBytes = 64 << 10
	MaxMaxHeaderBytes     = 1 << 20
)

// ServerMaxHeaderBytes is the http.Server.MaxHeaderBytes the gateway's
// listener runs with.
func (g *Gateway) ServerMaxHeaderBytes() int { return 2 * g.cfg.Limits.MaxHeaderBytes }

// headerBytes counts a request's line and headers as they were sent.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// headersTooLarge refuses an oversized header block with the JSON error.
func (g *Gateway) headersTooLarge(w http.ResponseWriter) {
	g.metrics.badInput.WithLabelValues("headers_too_large").Inc()
	writeError(w, http.StatusRequestHeaderFieldsTooLarge, "invalid_request_error", "headers_too_large",
		"the request's headers are larger than limits.max_header_bytes ("+itoa(int64(g.cfg.Limits.MaxHeaderBytes))+" bytes)")
}
