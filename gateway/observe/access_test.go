package observe

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// stableLogger writes text lines without their time, and with the line's
// own duration (ms), which runs to now, as "-".
func stableLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey:
			return slog.Attr{}
		case "ms":
			return slog.String("ms", "-")
		}
		return a
	}}))
}

// TestLogAccess pins the access line's keys, their order and values, for
// an admitted call and for a refusal, and the line's absence above Info.
func TestLogAccess(t *testing.T) {
	call := Record{
		RequestID: "r1", Method: "POST", Path: "/v1/chat/completions", Route: "/v1/chat/completions", Start: time.Now(),
		Status: 200, Tenant: "acme", Client: "203.0.113.7", ClassAsked: "interactive", ModelAsked: "gpt-4o", Attempt: 1, Class: "batch",
		Admitted: true, Model: "gpt-4o-mini", Queue: 3*time.Millisecond + 250*time.Microsecond, Upstream: 420 * time.Millisecond,
		UsageKnown: true, TokensIn: 812, TokensOut: 96, Priced: true, Cost: 0.0025, Outcome: "success",
		UpstreamAttempts: 2, Deployment: "east", DegradedBy: "degrade", UpstreamID: "req_42",
	}
	refusal := Record{
		RequestID: "r2", Method: "POST", Path: "/v1/chat/completions", Start: time.Now(), Status: 503, Tenant: "acme",
		ClassAsked: "interactive", Class: "interactive", ModelAsked: "gpt-4o", Reason: "queue_wait", Error: "overloaded",
	}
	notFound := Record{RequestID: "r3", Method: "GET", Path: "/v1/" + strings.Repeat("a", 2*MaxLoggedPath), Start: time.Now(),
		Status: 404, Error: "not_found"}
	for _, tc := range []struct {
		name string
		rec  Record
		want string
	}{
		{"call", call, `level=INFO msg=request request_id=r1 method=POST path=/v1/chat/completions status=200 tenant=acme ` +
			`client=203.0.113.7 class=batch class_asked=interactive attempt=1 model=gpt-4o-mini model_asked=gpt-4o reason="" queue_ms=3.25 ` +
			`upstream_ms=420 tokens_in=812 tokens_out=96 cost_usd=0.0025 outcome=success upstream_attempts=2 upstream=east ` +
			`degraded_by=degrade upstream_request_id=req_42 ms=-` + "\n"},
		{"refusal", refusal, `level=INFO msg=request request_id=r2 method=POST path=/v1/chat/completions status=503 ` +
			`tenant=acme client="" class=interactive class_asked=interactive attempt=0 model="" model_asked=gpt-4o reason=queue_wait ` +
			`queue_ms=0 upstream_ms=0 ms=-` + "\n"},
		{"404", notFound, `level=INFO msg=request request_id=r3 method=GET path=/v1/` + strings.Repeat("a", MaxLoggedPath-4) +
			`… status=404 tenant="" client="" class="" class_asked="" attempt=0 model="" model_asked="" reason="" error=not_found ` +
			`queue_ms=0 upstream_ms=0 ms=-` + "\n"},
	} {
		var b bytes.Buffer
		LogAccess(stableLogger(&b, slog.LevelInfo), &tc.rec)
		if b.String() != tc.want {
			t.Errorf("%s: wrote\n%s\nwant\n%s", tc.name, b.String(), tc.want)
		}
		b.Reset()
		LogAccess(stableLogger(&b, slog.LevelWarn), &tc.rec)
		if b.Len() != 0 {
			t.Errorf("%s: a logger at Warn wrote %q", tc.name, b.String())
		}
	}
}

// BenchmarkLogAccess is the work of one access-log line of an admitted,
// priced call, written by the text and JSON handlers to io.Discard.
func BenchmarkLogAccess(b *testing.B) {
	for _, format := range []string{LogFormatText, LogFormatJSON} {
		b.Run(format, func(b *testing.B) {
			log := LogConfig{Format: format}.Logger(io.Discard)
			rec := Record{RequestID: NewRequestID(), Method: "POST", Path: "/v1/chat/completions", Start: time.Now(),
				Status: 200, Tenant: "acme", ClassAsked: "interactive", Class: "interactive", ModelAsked: "gpt-4o",
				Admitted: true, Model: "gpt-4o", Queue: 3 * time.Millisecond, Upstream: 420 * time.Millisecond,
				UsageKnown: true, TokensIn: 812, TokensOut: 96, Priced: true, Cost: 0.003, Outcome: "success",
				UpstreamAttempts: 1, Deployment: "default"}
			b.ReportAllocs()
			for b.Loop() {
				LogAccess(log, &rec)
			}
		})
	}
}
