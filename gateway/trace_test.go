package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// tracedUpstream is the mock provider behind a recorder of the
// traceparent of each call it receives; the first failFirst calls are
// answered 503 instead.
type tracedUpstream struct {
	mu          sync.Mutex
	traceparent []string
	failFirst   int32
	calls       atomic.Int32
}

func startTracedUpstream(t *testing.T, failFirst int32) (*tracedUpstream, *httptest.Server) {
	t.Helper()
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	u := &tracedUpstream{failFirst: failFirst}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.traceparent = append(u.traceparent, r.Header.Get("traceparent"))
		u.mu.Unlock()
		if u.calls.Add(1) <= u.failFirst {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
			return
		}
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		mock.Close()
	})
	return u, srv
}

func (u *tracedUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.traceparent...)
}

// startTracedGateway runs a gateway whose spans go to an in-memory
// exporter.
func startTracedGateway(t *testing.T, cfg config.Config) (*httptest.Server, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	_, gw, _ := startLoggedGateway(t, cfg, Options{TracerProvider: tp})
	return gw, exp
}

// serverSpan waits for the server span of request id (it ends when the
// handler returns, which may be after the caller has its answer) and
// returns it with the spans of its trace.
func serverSpan(t *testing.T, exp *tracetest.InMemoryExporter, id string) (tracetest.SpanStub, []tracetest.SpanStub) {
	t.Helper()
	var server tracetest.SpanStub
	testkit.Eventually(t, "the server span of "+id, func() bool {
		for _, s := range exp.GetSpans() {
			if s.SpanKind == trace.SpanKindServer && attrOf(s, attrRequestID) == attribute.StringValue(id) {
				server = s
				return true
			}
		}
		return false
	})
	var tree []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == server.SpanContext.TraceID() && s.SpanContext.SpanID() != server.SpanContext.SpanID() {
			tree = append(tree, s)
		}
	}
	return server, tree
}

func attrOf(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// The span attributes the tests read, by their names on the wire (package
// observe sets them).
const (
	attrStatus      = attribute.Key("http.response.status_code")
	attrResend      = attribute.Key("http.request.resend_count")
	attrModelAsked  = attribute.Key("gen_ai.request.model")
	attrModel       = attribute.Key("gen_ai.response.model")
	attrTokensIn    = attribute.Key("gen_ai.usage.input_tokens")
	attrTokensOut   = attribute.Key("gen_ai.usage.output_tokens")
	attrRequestID   = attribute.Key("sluice.request_id")
	attrTenant      = attribute.Key("sluice.tenant")
	attrClass       = attribute.Key("sluice.class")
	attrClassAsked  = attribute.Key("sluice.class_asked")
	attrReason      = attribute.Key("sluice.reason")
	attrCost        = attribute.Key("sluice.cost_usd")
	attrUpstreamTry = attribute.Key("sluice.upstream.attempt")
	attrOutcome     = attribute.Key("sluice.outcome")
	spanAdmission   = "sluice.admission"
)

const callerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceOfACall: a call continues the caller's trace in a server span
// with the admission wait and the upstream attempt as children, carries
// the call's attributes, and the provider receives a traceparent of the
// same trace whose parent is the attempt's span.
func TestTraceOfACall(t *testing.T) {
	up, srv := startTracedUpstream(t, 0)
	cfg := baseConfig(srv.URL)
	cfg.Spend = testSpend()
	gw, exp := startTracedGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, bigModelBody, map[string]string{"traceparent": callerTraceparent, contract.HeaderPriority: "batch"})
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	server, tree := serverSpan(t, exp, resp.Header.Get(contract.HeaderRequestID))

	if got := server.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s: the caller's trace was not continued", got)
	}
	if got := server.Parent.SpanID().String(); got != "00f067aa0ba902b7" || !server.Parent.IsRemote() {
		t.Errorf("server span's parent %s (remote %v), want the caller's span", got, server.Parent.IsRemote())
	}
	if server.Name != "POST /v1/chat/completions" {
		t.Errorf("server span named %q", server.Name)
	}
	for k, v := range map[attribute.Key]attribute.Value{
		attrStatus:     attribute.IntValue(200),
		attrTenant:     attribute.StringValue(contract.AnonymousTenant),
		attrClass:      attribute.StringValue("batch"),
		attrClassAsked: attribute.StringValue("batch"),
		attrModelAsked: attribute.StringValue("gpt-4o"),
		attrModel:      attribute.StringValue("gpt-4o"),
		attrOutcome:    attribute.StringValue("completed"),
	} {
		if got := attrOf(server, k); got != v {
			t.Errorf("server span %s = %v, want %v", k, got.Emit(), v.Emit())
		}
	}
	for _, k := range []attribute.Key{attrTokensIn, attrTokensOut, attrCost} {
		if v := attrOf(server, k); v.AsFloat64() <= 0 && v.AsInt64() <= 0 {
			t.Errorf("server span %s = %v, want > 0", k, v.Emit())
		}
	}

	if len(tree) != 2 {
		t.Fatalf("%d child spans, want the admission wait and one upstream attempt: %v", len(tree), names(tree))
	}
	var admission, attempt tracetest.SpanStub
	for _, s := range tree {
		if s.Parent.SpanID() != server.SpanContext.SpanID() {
			t.Errorf("span %s is not a child of the server span", s.Name)
		}
		switch s.SpanKind {
		case trace.SpanKindInternal:
			admission = s
		case trace.SpanKindClient:
			attempt = s
		}
	}
	if admission.Name != spanAdmission || attrOf(admission, attrClass) != attribute.StringValue("batch") {
		t.Errorf("admission span %q %v", admission.Name, admission.Attributes)
	}
	if attempt.Name != "POST" || attrOf(attempt, attrStatus) != attribute.IntValue(200) || attrOf(attempt, attrUpstreamTry) != attribute.IntValue(1) {
		t.Errorf("attempt span %q %v", attempt.Name, attempt.Attributes)
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + attempt.SpanContext.SpanID().String() + "-01"
	if got := up.received(); len(got) != 1 || got[0] != want {
		t.Errorf("the provider received traceparent %q, want %q", got, want)
	}
}

