package observe

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
)

// recorder is a tracer whose ended spans go to an in-memory exporter,
// synchronously: a span is there once End returned.
func recorder(t *testing.T) (trace.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := NewTracer(tp)
	if tr == nil {
		t.Fatal("an SDK provider: tracing off")
	}
	return tr, exp
}

func only(t *testing.T, exp *tracetest.InMemoryExporter) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	exp.Reset()
	return spans[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestNewTracer(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider(), noop.TracerProvider{}} {
		if NewTracer(tp) != nil {
			t.Errorf("%T: tracing on", tp)
		}
	}
}

// TestServerSpan: the server span continues the caller's traceparent, is
// named after the route (a made-up method's after none), carries the
// Record's attributes, and is an error for a 5xx or a caller who left.
func TestServerSpan(t *testing.T) {
	tr, exp := recorder(t)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions?key=secret", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	r2, sp := StartServerSpan(tr, r, "r1")
	if got := trace.SpanFromContext(r2.Context()); got != sp {
		t.Fatal("the request does not carry the span")
	}
	rec := Record{RequestID: "r1", Method: r.Method, Path: r.URL.Path, Route: "/v1/chat/completions", Status: 200,
		Tenant: "acme", Client: "203.0.113.7", ClassAsked: "interactive", Class: "batch", ModelAsked: "gpt-4o", Attempt: 1, Admitted: true,
		Model: "gpt-4o-mini", Outcome: "success", Deployment: "east", UsageKnown: true, TokensIn: 3, TokensOut: 5,
		Priced: true, Cost: 0.5, UpstreamID: "req_42", Span: sp}
	EndServerSpan(&rec)
	s := only(t, exp)
	if s.Name != "POST /v1/chat/completions" || s.SpanKind != trace.SpanKindServer || s.Status.Code != codes.Unset {
		t.Errorf("span %q kind %v status %v", s.Name, s.SpanKind, s.Status)
	}
	if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !s.Parent.IsRemote() {
		t.Errorf("the caller's trace was not continued: %v", s.SpanContext.TraceID())
	}
	want := map[attribute.Key]attribute.Value{
		"http.request.method": attribute.StringValue("POST"), "url.path": attribute.StringValue("/v1/chat/completions"),
		"sluice.request_id": attribute.StringValue("r1"), "http.response.status_code": attribute.IntValue(200),
		"sluice.tenant": attribute.StringValue("acme"), "sluice.class_asked": attribute.StringValue("interactive"),
		"sluice.attempt": attribute.IntValue(1), "http.route": attribute.StringValue("/v1/chat/completions"),
		"sluice.class": attribute.StringValue("batch"), "gen_ai.request.model": attribute.StringValue("gpt-4o"),
		"gen_ai.response.model": attribute.StringValue("gpt-4o-mini"), "sluice.queue_ms": attribute.Float64Value(0),
		"sluice.outcome": attribute.StringValue("success"), "sluice.upstream": attribute.StringValue("east"),
		"gen_ai.usage.input_tokens": attribute.Int64Value(3), "gen_ai.usage.output_tokens": attribute.Int64Value(5),
		"sluice.cost_usd": attribute.Float64Value(0.5), "sluice.upstream.request_id": attribute.StringValue("req_42"),
		"client.address": attribute.StringValue("203.0.113.7"),
	}
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k].Emit(), v.Emit())
		}
	}
	if len(got) != len(want) {
		t.Errorf("attributes %v, want %v", got, want)
	}

	for _, tc := range []struct {
		name, method, route string
		status              int
		reason, code        string
		span                string
		desc                string
		attr                attribute.KeyValue
	}{
		{"refusal", http.MethodPost, "/v1/chat/completions", 503, "queue_wait", "", "POST /v1/chat/completions", "queue_wait",
			attribute.String("sluice.reason", "queue_wait")},
		{"error", http.MethodPost, "", 502, "", "upstream_unreachable", "POST", "upstream_unreachable",
			attribute.String("sluice.error", "upstream_unreachable")},
		{"left", http.MethodGet, "/v1/models", 0, "", "", "GET /v1/models", "the caller left before an answer",
			attribute.Int("http.response.status_code", 0)},
		{"made-up method", "BREW", "/v1/models", 405, "", "method_not_allowed", "HTTP", "",
			attribute.String("http.request.method", "_OTHER")},
	} {
		r := httptest.NewRequest(tc.method, "/v1/x", nil)
		_, sp := StartServerSpan(tr, r, "r")
		EndServerSpan(&Record{Method: tc.method, Route: tc.route, Status: tc.status, Reason: tc.reason, Error: tc.code, Span: sp})
		s := only(t, exp)
		wantCode := codes.Unset
		if tc.desc != "" {
			wantCode = codes.Error
		}
		if s.Name != tc.span || s.Status.Code != wantCode || s.Status.Description != tc.desc || attrs(s)[tc.attr.Key] != tc.attr.Value {
			t.Errorf("%s: span %q status %v, attributes %v", tc.name, s.Name, s.Status, s.Attributes)
		}
	}
}

