package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/guard"
	"github.com/sluicehq/sluice/gateway/observe"
	"github.com/sluicehq/sluice/gateway/wire"
)

// Access logs and traces are package observe's: one line and one server
// span per request the public listener handles. This file is the
// gateway's side: the exchange a request is answered through, which
// gathers what the handlers learn, and the observe.Record filled from it
// and its call when the request is over.

// exchange is one request to the public listener as its access-log line
// and its server span see it: the writer the handlers answer through,
// which keeps the status, and what the handlers learned on the way.
// Used by the request's own goroutine only.
type exchange struct {
	http.ResponseWriter
	r        *http.Request // as it came: its method and path are logged
	start    time.Time
	id       string // X-Request-Id
	accepted bool   // id is the caller's own
	status   int    // 0: nothing was written (the caller left first)
	tenant   string
	// The class and model asked for and the attempt, once the request's
	// headers and body were read; then the call, once it was admitted.
	classAsked, modelAsked string
	attempt                int
	call                   *call
	reason, refusedClass   string // a refusal's
	code                   string // the error code of any other answer of sluice's own
	route                  string // the matched route's path, for the span's name
	// anthropic says the caller speaks Anthropic's API: the gateway's own
	// errors are written in its shape (wire.Exchange).
	anthropic bool
	span      trace.Span
}

// Unwrap lets http.ResponseController (the proxy's flushes, the body's
// read deadline) reach the connection's writer.
func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

func (x *exchange) WriteHeader(code int) {
	if x.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		x.status = code
	}
	x.ResponseWriter.WriteHeader(code)
}

func (x *exchange) Write(p []byte) (int, error) {
	if x.status == 0 {
		x.status = http.StatusOK
	}
	return x.ResponseWriter.Write(p)
}

// exchangeOf is the exchange w answers through, or nil (a handler called
// outside ServeHTTP, such as the Middleware's).
func exchangeOf(w http.ResponseWriter) *exchange {
	x, _ := w.(*exchange)
	return x
}

// begin starts an exchange: the request id, stamped on the response before
// anything can be written, and the server span when tracing is on.
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request) (*exchange, *http.Request) {
	x := &exchange{ResponseWriter: w, r: r, start: time.Now()}
	x.id, x.accepted = observe.RequestID(r.Header)
	w.Header()[contract.HeaderRequestID] = []string{x.id}
	if g.tracer != nil {
		r, x.span = observe.StartServerSpan(g.tracer, r, x.id)
	}
	return x, r
}

// requestID is the request's id, for the gateway's other lines about it.
func (x *exchange) requestID() string {
	if x == nil {
		return ""
	}
	return x.id
}

// asked records the class and attempt the caller's headers asked for.
func (x *exchange) asked(class string, attempt int) {
	if x != nil {
		x.classAsked, x.attempt = class, attempt
	}
}

// askedModel records the model the caller's body asked for.
func (x *exchange) askedModel(model string) {
	if x != nil {
		x.modelAsked = model
	}
}

// refused records a refusal's reason and the class it was refused at.
func (x *exchange) refused(r admission.Reason, class string) {
	if x != nil {
		x.reason, x.refusedClass = r.String(), class
	}
}

// The exchange is the wire.Exchange the error writers of package wire
// answer through: they note the error's code on it, and ask it the
// caller's API shape.
var _ wire.Exchange = (*exchange)(nil)

// NoteError records the code of an error sluice answered with itself.
func (x *exchange) NoteError(code string) {
	if x.code == "" {
		x.code = code
	}
}

// SpeaksAnthropic says the caller speaks Anthropic's API.
func (x *exchange) SpeaksAnthropic() bool { return x.anthropic }

// end ends the request's span and writes its access-log line.
func (g *Gateway) end(x *exchange) {
	if x.span == nil && !g.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	rec := g.record(x)
	if rec.Span != nil {
		observe.EndServerSpan(&rec)
	}
	observe.LogAccess(g.log, &rec)
}

// record is the exchange and its call, if it was admitted, as package
// observe sees them.
func (g *Gateway) record(x *exchange) observe.Record {
	rec := observe.Record{
		RequestID: x.id, Method: x.r.Method, Path: x.r.URL.Path, Route: x.route, Start: x.start,
		Status: x.status, Tenant: x.tenant, ClassAsked: x.classAsked, ModelAsked: x.modelAsked, Attempt: x.attempt,
		Class: x.refusedClass, Reason: x.reason, Error: x.code, Span: x.span,
	}
	if a := guard.ClientAddr(x.r); a.IsValid() {
		rec.Client = a.String()
	}
	c := x.call
	if c == nil {
		return rec
	}
	rec.Admitted, rec.Class, rec.Model = true, c.class, c.model
	rec.Queue, rec.Upstream = c.queue, c.outcome.ServiceTime
	if c.outcome.UsageKnown {
		rec.UsageKnown, rec.TokensIn, rec.TokensOut = true, c.outcome.Usage.Input, c.outcome.Usage.Output
	}
	rec.Cost, rec.Priced = g.cost(c)
	rec.Outcome, rec.UpstreamAttempts = c.ended.String(), c.attempts
	rec.Deployment, rec.UpstreamID = g.deploymentOf(c).name, c.upstreamID
	r := c.permit.Request()
	rec.DegradedBy = r.DegradedBy
	if r.Observe {
		rec.Observed, rec.WouldRefuse, rec.WouldModel, rec.WouldQueue = true, wouldReason(r), r.WouldDegrade, wouldQueue(r)
	}
	return rec
}

// cost is the call's cost in USD at the configured prices, when the call
// is priced and the provider reported its usage.
func (g *Gateway) cost(c *call) (float64, bool) {
	if g.spend == nil || c.unbilled || !c.outcome.UsageKnown {
		return 0, false
	}
	usd, err := g.spend.Cost(c.model, c.outcome.Usage)
	return usd, err == nil
}

// stampUpstreamID moves the provider's own X-Request-Id to
// X-Sluice-Upstream-Request-Id and keeps it for the log and the span
// (observe.MoveUpstreamID).
func (c *call) stampUpstreamID(h http.Header) {
	if id, ok := observe.MoveUpstreamID(h); ok {
		c.upstreamID = id
	}
}

// forwardRequestID sends the request's id upstream when it is not the
// caller's own (which the proxy forwards as it came).
func (x *exchange) forwardRequestID(h http.Header) {
	if x != nil && !x.accepted {
		h[contract.HeaderRequestID] = []string{x.id}
	}
}
