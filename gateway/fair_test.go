package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestTenantCapEndToEnd: over real HTTP, a tenant at its max_concurrency
// queues while slots are free for another tenant, and past its queue_share
// it is refused with 503 queue_full; the other tenant is served at once.
func TestTenantCapEndToEnd(t *testing.T) {
	hold := make(chan struct{})
	arrived := make(chan struct{}, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-hold
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer up.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release()

	cfg := baseConfig(up.URL) // 4 slots, max_queue 16
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "a", APIKeysSHA256: []string{HashKey("sk-a")}, Share: admission.TenantShare{MaxInFlight: 1, QueueShare: 1.0 / 16}},
		{Name: "b", APIKeysSHA256: []string{HashKey("sk-b")}},
	}
	g, gw := startGateway(t, cfg)
	send := func(key string) <-chan int {
		done := make(chan int, 1)
		go func() {
			resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"Authorization": "Bearer " + key, contract.HeaderTimeoutMs: "10000"})
			readAll(t, resp)
			done <- resp.StatusCode
		}()
		return done
	}
	a1 := send("sk-a")
	<-arrived // a holds its one slot
	a2 := send("sk-a")
	testkit.Eventually(t, "a's second call queued", func() bool { return g.Gate().Stats().Queued == 1 })
	if st := g.Gate().Stats(); st.InFlight != 1 {
		t.Fatalf("in flight %d with a's second queued, want 1: a is at its cap with 3 slots free", st.InFlight)
	}
	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{"Authorization": "Bearer sk-a", contract.HeaderTimeoutMs: "10000"})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(contract.HeaderReason) != "queue_full" {
		t.Fatalf("a's third call: %d %q %s, want 503 queue_full past its queue share", resp.StatusCode, resp.Header.Get(contract.HeaderReason), b)
	}
	b1 := send("sk-b")
	<-arrived // b reached the provider while a waits at its cap
	release()
	for name, ch := range map[string]<-chan int{"a1": a1, "a2": a2, "b1": b1} {
		if code := <-ch; code != http.StatusOK {
			t.Errorf("%s: status %d, want 200", name, code)
		}
	}
}
