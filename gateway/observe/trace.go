package observe

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

// Traces: with a TracerProvider, each request to the public listener is a
// server span, continuing the caller's W3C traceparent when it sends one;
// its children are the admission wait (Acquire) and each upstream attempt
// (RoundTrip, a client span, whose traceparent the provider receives).
// The attributes are the access log's: tenant, client, class, reason, models,
// tokens, cost, status. Without a provider (or with a noop one) none of
// this runs: the gateway does not even look at traceparent, which the
// proxy then forwards as it came.
//
// Only W3C trace context is read and written: it is what the providers'
// and the collectors' tooling speaks, and a gateway that picked its
// propagation from the process's global state would change behaviour with
// whatever else the embedding program set up.

// instrumentation is the tracer's name: the gateway's package, whose spans
// these are.
const instrumentation = "github.com/sluicehq/sluice/gateway"

var traceContext = propagation.TraceContext{}

// NewTracer is the gateway's tracer from tp, or nil when tracing is off
// (no provider, or a noop one).
func NewTracer(tp trace.TracerProvider) trace.Tracer {
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
	attrClientAddr  = attribute.Key("client.address")
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

// StartServerSpan starts the span of request r, whose id is id, with t,
// continuing an incoming traceparent, and returns the request carrying it
// with the span, for Record.Span.
func StartServerSpan(t trace.Tracer, r *http.Request, id string) (*http.Request, trace.Span) {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	m := spanMethod(r.Method)
	name := m
	if m == methodOther {
		name = "HTTP"
	}
	ctx, sp := t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrMethod.String(m), attrPath.String(boundPath(r.URL.Path)), attrRequestID.String(id)))
	return r.WithContext(ctx), sp
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

// EndServerSpan names r.Span after its route (never a raw path, which the
// caller chooses), sets what the request came to, and ends it.
func EndServerSpan(r *Record) {
	sp := r.Span
	if m := spanMethod(r.Method); r.Route != "" && m != methodOther {
		sp.SetName(m + " " + r.Route)
	}
	if !sp.IsRecording() {
		sp.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 17)
	attrs = append(attrs, attrStatus.Int(r.Status), attrTenant.String(r.Tenant), attrClassAsked.String(r.ClassAsked),
		attrAttempt.Int(r.Attempt))
	if r.Route != "" {
		attrs = append(attrs, attrRoute.String(r.Route))
	}
	if r.Client != "" {
		attrs = append(attrs, attrClientAddr.String(r.Client))
	}
	if r.Class != "" {
		attrs = append(attrs, attrClass.String(r.Class))
	}
	if r.ModelAsked != "" {
		attrs = append(attrs, attrModelAsked.String(r.ModelAsked))
	}
	if r.Reason != "" {
		attrs = append(attrs, attrReason.String(r.Reason))
	} else if r.Error != "" {
		attrs = append(attrs, attrErrorCode.String(r.Error))
	}
	if r.Admitted {
		attrs = append(attrs, attrModel.String(r.Model), attrQueueMs.Float64(ms(r.Queue)), attrOutcome.String(r.Outcome),
			attrDeployment.String(r.Deployment))
		if r.UsageKnown {
			attrs = append(attrs, attrTokensIn.Int64(r.TokensIn), attrTokensOut.Int64(r.TokensOut))
		}
		if r.Priced {
			attrs = append(attrs, attrCost.Float64(r.Cost))
		}
		if r.UpstreamID != "" {
			attrs = append(attrs, attrUpstreamID.String(r.UpstreamID))
		}
	}
	sp.SetAttributes(attrs...)
	switch {
	case r.Status >= 500:
		// The semantic conventions' rule for a server span; a refusal
		// for overload is a 503, and says why.
		desc := r.Reason
		if desc == "" {
			desc = r.Error
		}
		sp.SetStatus(codes.Error, desc)
	case r.Status == 0:
		sp.SetStatus(codes.Error, "the caller left before an answer")
	}
	sp.End()
}

// Acquire is acquire(ctx, req) — the admission chain's Acquire — in a
// span of its own when t is not nil: the admission wait, and the
// refusal's reason when the chain refused.
func Acquire(t trace.Tracer, ctx context.Context, req chain.Request,
	acquire func(context.Context, chain.Request) (*chain.Permit, error)) (*chain.Permit, error) {
	if t == nil {
		return acquire(ctx, req)
	}
	ctx, sp := t.Start(ctx, spanAdmission, trace.WithSpanKind(trace.SpanKindInternal))
	defer sp.End()
	p, err := acquire(ctx, req)
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

// RoundTrip makes upstream attempt n (from 1) of req with base, in a
// client span of its own when t is not nil, whose context the provider
// receives in traceparent. The span ends with the response's body. A
// transport error is named, as the span's error.type, by errorType.
func RoundTrip(t trace.Tracer, base http.RoundTripper, req *http.Request, n int, errorType func(error) string) (*http.Response, error) {
	if t == nil {
		return base.RoundTrip(req)
	}
	ctx, sp := t.Start(req.Context(), req.Method, trace.WithSpanKind(trace.SpanKindClient))
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
		sp.SetAttributes(attrErrorType.String(errorType(err)))
		sp.SetStatus(codes.Error, errorType(err))
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
