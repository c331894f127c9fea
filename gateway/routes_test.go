package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/mockllm"
)

// countingUpstream puts the real mock behind a counter of every request
// that reaches it, whatever the path.
func countingUpstream(t *testing.T) (*atomic.Int64, *httptest.Server) {
	t.Helper()
	m, err := mockllm.New(mockllm.Config{Slots: 4, Median: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { m.Close(); srv.Close() })
	return &n, srv
}

func do(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

// Nothing reaches the provider that the gate did not admit: by default
// only the gated APIs are forwarded, and never with a method they do not
// take.
func TestOnlyGatedPathsAreForwardedByDefault(t *testing.T) {
	received, up := countingUpstream(t)
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{{Name: "acme", APIKeysSHA256: []string{HashKey("k-acme")}}}
	g, gw := startGateway(t, cfg)
	auth := map[string]string{"Authorization": "Bearer k-acme"}
	for _, tc := range []struct {
		method, path string
		status       int
		anthropic    bool
	}{
		{"GET", "/v1/models", 404, false},
		{"POST", "/v1/images/generations", 404, false},
		{"DELETE", "/v1/files/file-of-another-tenant", 404, false},
		{"GET", "/v1/batches", 404, false},
		{"GET", "/v1/responses/resp_123", 404, false},
		{"POST", "/v1/messages/batches", 404, true},
		{"GET", "/v1/chat/completions", 405, false},
		{"DELETE", "/v1/messages", 405, true},
		{"TRACE", "/v1/chat/completions", 405, false},
		{"TRACE", "/anything", 405, false},
		{"CONNECT", "/v1/chat/completions", 405, false},
	} {
		resp, body := do(t, tc.method, gw.URL+tc.path, "", auth)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, body, tc.status)
			continue
		}
		var shape map[string]json.RawMessage
		if err := json.Unmarshal(body, &shape); err != nil {
			t.Errorf("%s %s: body %q is not JSON", tc.method, tc.path, body)
			continue
		}
		if _, ok := shape["type"]; ok != tc.anthropic {
			t.Errorf("%s %s: body %s, want Anthropic's shape: %v", tc.method, tc.path, body, tc.anthropic)
		}
		if tc.status == 405 && tc.method != "TRACE" && tc.method != "CONNECT" && resp.Header.Get("Allow") != "POST" {
			t.Errorf("%s %s: Allow %q, want POST", tc.method, tc.path, resp.Header.Get("Allow"))
		}
	}
	// Unauthenticated callers learn nothing about paths.
	if resp, _ := do(t, "GET", gw.URL+"/v1/models", "", nil); resp.StatusCode != 401 {
		t.Errorf("unauthenticated GET /v1/models: %d, want 401", resp.StatusCode)
	}
	if n := received.Load(); n != 0 {
		t.Fatalf("the provider received %d requests; want 0", n)
	}
	// A gated call goes through, and is the only thing that did.
	resp, body := do(t, "POST", gw.URL+"/v1/chat/completions", chatBody, auth)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	if n, admitted := received.Load(), counter(t, g, "admissions", "interactive", "acme", "first"); n != 1 || admitted != 1 {
		t.Fatalf("provider received %d, gate admitted %v; want 1 and 1", n, admitted)
	}
}

// A path on the allow-list is forwarded through the chain: counted,
// admitted at its class, holding a slot.
func TestPassthroughIsAdmittedThroughTheChain(t *testing.T) {
	received, up := countingUpstream(t)
	cfg := baseConfig(up.URL)
	cfg.Passthrough = []config.PassthroughConfig{{Path: "/v1/models", Methods: []string{"get"}, Class: "batch"}}
	g, gw := startGateway(t, cfg)
	resp, body := do(t, "GET", gw.URL+"/v1/models", "", map[string]string{contract.HeaderPriority: "interactive"})
	if resp.StatusCode != 200 || !strings.Contains(string(body), "gpt-4o") {
		t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, body)
	}
	if got := counter(t, g, "admissions", "batch", AnonymousTenant, "first"); got != 1 {
		t.Fatalf("admitted at batch: %v, want 1 (the route's class, whatever the header)", got)
	}
	if resp, _ := do(t, "POST", gw.URL+"/v1/models", "{}", nil); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST /v1/models: %d Allow %q, want 405 GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if n := received.Load(); n != 1 {
		t.Fatalf("provider received %d, want 1", n)
	}
	// Unbilled, it fed no estimate: the gate has no completed sample.
	if st := g.Gate().Stats(); st.ServiceSamples != 0 {
		t.Fatalf("a metadata call fed %d service-time samples to the estimator", st.ServiceSamples)
	}
}

