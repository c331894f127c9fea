package observe

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// slogLine is the line slog's TextHandler writes for r's attributes at t.
func slogLine(t *testing.T, at time.Time, r *Record, elapsed time.Duration) string {
	t.Helper()
	var b bytes.Buffer
	rec := slog.NewRecord(at, slog.LevelInfo, "request", 0)
	rec.AddAttrs(accessAttrs(nil, r, elapsed)...)
	if err := slog.NewTextHandler(&b, nil).Handle(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// handLine is the line the text format's handler writes by hand.
func handLine(t *testing.T, at time.Time, r *Record, elapsed time.Duration) string {
	t.Helper()
	b, ok := appendTextLine(nil, at, "request", accessAttrs(nil, r, elapsed))
	if !ok {
		t.Fatalf("%+v: left to slog", r)
	}
	return string(b)
}

// TestTextLineIsSlogs: the access line written by hand is slog's
// TextHandler's, byte for byte, whatever the fields hold.
func TestTextLineIsSlogs(t *testing.T) {
	full := Record{
		RequestID: "r1", Method: "POST", Path: "/v1/chat/completions", Status: 200, Tenant: "acme", Client: "203.0.113.7",
		ClassAsked: "interactive", ModelAsked: "gpt-4o", Attempt: 1, Class: "batch",
		Admitted: true, Model: "gpt-4o-mini", Queue: 3*time.Millisecond + 250*time.Microsecond, Upstream: 420 * time.Millisecond,
		UsageKnown: true, TokensIn: 812, TokensOut: 96, Priced: true, Cost: 0.0025, Outcome: "success",
		UpstreamAttempts: 2, Deployment: "east", DegradedBy: "degrade", UpstreamID: "req_42",
		Observed: true, WouldRefuse: "queue_wait", WouldModel: "gpt-4o-mini", WouldQueue: time.Second,
	}
	odd := Record{
		RequestID: `a"b`, Method: "GET", Path: "/v1/x y=z\\\x00\x7f\u00a0\u2028é\xff" + strings.Repeat("é", MaxLoggedPath),
		Status: 404, Tenant: "t\u00e9", Client: "[::1]:80", Error: "not_found", Attempt: -3,
		Admitted: true, Priced: true, Cost: math.Inf(1), Queue: -time.Microsecond, Upstream: math.MaxInt64,
	}
	nan := Record{Admitted: true, Priced: true, Cost: math.NaN(), UsageKnown: true, TokensIn: math.MinInt64}
	for _, r := range []Record{full, odd, nan, {}} {
		for _, at := range []time.Time{time.Now(), time.Date(2026, 12, 2, 3, 4, 5, 999_999_999, time.UTC),
			time.Date(1, 1, 1, 0, 0, 0, 1, time.FixedZone("x", -3600)), {}} {
			for _, elapsed := range []time.Duration{0, 1500 * time.Microsecond, 7 * time.Hour} {
				if got, want := handLine(t, at, &r, elapsed), slogLine(t, at, &r, elapsed); got != want {
					t.Errorf("by hand\n%s\nslog\n%s", got, want)
				}
			}
		}
	}
}

// FuzzTextLine: TestTextLineIsSlogs for any strings and numbers (.ci/run
// fuzzes it briefly; 300,000 executions ran when it was written).
func FuzzTextLine(f *testing.F) {
	f.Add("r1", "/v1/chat/completions", "acme", "gpt-4o", "", 200, int64(812), 0.0025, int64(1764644645123456789))
	f.Add("a b", "/\x00=\"", "\xff\u2028", "é", "x", -1, int64(-1), math.Inf(-1), int64(0))
	f.Fuzz(func(t *testing.T, id, path, tenant, model, reason string, status int, tokens int64, cost float64, nanos int64) {
		r := Record{RequestID: id, Method: "POST", Path: path, Status: status, Tenant: tenant, Client: model,
			ClassAsked: reason, ModelAsked: model, Reason: reason, Error: path, Admitted: true, Model: tenant,
			Queue: time.Duration(tokens), UsageKnown: true, TokensIn: tokens, TokensOut: -tokens, Priced: true, Cost: cost,
			Outcome: reason, Deployment: id, DegradedBy: path, UpstreamID: tenant}
		at := time.Unix(0, nanos)
		if got, want := handLine(t, at, &r, time.Duration(nanos)), slogLine(t, at, &r, time.Duration(nanos)); got != want {
			t.Fatalf("by hand\n%q\nslog\n%q", got, want)
		}
	})
}

// TestTextLoggerWritesTheLineByHand: the text format's logger takes the
// hand-written line, with no allocation (slog's record allocated for its
// attributes), and writes everything else through slog, a derived
// logger's access lines included.
func TestTextLoggerWritesTheLineByHand(t *testing.T) {
	rec := Record{RequestID: "r1", Method: "POST", Path: "/v1/chat/completions", Start: time.Now(), Status: 200,
		Admitted: true, Outcome: "completed", Deployment: "default"}
	log := LogConfig{}.Logger(io.Discard)
	if allocs := testing.AllocsPerRun(100, func() { LogAccess(log, &rec) }); allocs != 0 {
		t.Errorf("an access line: %v allocations, want 0", allocs)
	}
	var b bytes.Buffer
	log = LogConfig{}.Logger(&b)
	LogAccess(log, &rec)
	log.Warn("other", "k", "v")
	LogAccess(log.With("replica", "a"), &rec)
	lines := strings.Split(b.String(), "\n")
	if len(lines) != 4 || lines[3] != "" ||
		!strings.Contains(lines[0], " level=INFO msg=request request_id=r1 method=POST ") ||
		!strings.Contains(lines[1], " level=WARN msg=other k=v") ||
		!strings.Contains(lines[2], " level=INFO msg=request replica=a request_id=r1 ") {
		t.Errorf("wrote\n%s", b.String())
	}
}
