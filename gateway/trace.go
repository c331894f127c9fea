package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
)

// Traces: with a TracerProvider in Options, each request to the public
// listener is a server span, continuing the caller's W3C traceparent when
// it sends one; its children are the admission wait (chain.Acquire) and
// each upstream attempt (a client span, whose traceparent the provider
// receives). The attributes are the access log's: tenant, class, reason,
// models, tokens, cost, status. Without a provider (or with a noop one)
// none of this runs: the gateway does not even look at traceparent, which
// the proxy then forwards as it came.
//
// Only W3C trace context is read and written: it is what the providers'
// and the collectors' tooling speaks, and a gateway that picked its
// propagation from the process's global state would change behaviour with
// whatever else the embedding program set up.

// instrumentation is the tracer's name: this package.
const instrumentation = "github.com/sluicehq/sluice/gateway"

var traceContext = propagation.TraceContext{}

// newTracer is the gateway's tracer, or nil when tracing is off.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(instrumentation)
}

// Attribute keys. The HTTP ones are OpenTelemetry's semantic conventions,
// the token counts and models its GenAI conventions; the rest are
// sluice's own.
const (
	attrMethod      = attribute.Key("http.request.method")
	attrStatus      = attribute.Key("http.response.status_code")
	attrRoute       = attribute.Key("http.route")
	attrPath        = attribute.Key("url.path")
	attrServerAddr  = attribute.Key("server.address")
	attrErrorType   = attribute.Key("error.type")
	attrResend      = attribute.Key("http.request.resend_count")
	attrModelAsked  = attribute.Key("gen_ai.request.model")
	attrModel       = attribute.Key("gen_ai.response.model")
	attrTokensIn    = attribute.Key("gen_ai.usage.input_tokens")
	attrTokensOut   = attribute.Key("gen_ai.usage.output_tokens")
	attrRequestID   = attribute.Key("sluice.request_id")
	attrTenant      = attribute.Key("sluice.tenant")
	attrClass       = attribute.Key("sluice.class")
	attrClassAsked  = attribute.Key("sluice.class_asked")
	attrAttempt     = attribute.Key("sluice.attempt")
	attrReason      = attribute.Key("sluice.reason")
	attrQueueMs     = attribute.Key("sluice.queue_ms")
	attrCost        = attribute.Key("sluice.cost_usd")
	attrDegraded    = attribute.Key("sluice.degraded")
	attrDegradedBy  = attribute.Key("sluice.degraded_by")
	attrDeployment  = attribute.Key("sluice.upstream")
	attrUpstreamTry = attribute.Key("sluice.upstream.attempt")
	attrUpstreamID  = attribute.Key("sluice.upstream.request_id")
	attrOutcome     = attribute.Key("sluice.outcome")
	attrErrorCode   = attribute.Key("sluice.error")
	spanAdmission   = "sluice.admission"
)

// startServerSpan starts the request's span, continuing an incoming
// traceparent, and returns the request carrying it.
func (g *Gateway) startServerSpan(x *exchange, r *http.Request) *http.Request {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	m := spanMethod(r.Method)
	name := m
	if m == methodOther {
		name = "HTTP"
	}
	ctx, x.span = g.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrMethod.String(m), attrPath.String(x.path()), attrRequestID.String(x.id)))
	return r.WithContext(ctx)
}

// methodOther stands for a method outside HTTP's own, which a caller may
// make up: the conventions' value, which keeps span names few.
const methodOther = "_OTHER"

func spanMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return methodOther
}

