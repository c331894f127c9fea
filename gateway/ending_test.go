package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// streamBody asks for a stream of 64 tokens, cut by the mock into 16
// pieces spread over the call's X-Mock-Latency-Ms.
const streamBody = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

// endingConfig is a gateway whose interactive class waits at most 300ms
// by default — far less than the streams below last — and whose first
// call is admitted against a short initial estimate.
func endingConfig(upstream string) config.Config {
	cfg := baseConfig(upstream)
	cfg.Classes = map[string]config.ClassConfig{"interactive": {DefaultTimeout: config.Duration(300 * time.Millisecond)}}
	cfg.Admission.InitialServiceTime = config.Duration(20 * time.Millisecond)
	return cfg
}

// readStream reads a stream to its end and says whether it ended with
// [DONE], and the read error that cut it, if any.
func readStream(resp *http.Response) (done bool, err error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		done = done || sc.Text() == "data: [DONE]"
	}
	return done, sc.Err()
}

// TestDefaultDeadlineDoesNotCutAStartedStream: a caller that states no
// deadline — or only the SDK's X-Stainless-Timeout — gets the whole of an
// answer that streams far past its class's default_timeout (which decided
// only that the call could start); the line says completed.
func TestDefaultDeadlineDoesNotCutAStartedStream(t *testing.T) {
	for name, headers := range map[string]map[string]string{
		"no deadline":         {},
		"X-Stainless-Timeout": {contract.HeaderStainlessTimeout: "1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, up := testkit.StartMock(t, mockllm.Config{})
			g, gw, logs := startLoggedGateway(t, endingConfig(up.URL), Options{})
			headers[mockllm.HeaderLatencyMs] = "1500"
			start := time.Now()
			resp := post(t, t.Context(), gw.URL, streamBody, headers)
			done, err := readStream(resp)
			if resp.StatusCode != 200 || !done || err != nil {
				t.Fatalf("status %d, [DONE] %v, read error %v after %v: want the whole stream", resp.StatusCode, done, err, time.Since(start))
			}
			if l := logs.line(t, resp.Header.Get(contract.HeaderRequestID)); l["outcome"] != "completed" {
				t.Errorf("line %v: want outcome completed", l)
			}
			if n := counter(t, g, "sluice_calls_ended_total", "completed"); n != 1 {
				t.Errorf("sluice_calls_ended_total{outcome=completed} = %v, want 1", n)
			}
		})
	}
}

// TestStatedDeadlineEndsAStream: X-Sluice-Timeout-Ms is the caller's
// deadline for the whole call: a stream still running at it is cut there
// (the caller stops reading then; the provider stops generating and
// billing when its connection closes), and the line says caller_deadline.
func TestStatedDeadlineEndsAStream(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{AbortOnDisconnect: true})
	g, gw, logs := startLoggedGateway(t, endingConfig(up.URL), Options{})
	start := time.Now()
	resp := post(t, t.Context(), gw.URL, streamBody, map[string]string{mockllm.HeaderLatencyMs: "3000", contract.HeaderTimeoutMs: "600"})
	done, _ := readStream(resp)
	if el := time.Since(start); resp.StatusCode != 200 || done || el > 2500*time.Millisecond {
		t.Fatalf("status %d, [DONE] %v after %v: want the stream cut at its 600ms deadline", resp.StatusCode, done, el)
	}
	if l := logs.line(t, resp.Header.Get(contract.HeaderRequestID)); l["outcome"] != "caller_deadline" {
		t.Errorf("line %v: want outcome caller_deadline", l)
	}
	if n := counter(t, g, "sluice_calls_ended_total", "caller_deadline"); n != 1 {
		t.Errorf("sluice_calls_ended_total{outcome=caller_deadline} = %v, want 1", n)
	}
	testkit.Eventually(t, "the provider's call aborted", func() bool { return mock.Stats().Aborted == 1 })
}

