package observe

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Access logs: one line per request the public listener handles — gated
// calls, refusals, bad input, 404s, pass-through — written when the
// request is over (for a stream, when its last byte went out), at level
// Info on the gateway's logger: a handler at Warn turns the lines off and
// keeps the warnings. A line carries what an operator asks first about a
// request — who, at which class, which model, what happened and why, how
// long it queued and how long the provider took, what it cost — and never
// a key, a body or a query string.

// Record is one request to the public listener as its access-log line and
// its server span see it, filled by the gateway when the request is over.
type Record struct {
	RequestID string // X-Request-Id
	// Method and Path are the request's as it came (never its query,
	// which may carry a key); the line and the span cut the path at
	// MaxLoggedPath. The handlers quote or escape whatever bytes they hold.
	Method, Path string
	Route        string    // the matched route's path, for the span's name; "" when none
	Start        time.Time // when the request arrived: the line's ms
	Status       int       // 0: nothing was written (the caller left first)
	Tenant       string
	// Client is the client's address: behind a trusted proxy, the one it
	// speaks for (guard.ClientAddr); "" when unknown.
	Client string
	// The class and model asked for and the attempt, once the request's
	// headers and body were read.
	ClassAsked, ModelAsked string
	Attempt                int
	// Class is the class applied: the admitted call's, or the one a
	// refusal was made at.
	Class  string
	Reason string // a refusal's
	Error  string // the error code of any other answer of sluice's own

	// Admitted says the request became a call: the fields below are its.
	Admitted bool
	Model    string        // the model called: the chain may have degraded it
	Queue    time.Duration // the admission wait
	Upstream time.Duration // the provider's service time
	// UsageKnown says the provider reported the call's usage.
	UsageKnown          bool
	TokensIn, TokensOut int64
	// Priced says Cost, in USD at the configured prices, is known.
	Priced bool
	Cost   float64
	// Outcome says who ended the call: completed, provider_error,
	// provider_cut, caller_left, caller_deadline or max_duration.
	Outcome          string
	UpstreamAttempts int
	Deployment       string // the deployment called
	DegradedBy       string // the stage that degraded the call; "" when none
	UpstreamID       string // the provider's own request id
	// Observed says the call was in observe mode: decided, not enforced.
	// WouldRefuse is the reason enforce mode would have refused it,
	// WouldModel the rung it would have been degraded to, WouldQueue how
	// long it would have waited ("" and zero: none).
	Observed                bool
	WouldRefuse, WouldModel string
	WouldQueue              time.Duration

	// Span is the request's server span (StartServerSpan); nil when
	// tracing is off.
	Span trace.Span
}

// MaxLoggedPath bounds the path in a line: a caller chooses it, and a
// 404 for a 100 KiB path need not write 100 KiB.
const MaxLoggedPath = 512

func boundPath(p string) string {
	if len(p) > MaxLoggedPath {
		return p[:MaxLoggedPath] + "…"
	}
	return p
}

// LogAccess writes r's access-log line to log at level Info, unless the
// logger is above Info. The line's duration (ms) runs from r.Start to now.
func LogAccess(log *slog.Logger, r *Record) {
	ctx := context.Background()
	if !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var buf [29]slog.Attr
	a := accessAttrs(buf[:0], r, time.Since(r.Start))
	if h, ok := log.Handler().(*textHandler); ok {
		h.line(time.Now(), "request", a)
		return
	}
	log.LogAttrs(ctx, slog.LevelInfo, "request", a...)
}

// accessAttrs appends r's line to a, ms being elapsed.
func accessAttrs(a []slog.Attr, r *Record, elapsed time.Duration) []slog.Attr {
	a = append(a,
		slog.String("request_id", r.RequestID),
		slog.String("method", r.Method),
		slog.String("path", boundPath(r.Path)),
		slog.Int("status", r.Status),
		slog.String("tenant", r.Tenant),
		slog.String("client", r.Client),
		slog.String("class", r.Class),
		slog.String("class_asked", r.ClassAsked),
		slog.Int("attempt", r.Attempt),
		slog.String("model", r.Model),
		slog.String("model_asked", r.ModelAsked),
		slog.String("reason", r.Reason),
	)
	if r.Error != "" && r.Reason == "" {
		a = append(a, slog.String("error", r.Error))
	}
	a = append(a, slog.Float64("queue_ms", ms(r.Queue)), slog.Float64("upstream_ms", ms(r.Upstream)))
	if r.Admitted {
		if r.UsageKnown {
			a = append(a, slog.Int64("tokens_in", r.TokensIn), slog.Int64("tokens_out", r.TokensOut))
		}
		if r.Priced {
			a = append(a, slog.Float64("cost_usd", r.Cost))
		}
		a = append(a, slog.String("outcome", r.Outcome), slog.Int("upstream_attempts", r.UpstreamAttempts),
			slog.String("upstream", r.Deployment))
		if r.DegradedBy != "" {
			a = append(a, slog.String("degraded_by", r.DegradedBy))
		}
		if r.UpstreamID != "" {
			a = append(a, slog.String("upstream_request_id", r.UpstreamID))
		}
		if r.Observed {
			a = append(a, slog.String("mode", "observe"), slog.String("would_refuse", r.WouldRefuse),
				slog.Float64("would_queue_ms", ms(r.WouldQueue)))
			if r.WouldModel != "" {
				a = append(a, slog.String("would_model", r.WouldModel))
			}
		}
	}
	a = append(a, slog.Float64("ms", ms(elapsed)))
	if r.Span != nil {
		if sc := r.Span.SpanContext(); sc.IsValid() {
			a = append(a, slog.String("trace_id", sc.TraceID().String()))
		}
	}
	return a
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
