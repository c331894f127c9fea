package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// Access logs: one line per request the public listener handles — gated
// calls, refusals, bad input, 404s, pass-through — written when the
// request is over (for a stream, when its last byte went out), at level
// Info on the gateway's logger (Options.Logger): a handler at Warn turns
// the lines off and keeps the warnings. A line carries what an operator
// asks first about a request — who, at which class, which model, what
// happened and why, how long it queued and how long the provider took,
// what it cost — and never a key, a body or a query string.

// Log formats.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// LogConfig is how the gateway's logs are written.
type LogConfig struct {
	// Format is text (logfmt-style key=value, for a terminal) or json (one
	// JSON object per line, for a log shipper). Empty means text.
	Format string `yaml:"format"`
}

func (c LogConfig) validate() error {
	switch c.Format {
	case "", LogFormatText, LogFormatJSON:
		return nil
	}
	return fmt.Errorf("config: log.format: %q, want text or json", c.Format)
}

// Logger returns a logger writing to w in the configured format, for the
// gateway's Options.Logger.
func (c LogConfig) Logger(w io.Writer) *slog.Logger {
	if c.Format == LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// maxRequestID bounds an X-Request-Id taken from the caller: room for a
// UUID, a W3C trace id or an AWS X-Ray id, not for a payload.
const maxRequestID = 128

// requestID returns the caller's X-Request-Id when it is one sane token —
// one value of 1 to maxRequestID visible ASCII characters — and true, or a
// new random id and false. A malformed id is replaced, not refused: the id
// serves correlation only and decides nothing about the call, so failing a
// call over it would turn a logging concern into an outage for callers
// behind a proxy that stamps ids of its own; and the value goes into
// every log line, so bytes that could forge or break a line never get
// there. The caller sees the replacement in the response.
func requestID(h http.Header) (string, bool) {
	if vs := h[contract.HeaderRequestID]; len(vs) == 1 && saneToken(vs[0]) {
		return vs[0], true
	}
	return newRequestID(), false
}

func saneToken(s string) bool {
	if len(s) == 0 || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// newRequestID is 16 random bytes in hex: unique without coordination
// between replicas.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	var s [32]byte
	hex.Encode(s[:], b[:])
	return string(s[:])
}

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
	// errors are written in its shape (errors.go).
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
	x.id, x.accepted = requestID(r.Header)
	w.Header()[contract.HeaderRequestID] = []string{x.id}
	if g.tracer != nil {
		r = g.startServerSpan(x, r)
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

// noteError records the code of an error sluice answered with itself.
func noteError(w http.ResponseWriter, code string) {
	if x := exchangeOf(w); x != nil && x.code == "" {
		x.code = code
	}
}

// end writes the request's access-log line and ends its span.
func (g *Gateway) end(x *exchange) {
	if x.span != nil {
		g.endServerSpan(x)
	}
	ctx := context.Background()
	if !g.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var buf [24]slog.Attr
	a := append(buf[:0],
		slog.String("request_id", x.id),
		slog.String("method", x.method()),
		slog.String("path", x.path()),
		slog.Int("status", x.status),
		slog.String("tenant", x.tenant),
		slog.String("class", x.class()),
		slog.String("class_asked", x.classAsked),
		slog.Int("attempt", x.attempt),
		slog.String("model", x.model()),
		slog.String("model_asked", x.modelAsked),
		slog.String("reason", x.reason),
	)
	if x.code != "" && x.reason == "" {
		a = append(a, slog.String("error", x.code))
	}
	var queue, upstream time.Duration
	if c := x.call; c != nil {
		queue, upstream = c.queue, c.outcome.ServiceTime
	}
	a = append(a, slog.Float64("queue_ms", ms(queue)), slog.Float64("upstream_ms", ms(upstream)))
	if c := x.call; c != nil {
		if c.outcome.UsageKnown {
			a = append(a, slog.Int64("tokens_in", c.outcome.Usage.Input), slog.Int64("tokens_out", c.outcome.Usage.Output))
		}
		if cost, ok := g.cost(c); ok {
			a = append(a, slog.Float64("cost_usd", cost))
		}
		a = append(a, slog.String("outcome", c.outcome.Result.String()), slog.Int("upstream_attempts", c.attempts),
			slog.String("upstream", g.deploymentOf(c).name))
		if by := c.permit.Request().DegradedBy; by != "" {
			a = append(a, slog.String("degraded_by", by))
		}
		if c.upstreamID != "" {
			a = append(a, slog.String("upstream_request_id", c.upstreamID))
		}
	}
	a = append(a, slog.Float64("ms", ms(time.Since(x.start))))
	if x.span != nil {
		if sc := x.span.SpanContext(); sc.IsValid() {
			a = append(a, slog.String("trace_id", sc.TraceID().String()))
		}
	}
	g.log.LogAttrs(ctx, slog.LevelInfo, "request", a...)
}

// maxLoggedPath bounds the path in a line: a caller chooses it, and a
// 404 for a 100 KiB path need not write 100 KiB.
const maxLoggedPath = 512

// method and path are the request's (never its query, which may carry a
// key). The handlers quote or escape whatever bytes they hold.
func (x *exchange) method() string { return x.r.Method }

func (x *exchange) path() string {
	if p := x.r.URL.Path; len(p) > maxLoggedPath {
		return p[:maxLoggedPath] + "…"
	}
	return x.r.URL.Path
}

// class is the class applied: the admitted call's, or the one a refusal
// was made at.
func (x *exchange) class() string {
	if x.call != nil {
		return x.call.class
	}
	return x.refusedClass
}

func (x *exchange) model() string {
	if x.call != nil {
		return x.call.model
	}
	return ""
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

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stampUpstreamID moves the provider's own X-Request-Id (OpenAI sends one)
// to X-Sluice-Upstream-Request-Id, so that X-Request-Id is the one id of
// the request at every hop, and the provider's — which its support asks
// for — is still in the response and the log.
func (c *call) stampUpstreamID(h http.Header) {
	vs, ok := h[contract.HeaderRequestID]
	if !ok {
		return
	}
	delete(h, contract.HeaderRequestID)
	if len(vs) == 1 && saneToken(vs[0]) {
		c.upstreamID = vs[0]
		h[contract.HeaderUpstreamRequestID] = vs
	}
}

// forwardRequestID sends the request's id upstream when it is not the
// caller's own (which the proxy forwards as it came).
func (x *exchange) forwardRequestID(h http.Header) {
	if x != nil && !x.accepted {
		h[contract.HeaderRequestID] = []string{x.id}
	}
}