// TestMaxCallDurationEndsAnEndlessCall: limits.max_call_duration ends a
// call whose caller stated no deadline — a stream mid-way, or an answer
// not yet begun (a 504 naming the bound) — and the line says max_duration.
func TestMaxCallDurationEndsAnEndlessCall(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{AbortOnDisconnect: true})
	cfg := endingConfig(up.URL)
	cfg.Limits.MaxCallDuration = config.Duration(500 * time.Millisecond)
	g, gw, logs := startLoggedGateway(t, cfg, Options{})

	resp := post(t, t.Context(), gw.URL, streamBody, map[string]string{mockllm.HeaderLatencyMs: "3000"})
	if done, _ := readStream(resp); resp.StatusCode != 200 || done {
		t.Fatalf("stream: status %d, [DONE] %v: want it cut at limits.max_call_duration", resp.StatusCode, done)
	}
	if l := logs.line(t, resp.Header.Get(contract.HeaderRequestID)); l["outcome"] != "max_duration" {
		t.Errorf("stream line %v: want outcome max_duration", l)
	}

	resp = post(t, t.Context(), gw.URL, chatBody, map[string]string{mockllm.HeaderLatencyMs: "3000", contract.HeaderTimeoutMs: "10000"})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusGatewayTimeout || decodeError(t, b).Code != "max_call_duration" {
		t.Fatalf("answer: status %d %s: want 504 max_call_duration (the bound comes before the stated deadline)", resp.StatusCode, b)
	}
	if l := logs.line(t, resp.Header.Get(contract.HeaderRequestID)); l["outcome"] != "max_duration" {
		t.Errorf("answer line %v: want outcome max_duration", l)
	}
	if n := counter(t, g, "sluice_calls_ended_total", "max_duration"); n != 2 {
		t.Errorf("sluice_calls_ended_total{outcome=max_duration} = %v, want 2", n)
	}
	testkit.Eventually(t, "the slots released", func() bool { return g.Gate().Stats().InFlight == 0 })
}

// TestProviderCutIsNamedAndLogged: a provider that breaks off its stream
// is the provider's doing — provider_cut, not canceled — and its warning
// carries the request id; no line of the gateway's lacks one.
func TestProviderCutIsNamedAndLogged(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	g, gw, logs := startLoggedGateway(t, endingConfig(up.URL), Options{})
	resp := post(t, t.Context(), gw.URL, streamBody, map[string]string{mockllm.HeaderFault: "cut", mockllm.HeaderLatencyMs: "200"})
	done, _ := readStream(resp)
	if resp.StatusCode != 200 || done {
		t.Fatalf("status %d, [DONE] %v: want a stream broken off", resp.StatusCode, done)
	}
	id := resp.Header.Get(contract.HeaderRequestID)
	if l := logs.line(t, id); l["outcome"] != "provider_cut" {
		t.Errorf("line %v: want outcome provider_cut", l)
	}
	if n := counter(t, g, "sluice_calls_ended_total", "provider_cut"); n != 1 {
		t.Errorf("sluice_calls_ended_total{outcome=provider_cut} = %v, want 1", n)
	}
	warned := false
	for l := range strings.Lines(logs.String()) {
		if !strings.Contains(l, `"request_id"`) {
			t.Errorf("a line without a request id: %s", l)
		}
		warned = warned || strings.Contains(l, "cut its answer short") && strings.Contains(l, `"request_id":"`+id+`"`)
	}
	if !warned {
		t.Errorf("no warning naming request %s:\n%s", id, logs.String())
	}
}

// TestCallerLeavingMidStreamIsCallerLeft: a caller that hangs up mid-way
// is logged and counted as caller_left.
func TestCallerLeavingMidStreamIsCallerLeft(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{AbortOnDisconnect: true})
	g, gw, logs := startLoggedGateway(t, endingConfig(up.URL), Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := post(t, ctx, gw.URL, streamBody, map[string]string{mockllm.HeaderLatencyMs: "5000"})
	id := resp.Header.Get(contract.HeaderRequestID)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	cancel() // the first piece arrived: hang up
	if _, err := io.Copy(io.Discard, resp.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after hanging up: %v", err)
	}
	resp.Body.Close()
	if l := logs.line(t, id); l["outcome"] != "caller_left" {
		t.Errorf("line %v: want outcome caller_left", l)
	}
	if n := counter(t, g, "sluice_calls_ended_total", "caller_left"); n != 1 {
		t.Errorf("sluice_calls_ended_total{outcome=caller_left} = %v, want 1", n)
	}
	testkit.Eventually(t, "the provider's call aborted", func() bool { return mock.Stats().Aborted == 1 })
}
