package gateway

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/observe"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// logBuffer collects a gateway's log output; the lines are written by the
// server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// accessLines are the access-log lines written so far, decoded.
func (b *logBuffer) accessLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.Lines(b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// line waits for the access-log line of request id and returns it: the
// line is written when the handler returns, which may be after the caller
// has read the whole answer.
func (b *logBuffer) line(t *testing.T, id string) map[string]any {
	t.Helper()
	var found map[string]any
	testkit.Eventually(t, "the access-log line of "+id, func() bool {
		for _, l := range b.accessLines(t) {
			if l["request_id"] == id {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

// startLoggedGateway runs a gateway whose logs go to a JSON buffer.
func startLoggedGateway(t *testing.T, cfg config.Config, opts Options) (*Gateway, *httptest.Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = observe.LogConfig{Format: observe.LogFormatJSON}.Logger(logs)
	}
	opts.Getenv = testOptions().Getenv
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv, logs
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// newRequestID is a fresh request id, for the benchmarks' exchanges.
func newRequestID() string { return observe.NewRequestID() }

// TestAccessLog: every request the public listener handles — a call, a
// refusal, a 401, a 404, bad input, a pass-through call — writes one line with its fields, the
// request id the caller was given among them; no line holds a key or a
// body.
func TestAccessLog(t *testing.T) {
	const (
		tenantKey = "sk-tenant-acme-7d1e"
		marker    = "BODY-MARKER-91c4"
	)
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{{Name: "acme", APIKeysSHA256: []string{HashKey(tenantKey)}}}
	cfg.Spend = testSpend()
	// Before any call has completed, a second is the expected service
	// time: a 50 ms budget is refused at once (queue_wait).
	cfg.Admission.InitialServiceTime = config.Duration(time.Second)
	cfg.Retries.Disabled = true // the retry below is admitted without a budget
	cfg.Passthrough = []config.PassthroughConfig{{Path: "/v1/models", Methods: []string{http.MethodGet}, Class: "batch"}}
	_, gw, logs := startLoggedGateway(t, cfg, Options{})
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + marker + `"}],"max_tokens":16}`
	auth := "Bearer " + tenantKey

	type want struct {
		status int
		fields map[string]any
	}
	check := func(name string, resp *http.Response, w want) map[string]any {
		t.Helper()
		readAll(t, resp)
		if resp.StatusCode != w.status {
			t.Fatalf("%s: status %d, want %d", name, resp.StatusCode, w.status)
		}
		id := resp.Header.Get(contract.HeaderRequestID)
		if id == "" {
			t.Fatalf("%s: no %s in the response", name, contract.HeaderRequestID)
		}
		l := logs.line(t, id)
		if l["status"] != float64(w.status) || l["level"] != "INFO" || l["time"] == nil {
			t.Errorf("%s: line %v, want status %d at INFO with a time", name, l, w.status)
		}
		for k, v := range w.fields {
			if l[k] != v {
				t.Errorf("%s: %s = %v (%T), want %v; line %v", name, k, l[k], l[k], v, l)
			}
		}
		return l
	}

	// A refusal, with the caller's own id.
	resp := post(t, t.Context(), gw.URL, body, map[string]string{"Authorization": auth, contract.HeaderTimeoutMs: "50",
		contract.HeaderRequestID: "caller-id-1"})
	if resp.Header.Get(contract.HeaderRequestID) != "caller-id-1" {
		t.Errorf("refusal: %s = %q, want the caller's", contract.HeaderRequestID, resp.Header.Get(contract.HeaderRequestID))
	}
	check("refusal", resp, want{503, map[string]any{"request_id": "caller-id-1", "tenant": "acme", "reason": "queue_wait",
		"class": "interactive", "class_asked": "interactive", "model_asked": "gpt-4o", "method": "POST", "path": "/v1/chat/completions"}})

	// A call, admitted as batch on its second attempt.
	resp = post(t, t.Context(), gw.URL, body, map[string]string{"Authorization": auth, contract.HeaderPriority: "batch",
		contract.HeaderAttempt: "1", contract.HeaderRequestID: "caller-id-2"})
	l := check("call", resp, want{200, map[string]any{"request_id": "caller-id-2", "tenant": "acme", "reason": "",
		"class": "batch", "class_asked": "batch", "attempt": float64(1), "model": "gpt-4o", "model_asked": "gpt-4o",
		"outcome": "completed", "upstream_attempts": float64(1)}})
	for _, k := range []string{"tokens_in", "tokens_out", "cost_usd", "upstream_ms", "ms"} {
		if v, ok := l[k].(float64); !ok || v <= 0 {
			t.Errorf("call: %s = %v, want > 0", k, l[k])
		}
	}
	if v, ok := l["queue_ms"].(float64); !ok || v < 0 {
		t.Errorf("call: queue_ms = %v", l["queue_ms"])
	}

	// An unknown key, with a malformed id, which is replaced.
	resp = post(t, t.Context(), gw.URL, body, map[string]string{"Authorization": "Bearer sk-wrong-" + tenantKey,
		contract.HeaderRequestID: "two words"})
	if id := resp.Header.Get(contract.HeaderRequestID); !hexID.MatchString(id) {
		t.Errorf("malformed id: answered with %q, want a new one", id)
	}
	check("401", resp, want{401, map[string]any{"tenant": "", "error": "invalid_api_key", "reason": ""}})

	// A path not forwarded, and bad input: generated ids.
	resp = postPath(t, t.Context(), gw.URL, "/v1/nowhere?key="+tenantKey, body, map[string]string{"Authorization": auth})
	if id := resp.Header.Get(contract.HeaderRequestID); !hexID.MatchString(id) {
		t.Errorf("404: generated id %q, want 32 hex digits", id)
	}
	check("404", resp, want{404, map[string]any{"tenant": "acme", "error": "not_found", "path": "/v1/nowhere"}})
	resp = post(t, t.Context(), gw.URL, body, map[string]string{"Authorization": auth, contract.HeaderPriority: "urgent"})
	check("bad header", resp, want{400, map[string]any{"tenant": "acme", "error": "invalid_header"}})

	// A pass-through call, admitted at the route's class.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.URL+"/v1/models", nil)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	l = check("pass-through", resp, want{200, map[string]any{"tenant": "acme", "method": "GET", "path": "/v1/models",
		"class": "batch", "class_asked": "interactive", "outcome": "completed", "reason": ""}})
	if _, priced := l["cost_usd"]; priced {
		t.Errorf("pass-through: an unbilled call has a cost: %v", l)
	}

	out := logs.String()
	for _, secret := range []string{tenantKey, "sk-provider-secret", marker} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
	if n := len(logs.accessLines(t)); n != 6 {
		t.Errorf("%d access-log lines for 6 requests:\n%s", n, out)
	}
}

// TestRequestIDReachesTheProvider: the provider receives the request's id
// — the caller's, or the one the gateway made — and its own X-Request-Id
// comes back as X-Sluice-Upstream-Request-Id and in the log.
func TestRequestIDReachesTheProvider(t *testing.T) {
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, strings.Join(r.Header.Values(contract.HeaderRequestID), ","))
		mu.Unlock()
		w.Header().Set(contract.HeaderRequestID, "req_provider_42")
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	_, gw, logs := startLoggedGateway(t, baseConfig(up.URL), Options{})

	ids := []string{}
	for _, sent := range []string{"caller-7", "", strings.Repeat("x", observe.MaxRequestID+1)} {
		h := map[string]string{}
		if sent != "" {
			h[contract.HeaderRequestID] = sent
		}
		resp := post(t, t.Context(), gw.URL, chatBody, h)
		readAll(t, resp)
		if vs := resp.Header.Values(contract.HeaderRequestID); len(vs) != 1 {
			t.Fatalf("sent %q: answered with %s %q, want one id (the provider's moved aside)", sent, contract.HeaderRequestID, vs)
		}
		id := resp.Header.Get(contract.HeaderRequestID)
		if sent == "caller-7" && id != sent || sent != "caller-7" && !hexID.MatchString(id) {
			t.Errorf("sent %q: id %q", sent, id)
		}
		if up := resp.Header.Get(contract.HeaderUpstreamRequestID); up != "req_provider_42" {
			t.Errorf("%s = %q, want the provider's id", contract.HeaderUpstreamRequestID, up)
		}
		if l := logs.line(t, id); l["upstream_request_id"] != "req_provider_42" {
			t.Errorf("line %v: want upstream_request_id", l)
		}
		ids = append(ids, id)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Errorf("the provider received ids %q, the callers were given %q", got, ids)
	}
}

// TestConfigLogFormat: the gateway's config validates its log section
// (observe.LogConfig), naming the field.
func TestConfigLogFormat(t *testing.T) {
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Log.Format = "xml"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Errorf("log.format xml: %v, want an error naming log.format", err)
	}
	cfg.Log.Format = observe.LogFormatJSON
	if err := cfg.Validate(); err != nil {
		t.Errorf("log.format json: %v", err)
	}
}

// TestAccessLogOfAStream: a streamed call's line is written when the
// stream has ended, with the usage of its last event.
func TestAccessLogOfAStream(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	_, gw, logs := startLoggedGateway(t, cfg, Options{})
	resp := post(t, t.Context(), gw.URL,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || !bytes.Contains(b, []byte("[DONE]")) {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	l := logs.line(t, resp.Header.Get(contract.HeaderRequestID))
	if l["tokens_out"] == nil || l["cost_usd"] == nil || l["outcome"] != "completed" {
		t.Errorf("stream line %v: want its usage, cost and outcome", l)
	}
}

// TestAccessLogBoundsThePath: a caller's long path is cut in its line.
func TestAccessLogBoundsThePath(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	_, gw, logs := startLoggedGateway(t, baseConfig(up.URL), Options{})
	resp, err := http.Get(gw.URL + "/v1/" + strings.Repeat("a", 4000))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	l := logs.line(t, resp.Header.Get(contract.HeaderRequestID))
	if p, _ := l["path"].(string); resp.StatusCode != 404 || len(p) > observe.MaxLoggedPath+len("…") || !strings.HasPrefix(p, "/v1/aaa") {
		t.Errorf("status %d, path of %d bytes logged, want at most %d", resp.StatusCode, len(p), observe.MaxLoggedPath+len("…"))
	}
}

// TestAccessLogOfAnUnreachableProvider: a call the provider never answered
// is logged with its error code and outcome, and the warning about it
// names the same request id.
func TestAccessLogOfAnUnreachableProvider(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg := baseConfig("http://" + addr)
	cfg.Retries.UpstreamAttempts = 1
	_, gw, logs := startLoggedGateway(t, cfg, Options{})
	resp := post(t, t.Context(), gw.URL, chatBody, nil)
	readAll(t, resp)
	id := resp.Header.Get(contract.HeaderRequestID)
	line := logs.line(t, id)
	// Refused (it never reached a provider), the failure in the warning.
	if resp.StatusCode != http.StatusServiceUnavailable || line["reason"] != "queue_wait" || line["outcome"] != "provider_error" || line["status"] != float64(503) {
		t.Errorf("status %d, line %v", resp.StatusCode, line)
	}
	warned := false
	for l := range strings.Lines(logs.String()) {
		warned = warned || strings.Contains(l, `"msg":"upstream call failed"`) && strings.Contains(l, `"request_id":"`+id+`"`)
	}
	if !warned {
		t.Errorf("no warning naming request %s:\n%s", id, logs.String())
	}
}