func TestPassthroughConfigErrors(t *testing.T) {
	tenants := []chain.TenantConfig{{Name: "acme", APIKeysSHA256: []string{HashKey("k")}}}
	for _, tc := range []struct {
		pass    config.PassthroughConfig
		tenants []chain.TenantConfig
		want    string
	}{
		{config.PassthroughConfig{Path: "v1/models", Methods: []string{"GET"}}, nil, "passthrough[0].path"},
		{config.PassthroughConfig{Path: "/v1/models"}, nil, "passthrough[0].methods"},
		{config.PassthroughConfig{Path: "/v1/models", Methods: []string{"TRACE"}}, nil, "passthrough[0].methods[0]: TRACE is never forwarded"},
		{config.PassthroughConfig{Path: "/v1/models", Methods: []string{"FETCH"}}, nil, "passthrough[0].methods[0]"},
		{config.PassthroughConfig{Path: "/v1/", Methods: []string{"GET"}}, nil, "covers the gated API"},
		{config.PassthroughConfig{Path: "/v1/chat/completions", Methods: []string{"GET"}}, nil, "covers the gated API"},
		{config.PassthroughConfig{Path: "/v1/files", Methods: []string{"GET"}}, tenants, "per-key resources"},
		{config.PassthroughConfig{Path: "/v1/models", Methods: []string{"GET"}, Class: "vip"}, nil, "passthrough[0].class"},
	} {
		cfg := baseConfig("http://127.0.0.1:1")
		cfg.Tenants = tc.tenants
		if tc.tenants != nil {
			cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
		}
		cfg.Passthrough = []config.PassthroughConfig{tc.pass}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.pass, err, tc.want)
		}
	}
	// Without tenants, the one anonymous tenant may reach its own files.
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Passthrough = []config.PassthroughConfig{{Path: "/v1/files/", Methods: []string{"GET"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("files without tenants: %v", err)
	}
}

// An upstream failure is reported by kind, never with the addresses or
// the error's text.
func TestUpstreamFailuresSayTheKindNotTheAddress(t *testing.T) {
	// A provider that resets every connection after reading the request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			c.(*net.TCPConn).SetLinger(0) // RST, not FIN
			c.Close()
		}
	}()
	// And one that is not listening at all.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	// The one that is not listening never had the call: it is refused
	// (503 queue_wait), not failed.
	for _, tc := range []struct {
		upstream, code string
		status         int
	}{{"http://" + ln.Addr().String(), "upstream_reset", http.StatusBadGateway}, {deadURL, "queue_wait", http.StatusServiceUnavailable}} {
		cfg := baseConfig(tc.upstream)
		cfg.Retries.UpstreamAttempts = 1
		_, gw := startGateway(t, cfg)
		resp := post(t, t.Context(), gw.URL, chatBody, nil)
		body := readAll(t, resp)
		if resp.StatusCode != tc.status || decodeError(t, body).Code != tc.code {
			t.Errorf("upstream %s: %d %s, want %d %s", tc.upstream, resp.StatusCode, body, tc.status, tc.code)
		}
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(tc.upstream, "http://"))
		for _, leak := range []string{"127.0.0.1", port, "tcp", "dial", "reset by peer", "connection refused", "EOF"} {
			if strings.Contains(string(body), leak) {
				t.Errorf("502 body leaks %q: %s", leak, body)
			}
		}
	}
}

// Headers over the limit get the JSON error, not Go's plain text.
func TestOversizeHeadersGetTheJSONError(t *testing.T) {
	received, up := countingUpstream(t)
	cfg := baseConfig(up.URL)
	cfg.Limits.MaxHeaderBytes = 8 << 10
	g, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g)
	srv.Config.MaxHeaderBytes = g.ServerMaxHeaderBytes()
	srv.Start()
	t.Cleanup(srv.Close)
	resp, body := do(t, "POST", srv.URL+"/v1/chat/completions", chatBody, map[string]string{"X-Padding": strings.Repeat("a", 10<<10)})
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/json" || decodeError(t, body).Code != "headers_too_large" {
		t.Fatalf("10 KiB header over an 8 KiB limit: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if resp, body := do(t, "POST", srv.URL+"/v1/chat/completions", chatBody, map[string]string{"X-Padding": strings.Repeat("a", 4<<10)}); resp.StatusCode != 200 {
		t.Fatalf("4 KiB header: %d %s", resp.StatusCode, body)
	}
	if n := received.Load(); n != 1 {
		t.Fatalf("provider received %d, want 1", n)
	}
	bad := baseConfig(up.URL)
	bad.Limits.MaxHeaderBytes = 2 << 20
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "limits.max_header_bytes") {
		t.Fatalf("2 MiB limit: %v", err)
	}
}
