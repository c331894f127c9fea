package gateway

import (
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/gateway/wire"
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
	wire.WriteError(w, http.StatusRequestHeaderFieldsTooLarge, "invalid_request_error", "headers_too_large",
		"the request's headers are larger than limits.max_header_bytes ("+strconv.Itoa(g.cfg.Limits.MaxHeaderBytes)+" bytes)")
}