// TestServerSpanBoundsThePath: a caller's long path is cut in the span.
func TestServerSpanBoundsThePath(t *testing.T) {
	tr, exp := recorder(t)
	_, sp := StartServerSpan(tr, httptest.NewRequest(http.MethodGet, "/v1/"+strings.Repeat("a", 4000), nil), "r")
	EndServerSpan(&Record{Method: http.MethodGet, Status: 404, Span: sp})
	if p := attrs(only(t, exp))["url.path"].AsString(); len(p) != MaxLoggedPath+len("…") {
		t.Errorf("path of %d bytes in the span", len(p))
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRoundTrip: an attempt is a client span whose context the provider
// receives, which ends with the response's body; a failed attempt's span
// is an error named by errorType; without a tracer the request goes as
// it came.
func TestRoundTrip(t *testing.T) {
	tr, exp := recorder(t)
	var sent *http.Request
	status := http.StatusServiceUnavailable
	base := roundTripper(func(r *http.Request) (*http.Response, error) {
		sent = r
		if r.URL.Host == "down" {
			return nil, errors.New("refused")
		}
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Body: io.NopCloser(strings.NewReader("body"))}, nil
	})
	errorType := func(error) string { return "upstream_unreachable" }
	req := httptest.NewRequest(http.MethodPost, "http://provider/v1/chat/completions", nil)
	resp, err := RoundTrip(tr, base, req, 2, errorType)
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("traceparent") != "" || sent.Header.Get("traceparent") == "" {
		t.Errorf("traceparent: the caller's request %q, the sent one %q", req.Header.Get("traceparent"), sent.Header.Get("traceparent"))
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans ended before the body", n)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	s := only(t, exp)
	a := attrs(s)
	if s.Name != http.MethodPost || s.SpanKind != trace.SpanKindClient || s.Status.Code != codes.Error ||
		a["server.address"] != attribute.StringValue("provider") || a["sluice.upstream.attempt"] != attribute.IntValue(2) ||
		a["http.request.resend_count"] != attribute.IntValue(1) || a["http.response.status_code"] != attribute.IntValue(503) {
		t.Errorf("span %q %v %v %v", s.Name, s.SpanKind, s.Status, s.Attributes)
	}
	if want := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"; sent.Header.Get("traceparent") != want {
		t.Errorf("traceparent %q, want %q", sent.Header.Get("traceparent"), want)
	}
	resp.Body.Close()

	status = http.StatusOK
	resp, _ = RoundTrip(tr, base, req, 1, errorType)
	resp.Body.Close()
	if s := only(t, exp); s.Status.Code != codes.Unset || attrs(s)["http.request.resend_count"].Type() != attribute.INVALID {
		t.Errorf("first attempt, 200: %v %v", s.Status, s.Attributes)
	}

	_, err = RoundTrip(tr, base, httptest.NewRequest(http.MethodPost, "http://down/", nil), 1, errorType)
	if s := only(t, exp); err == nil || s.Status.Code != codes.Error || s.Status.Description != "upstream_unreachable" ||
		attrs(s)["error.type"] != attribute.StringValue("upstream_unreachable") {
		t.Errorf("failed attempt: %v, span %v %v", err, s.Status, s.Attributes)
	}

	if _, err := RoundTrip(nil, base, req, 1, errorType); err != nil || sent != req {
		t.Errorf("no tracer: %v, the request was not sent as it came", err)
	}
}

// TestAcquire: the admission wait is a span of its own; a refusal's says
// why, as an error; without a tracer acquire is called as it is.
func TestAcquire(t *testing.T) {
	tr, exp := recorder(t)
	req := chain.Request{Tenant: "acme", Class: "interactive", Attempt: 1}
	var ctxSpan trace.Span
	refuse := func(ctx context.Context, _ chain.Request) (*chain.Permit, error) {
		ctxSpan = trace.SpanFromContext(ctx)
		return nil, &admission.Rejection{Reason: admission.ReasonQueueWait}
	}
	if _, err := Acquire(tr, context.Background(), req, refuse); err == nil {
		t.Fatal("no error")
	}
	s := only(t, exp)
	a := attrs(s)
	if s.Name != "sluice.admission" || s.SpanKind != trace.SpanKindInternal || ctxSpan.SpanContext().SpanID() != s.SpanContext.SpanID() ||
		a["sluice.reason"] != attribute.StringValue("queue_wait") || a["sluice.tenant"] != attribute.StringValue("acme") ||
		a["sluice.class_asked"] != attribute.StringValue("interactive") || a["sluice.attempt"] != attribute.IntValue(1) ||
		s.Status.Code != codes.Error || s.Status.Description != "refused: queue_wait" {
		t.Errorf("refusal span %q %v %v", s.Name, s.Status, s.Attributes)
	}

	broken := func(context.Context, chain.Request) (*chain.Permit, error) { return nil, errors.New("ledger down") }
	_, _ = Acquire(tr, context.Background(), req, broken)
	if s := only(t, exp); s.Status.Code != codes.Error || s.Status.Description != "ledger down" {
		t.Errorf("error span %v", s.Status)
	}

	if _, err := Acquire(nil, context.Background(), req, refuse); err == nil || ctxSpan.SpanContext().IsValid() {
		t.Errorf("no tracer: %v, span %v", err, ctxSpan.SpanContext())
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("no tracer: %d spans", n)
	}
}