// endServerSpan names the span after its route (never a raw path, which
// the caller chooses), sets what the request came to, and ends it.
func (g *Gateway) endServerSpan(x *exchange) {
	sp := x.span
	if m := spanMethod(x.r.Method); x.route != "" && m != methodOther {
		sp.SetName(m + " " + x.route)
	}
	if !sp.IsRecording() {
		sp.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs, attrStatus.Int(x.status), attrTenant.String(x.tenant), attrClassAsked.String(x.classAsked),
		attrAttempt.Int(x.attempt))
	if x.route != "" {
		attrs = append(attrs, attrRoute.String(x.route))
	}
	if cl := x.class(); cl != "" {
		attrs = append(attrs, attrClass.String(cl))
	}
	if x.modelAsked != "" {
		attrs = append(attrs, attrModelAsked.String(x.modelAsked))
	}
	if x.reason != "" {
		attrs = append(attrs, attrReason.String(x.reason))
	} else if x.code != "" {
		attrs = append(attrs, attrErrorCode.String(x.code))
	}
	if c := x.call; c != nil {
		attrs = append(attrs, attrModel.String(c.model), attrQueueMs.Float64(ms(c.queue)), attrOutcome.String(c.outcome.Result.String()),
			attrDeployment.String(g.deploymentOf(c).name))
		if c.outcome.UsageKnown {
			attrs = append(attrs, attrTokensIn.Int64(c.outcome.Usage.Input), attrTokensOut.Int64(c.outcome.Usage.Output))
		}
		if cost, ok := g.cost(c); ok {
			attrs = append(attrs, attrCost.Float64(cost))
		}
		if c.upstreamID != "" {
			attrs = append(attrs, attrUpstreamID.String(c.upstreamID))
		}
	}
	sp.SetAttributes(attrs...)
	switch {
	case x.status >= 500:
		// The semantic conventions' rule for a server span; a refusal
		// for overload is a 503, and says why.
		desc := x.reason
		if desc == "" {
			desc = x.code
		}
		sp.SetStatus(codes.Error, desc)
	case x.status == 0:
		sp.SetStatus(codes.Error, "the caller left before an answer")
	}
	sp.End()
}

// acquire is chain.Acquire, in a span of its own when tracing is on: the
// admission wait, and the refusal's reason when the chain refused.
func (g *Gateway) acquire(ctx context.Context, req chain.Request) (*chain.Permit, error) {
	if g.tracer == nil {
		return g.chain.Acquire(ctx, req)
	}
	ctx, sp := g.tracer.Start(ctx, spanAdmission, trace.WithSpanKind(trace.SpanKindInternal))
	defer sp.End()
	p, err := g.chain.Acquire(ctx, req)
	if !sp.IsRecording() {
		return p, err
	}
	sp.SetAttributes(attrTenant.String(req.Tenant), attrClassAsked.String(req.Class), attrAttempt.Int(req.Attempt))
	var rej *admission.Rejection
	switch {
	case err == nil:
		a := p.Request()
		sp.SetAttributes(attrClass.String(a.Class), attrQueueMs.Float64(ms(p.QueueTime())))
		if a.Degraded {
			sp.SetAttributes(attrDegraded.Bool(true), attrDegradedBy.String(a.DegradedBy), attrModel.String(a.Model))
		}
	case errors.As(err, &rej):
		sp.SetAttributes(attrReason.String(rej.Reason.String()))
		sp.SetStatus(codes.Error, "refused: "+rej.Reason.String())
	default:
		sp.SetStatus(codes.Error, err.Error())
	}
	return p, err
}

// attempt makes one upstream attempt with base, in a client span of its
// own when tracing is on, whose context the provider receives in
// traceparent. The span ends with the response's body.
func (g *Gateway) attempt(base http.RoundTripper, req *http.Request, c *call, n int) (*http.Response, error) {
	if c != nil {
		c.attempts++
	}
	if g.tracer == nil {
		return base.RoundTrip(req)
	}
	ctx, sp := g.tracer.Start(req.Context(), req.Method, trace.WithSpanKind(trace.SpanKindClient))
	out := req.WithContext(ctx)
	// A header of its own: the transport may still be writing an earlier
	// attempt's when that attempt's answer arrived.
	out.Header = req.Header.Clone()
	traceContext.Inject(ctx, propagation.HeaderCarrier(out.Header))
	if sp.IsRecording() {
		sp.SetAttributes(attrMethod.String(req.Method), attrServerAddr.String(req.URL.Host), attrPath.String(req.URL.Path),
			attrUpstreamTry.Int(n))
		if n > 1 {
			sp.SetAttributes(attrResend.Int(n - 1))
		}
	}
	resp, err := base.RoundTrip(out)
	if err != nil {
		sp.SetAttributes(attrErrorType.String(upstreamFailure(err).code))
		sp.SetStatus(codes.Error, upstreamFailure(err).code)
		sp.End()
		return resp, err
	}
	sp.SetAttributes(attrStatus.Int(resp.StatusCode))
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		sp.SetStatus(codes.Error, resp.Status)
	}
	resp.Body = &spanBody{ReadCloser: resp.Body, span: sp}
	return resp, nil
}

// spanBody ends an upstream attempt's span when its body ends or is
// closed.
type spanBody struct {
	io.ReadCloser
	span trace.Span
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.span.End() // a second End is ignored
	}
	return n, err
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.span.End()
	return err
}
