package gateway

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// TestBadInputIsRefusedAndNothingIsForwarded: every malformed request gets a
// clear 4xx naming what was wrong, and the provider never sees it.
func TestBadInputIsRefusedAndNothingIsForwarded(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Limits.MaxBodyBytes = 1024
	cfg.Limits.MaxTimeout = config.Duration(time.Minute)
	g, gw := startGateway(t, cfg)
	for _, tc := range []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		names   string // the message must contain this
	}{
		{"body too large", `{"model":"m","pad":"` + strings.Repeat("x", 2000) + `"}`, nil, 413, "max_body_bytes"},
		{"malformed JSON", `{"model": "m",`, nil, 400, "JSON"},
		{"not an object", `["model"]`, nil, 400, "JSON object"},
		{"empty body", ``, nil, 400, "JSON object"},
		{"model not a string", `{"model": 7}`, nil, 400, "model"},
		{"negative max_tokens", `{"model":"m","max_tokens":-1}`, nil, 400, "max_tokens"},
		{"non-numeric timeout", chatBody, map[string]string{contract.HeaderTimeoutMs: "soon"}, 400, contract.HeaderTimeoutMs},
		{"negative timeout", chatBody, map[string]string{contract.HeaderTimeoutMs: "-5"}, 400, contract.HeaderTimeoutMs},
		{"zero timeout", chatBody, map[string]string{contract.HeaderTimeoutMs: "0"}, 400, contract.HeaderTimeoutMs},
		{"absurd timeout", chatBody, map[string]string{contract.HeaderTimeoutMs: "86400000"}, 400, contract.HeaderTimeoutMs},
		{"overflowing timeout", chatBody, map[string]string{contract.HeaderTimeoutMs: "99999999999999999999999"}, 400, contract.HeaderTimeoutMs},
		{"unknown priority", chatBody, map[string]string{contract.HeaderPriority: "urgent"}, 400, contract.HeaderPriority},
		{"non-numeric attempt", chatBody, map[string]string{contract.HeaderAttempt: "two"}, 400, contract.HeaderAttempt},
		{"negative attempt", chatBody, map[string]string{contract.HeaderAttempt: "-1"}, 400, contract.HeaderAttempt},
		{"bad SDK retry count", chatBody, map[string]string{contract.HeaderStainlessRetryCount: "x"}, 400, contract.HeaderStainlessRetryCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, t.Context(), gw.URL, tc.body, tc.headers)
			b := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			e := decodeError(t, b)
			if !strings.Contains(e.Message, tc.names) || e.Type != "invalid_request_error" {
				t.Fatalf("error %+v does not name %q", e, tc.names)
			}
		})
	}
	if st := mock.Stats(); st.Received != 0 {
		t.Fatalf("the provider received %d bad requests", st.Received)
	}
	if st := g.Gate().Stats(); st.InFlight != 0 || st.Admitted != 0 {
		t.Fatalf("bad input took a slot: %+v", st)
	}
}

// A call whose provider cannot be reached never reached it: it is refused
// (503 queue_wait with Retry-After, until the deployment's probe), not
// answered 502, and its slot is given back with no service time.
func TestUpstreamUnreachableIsRefused(t *testing.T) {
	// A port that was free a moment ago: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	g, gw := startGateway(t, baseConfig("http://"+addr))
	resp := post(t, t.Context(), gw.URL, chatBody, nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || decodeError(t, b).Code != "queue_wait" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d (Retry-After %q): %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if st := g.Gate().Stats(); st.InFlight != 0 || st.Completed[admission.Unused] != 1 || st.ServiceSamples != 0 {
		t.Fatalf("the unreachable call was not released unused: %+v", st)
	}
}

func TestUpstreamFaultsReleaseTheSlot(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2})
	g, gw := startGateway(t, baseConfig(up.URL))
	for _, fault := range []string{"error", "reset", "429"} {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"X-Mock-Fault": fault})
		b := readAll(t, resp)
		if resp.StatusCode < 400 {
			t.Errorf("fault %s: status %d %s", fault, resp.StatusCode, b)
		}
	}
	testkit.Eventually(t, "every slot released", func() bool { return g.Gate().Stats().InFlight == 0 })
}
