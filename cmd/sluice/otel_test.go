package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/mockllm"
)

// TestTracingIsOffUnlessAskedFor: the OTEL_* variables that turn tracing
// on, off, and the ones this build refuses, naming the variable.
func TestTracingIsOffUnlessAskedFor(t *testing.T) {
	const endpoint = "http://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{"nothing set", nil, false, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true, ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint + "/v1/traces"}, true, ""},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, false, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, false, ""},
		{"sdk not disabled", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true, ""},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true, ""},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, false, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, true, ""},
		{"zipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
	} {
		getenv := func(k string) string { return tc.env[k] }
		tp, shutdown, err := tracerProvider(t.Context(), getenv, slog.New(slog.DiscardHandler))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case (tp != nil) != tc.on:
			t.Errorf("%s: tracing on = %v, want %v", tc.name, tp != nil, tc.on)
		}
		if shutdown != nil {
			_ = shutdown(t.Context())
		}
	}
}

// TestServeHelpNamesLogsAndTraces: -h shows the log format's flag and the
// variables that turn tracing on and off.
func TestServeHelpNamesLogsAndTraces(t *testing.T) {
	var errOut bytes.Buffer
	if err := runServe(t.Context(), []string{"-h"}, io.Discard, &errOut); err == nil {
		t.Fatal("-h returned no flag.ErrHelp")
	}
	for _, want := range []string{"-log-format", "json", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("serve -h does not mention %s:\n%s", want, errOut.String())
		}
	}
}

// syncBuffer is a log the server's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeLogsAndTraces runs the real command with --log-format json and
// an OTLP endpoint: its startup lines and the access-log line of a call
// are JSON, and the call's spans reach the collector over OTLP/HTTP (the
// last ones flushed at shutdown), in one trace with the caller's.
func TestServeLogsAndTraces(t *testing.T) {
	var mu sync.Mutex
	var spans []string
	traceIDs := map[string]bool{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans = append(spans, s.Name)
					traceIDs[string(s.TraceId)] = true
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(mock)
	defer up.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)

	var logs syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--upstream", up.URL, "--concurrency", "2", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json"}, pw, &logs)
		pw.Close()
	}()
	line := make([]byte, 256)
	n, _ := pr.Read(line)
	go io.Copy(io.Discard, pr)
	fields := strings.Fields(string(line[:n])) // "sluice listening on http://ADDR (admin http://ADDR)"
	if len(fields) < 6 {
		t.Fatalf("first line %q", line[:n])
	}
	req, _ := http.NewRequest(http.MethodPost, fields[3]+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	id := resp.Header.Get("X-Request-Id")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), id) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}

	var sawStart, sawRequest bool
	for l := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON", l)
		}
		sawStart = sawStart || m["msg"] == "sluice gateway serving"
		sawRequest = sawRequest || m["msg"] == "request" && m["request_id"] == id && m["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
	}
	if !sawStart || !sawRequest {
		t.Errorf("startup line %v, access-log line with the trace id %v:\n%s", sawStart, sawRequest, logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	slices := strings.Join(spans, ",")
	t.Logf("spans received: %s", slices)
	for _, want := range []string{"POST /v1/chat/completions", "sluice.admission", "POST"} {
		if !strings.Contains(","+slices+",", ","+want+",") {
			t.Errorf("the collector received spans %q, want %q among them", slices, want)
		}
	}
	if len(traceIDs) != 1 {
		t.Errorf("spans in %d traces, want the caller's one", len(traceIDs))
	}
}
