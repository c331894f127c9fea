package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/mockllm"
)

// hostileCase is one request an attacker or a careless client sends.
type hostileCase struct {
	name   string
	method string
	path   string
	body   string
	hdr    map[string]string
	status int // 0: any
}

// TestHostileSuite sends the whole battery through one gateway and checks
// what holds across all of it: nothing reached the provider that the gate
// did not admit, and no answer carries an internal address, a key, or more
// than 64 bytes of a header value.
func TestHostileSuite(t *testing.T) {
	m, err := mockllm.New(mockllm.Config{Slots: 4, Median: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	up := startCounting(t, m, &received)
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Retries.UpstreamAttempts = 1
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{HashKey("sk-tenant-acme-0123456789")}},
		{Name: "bolt", Tier: "low", APIKeysSHA256: []string{HashKey("sk-tenant-bolt-0123456789")}},
	}
	g, gw := startGateway(t, cfg)
	acme := map[string]string{"Authorization": "Bearer sk-tenant-acme-0123456789", "Content-Type": "application/json"}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range acme {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	long := strings.Repeat("Z", 10<<10)
	cases := []hostileCase{
		{"valid", "POST", "/v1/chat/completions", chatBody, acme, 200},
		{"no key", "POST", "/v1/chat/completions", chatBody, map[string]string{"Content-Type": "application/json"}, 401},
		{"wrong key", "POST", "/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer sk-wrong-key-abcdefghijklmnop"}, 401},
		{"key in x-api-key", "POST", "/v1/messages", `{"model":"claude-3-5-haiku","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			map[string]string{"X-Api-Key": "sk-tenant-bolt-0123456789", "Content-Type": "application/json"}, 200},
		{"10 KB priority", "POST", "/v1/chat/completions", chatBody, with(map[string]string{contract.HeaderPriority: long}), 400},
		{"10 KB timeout", "POST", "/v1/chat/completions", chatBody, with(map[string]string{contract.HeaderTimeoutMs: long}), 400},
		{"signed timeout", "POST", "/v1/chat/completions", chatBody, with(map[string]string{contract.HeaderTimeoutMs: "+5000"}), 400},
		{"exponent timeout", "POST", "/v1/chat/completions", chatBody, with(map[string]string{contract.HeaderTimeoutMs: "1e3"}), 400},
		{"negative attempt", "POST", "/v1/chat/completions", chatBody, with(map[string]string{contract.HeaderAttempt: "-1"}), 400},
		{"10 KB attempt", "POST", "/v1/chat/completions", chatBody, with(map[string]string{contract.HeaderAttempt: long}), 400},
		{"two models", "POST", "/v1/chat/completions", `{"model":"o1-pro","MODEL":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`, acme, 400},
		{"model twice", "POST", "/v1/chat/completions", `{"model":"o1-pro","model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`, acme, 400},
		{"two max_tokens", "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":1,"Max_Tokens":100000,"messages":[]}`, acme, 400},
		{"not json", "POST", "/v1/chat/completions", `model=gpt-4o`, acme, 400},
		{"array", "POST", "/v1/chat/completions", `[{"model":"gpt-4o"}]`, acme, 400},
		{"huge body", "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","pad":"` + strings.Repeat("a", 11<<20) + `"}`, acme, 413},
		{"images", "POST", "/v1/images/generations", `{"prompt":"x"}`, acme, 404},
		{"another tenant's file", "DELETE", "/v1/files/file-abc", "", acme, 404},
		{"batches", "GET", "/v1/batches", "", acme, 404},
		{"models", "GET", "/v1/models", "", acme, 404},
		{"trace", "TRACE", "/v1/chat/completions", "", acme, 405},
		{"get on a gated api", "GET", "/v1/chat/completions", "", acme, 405},
		{"anthropic batches", "POST", "/v1/messages/batches", `{}`, acme, 404},
		{"oversize headers", "POST", "/v1/chat/completions", chatBody, with(map[string]string{"X-Pad": strings.Repeat("p", 70<<10)}), 431},
		{"upstream reset", "POST", "/v1/chat/completions", chatBody, with(map[string]string{mockllm.HeaderFault: "reset"}), 502},
		{"estimate", "GET", contract.EstimatePath + "?priority=batch", "", acme, 200},
		{"estimate without key", "GET", contract.EstimatePath, "", nil, 401},
	}
	secrets := []string{"sk-provider-secret", "sk-tenant-acme-0123456789", "sk-tenant-bolt-0123456789", "sk-wrong-key", "127.0.0.1", "[::1]", upstreamPort(t, up.URL), long[:65]}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tc.status != 0 && resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %.300s", tc.name, resp.StatusCode, tc.status, body)
		}
		if resp.StatusCode >= 400 && !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
			t.Errorf("%s: a %d that is not JSON: %.200q", tc.name, resp.StatusCode, body)
		}
		if tc.name == "estimate" && (bytes.Contains(body, []byte("queue_depth")) || bytes.Contains(body, []byte("in_flight"))) {
			t.Errorf("a tenant's estimate shows the gateway's global load: %s", body)
		}
		if tc.name == "valid" || tc.name == "key in x-api-key" {
			continue // the provider's answer: the mock's own text
		}
		all := string(body) + fmt.Sprint(resp.Header)
		for _, s := range secrets {
			if s != "" && strings.Contains(all, s) {
				t.Errorf("%s: the answer contains %.40q: %.300s", tc.name, s, all)
			}
		}
	}
	admitted := 0.0
	for _, tenant := range []string{"acme", "bolt"} {
		for _, class := range []string{"interactive", "batch", "speculative"} {
			admitted += counter(t, g, "admissions", class, tenant, "first") + counter(t, g, "admissions", class, tenant, "retry")
		}
	}
	if n := received.Load(); float64(n) != admitted || n == 0 {
		t.Fatalf("the provider received %d requests, the gate admitted %v", n, admitted)
	}
}

// startCounting serves the mock behind a counter of every request.
func startCounting(t *testing.T, m *mockllm.Server, n *atomic.Int64) *httptestServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		m.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); m.Close() })
	return &httptestServer{URL: "http://" + ln.Addr().String()}
}

type httptestServer struct{ URL string }

func upstreamPort(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ":" + u.Port()
}