// TestTraceOfRetries: each upstream attempt of the gateway's own retries
// is a client span of its own, and each call the provider receives names
// its attempt's span.
func TestTraceOfRetries(t *testing.T) {
	up, srv := startTracedUpstream(t, 1)
	gw, exp := startTracedGateway(t, fastBudget(baseConfig(srv.URL)))
	resp := post(t, t.Context(), gw.URL, chatBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	server, tree := serverSpan(t, exp, resp.Header.Get(contract.HeaderRequestID))
	var attempts []tracetest.SpanStub
	for _, s := range tree {
		if s.SpanKind == trace.SpanKindClient {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2: %v", len(attempts), names(tree))
	}
	got := up.received()
	if len(got) != 2 {
		t.Fatalf("the provider received %d calls", len(got))
	}
	for i, a := range attempts {
		if a.Parent.SpanID() != server.SpanContext.SpanID() || attrOf(a, attrUpstreamTry) != attribute.IntValue(i+1) {
			t.Errorf("attempt %d: parent %s, attributes %v", i+1, a.Parent.SpanID(), a.Attributes)
		}
		if want := "00-" + server.SpanContext.TraceID().String() + "-" + a.SpanContext.SpanID().String() + "-01"; got[i] != want {
			t.Errorf("call %d carried traceparent %q, want %q", i+1, got[i], want)
		}
	}
	if attrOf(attempts[0], attrStatus) != attribute.IntValue(503) || attempts[0].Status.Code != codes.Error {
		t.Errorf("first attempt %v %v, want the 503 as an error", attempts[0].Attributes, attempts[0].Status)
	}
	if attrOf(attempts[1], attrResend) != attribute.IntValue(1) {
		t.Errorf("second attempt: %v, want resend_count 1", attempts[1].Attributes)
	}
}

// TestTraceOfARefusal: a refused call's server and admission spans say
// why, as errors; no upstream span, no call to the provider.
func TestTraceOfARefusal(t *testing.T) {
	up, srv := startTracedUpstream(t, 0)
	cfg := baseConfig(srv.URL)
	cfg.Admission.InitialServiceTime = config.Duration(time.Second)
	gw, exp := startTracedGateway(t, cfg)
	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderTimeoutMs: "50"})
	if b := readAll(t, resp); resp.StatusCode != 503 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	server, tree := serverSpan(t, exp, resp.Header.Get(contract.HeaderRequestID))
	if attrOf(server, attrReason) != attribute.StringValue("queue_wait") || server.Status.Code != codes.Error || attrOf(server, attrStatus) != attribute.IntValue(503) {
		t.Errorf("server span %v %v, want reason queue_wait, status 503, an error", server.Attributes, server.Status)
	}
	if len(tree) != 1 || tree[0].Name != spanAdmission {
		t.Fatalf("child spans %v, want the admission wait alone", names(tree))
	}
	if a := tree[0]; attrOf(a, attrReason) != attribute.StringValue("queue_wait") || a.Status.Code != codes.Error {
		t.Errorf("admission span %v %v", a.Attributes, a.Status)
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("the provider received %d calls", n)
	}
}

// TestTracingOff: without a provider, or with a noop one, the gateway
// makes no span and sends no traceparent of its own: a caller's goes
// through as it came.
func TestTracingOff(t *testing.T) {
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		if newTracer(tp) != nil {
			t.Errorf("%T: tracing on", tp)
		}
	}
	up, srv := startTracedUpstream(t, 0)
	_, gw, _ := startLoggedGateway(t, baseConfig(srv.URL), Options{TracerProvider: noop.NewTracerProvider()})
	for _, sent := range []string{"", callerTraceparent} {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"traceparent": sent})
		readAll(t, resp)
	}
	if got := up.received(); len(got) != 2 || got[0] != "" || got[1] != callerTraceparent {
		t.Errorf("the provider received traceparent %q, want none, then the caller's", got)
	}
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
