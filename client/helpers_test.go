package client

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/contract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reply is one scripted answer of a fakeGateway.
type reply struct {
	status int
	header map[string]string
	body   string
}

// ok is a plain 200 reply.
var ok = reply{status: http.StatusOK, body: `{"ok":true}`}

// reject is a gateway rejection as the contract describes it.
func reject(status int, reason, retryAfterMs, retryAfter, estWaitMs string) reply {
	h := map[string]string{"Content-Type": "application/json"}
	if reason != "" {
		h[contract.HeaderReason] = reason
	}
	if retryAfterMs != "" {
		h[contract.HeaderRetryAfterMs] = retryAfterMs
	}
	if retryAfter != "" {
		h[contract.HeaderRetryAfter] = retryAfter
	}
	if estWaitMs != "" {
		h[contract.HeaderEstimatedWaitMs] = estWaitMs
	}
	return reply{status: status, header: h, body: `{"error":{"message":"rejected: ` + reason + `","type":"sluice","code":"` + reason + `"}}`}
}

// seen is what a fakeGateway received.
type seen struct {
	header http.Header
	body   string
}

// fakeGateway is a real HTTP server on loopback that answers with a script,
// repeating the last reply once the script runs out, and records every
// request. It is started outside any synctest bubble: its goroutines block on
// the network, which a bubble could not wait for.
type fakeGateway struct {
	*httptest.Server
	mu      sync.Mutex
	script  []reply
	got     []seen
	handler func(w http.ResponseWriter, r *http.Request) bool // optional override; true if handled
}

func newFakeGateway(t *testing.T, script ...reply) *fakeGateway {
	t.Helper()
	g := &fakeGateway{script: script}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.got = append(g.got, seen{header: r.Header.Clone(), body: string(body)})
	n := len(g.got)
	handler := g.handler
	rep := ok
	if len(g.script) > 0 {
		rep = g.script[min(n, len(g.script))-1]
	}
	g.mu.Unlock()
	if handler != nil && handler(w, r) {
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (g *fakeGateway) requests() []seen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]seen(nil), g.got...)
}

// newTestClient returns a Client whose connections do not outlive their
// response: inside a synctest bubble, an idle keep-alive connection blocked on
// the network would keep the bubble from ever being idle, so fake time could
// not advance.
func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.Base == nil {
		tr := &http.Transport{DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		cfg.Base = tr
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// do sends req through c as an http.Client would, drains and closes the
// response body, and returns the response (for its status) or the error.
func do(t *testing.T, c *Client, req *http.Request) (*http.Response, error) {
	t.Helper()
	resp, err := c.HTTPClient().Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}
