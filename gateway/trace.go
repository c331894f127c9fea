package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/gateway/observe"
)

// Traces (package observe): with a TracerProvider in Options, each request
// to the public listener is a server span, continuing the caller's W3C
// traceparent; its children are the admission wait and each upstream
// attempt. Without a provider (or with a noop one) g.tracer is nil and
// none of this runs.

// newTracer is the gateway's tracer, or nil when tracing is off.
func newTracer(tp trace.TracerProvider) trace.Tracer { return observe.NewTracer(tp) }

// acquire is chain.Acquire, in a span of its own when tracing is on.
func (g *Gateway) acquire(ctx context.Context, req chain.Request) (*chain.Permit, error) {
	return observe.Acquire(g.tracer, ctx, req, g.chain.Acquire)
}

// attempt makes one upstream attempt with base, in a client span of its
// own when tracing is on, whose context the provider receives in
// traceparent. The span ends with the response's body.
func (g *Gateway) attempt(base http.RoundTripper, req *http.Request, c *call, n int) (*http.Response, error) {
	if c != nil {
		c.attempts++
	}
	return observe.RoundTrip(g.tracer, base, req, n, upstreamErrorType)
}

// upstreamErrorType names a failed attempt's error for its span.
func upstreamErrorType(err error) string { return upstreamFailure(err).code }
