package gateway

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/cluster"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store/redistest"
)

// exhaust calls until the anonymous tenant's budget refuses, and returns
// how many calls were served.
func exhaust(t *testing.T, url string) int {
	t.Helper()
	for n := 0; n < 20; n++ {
		resp := post(t, t.Context(), url, bigModelBody, nil)
		b := readAll(t, resp)
		switch {
		case resp.StatusCode == 429 && resp.Header.Get(contract.HeaderReason) == "tenant_budget":
			return n
		case resp.StatusCode != 200:
			t.Fatalf("call %d: %d %s", n, resp.StatusCode, b)
		}
	}
	t.Fatal("20 calls and the daily budget never refused")
	return 0
}

func storeState(t *testing.T, admin string) cluster.StoreState {
	t.Helper()
	resp, err := http.Get(admin + "/admin/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Store *cluster.StoreState `json:"store"`
	}
	decodeJSON(t, resp, &st)
	if st.Store == nil {
		t.Fatal("no store in the state dump")
	}
	return *st.Store
}

// TestSnapshotKeepsTheDaysSpend: a gateway books spend up to its tenant's
// daily budget and shuts down; a new one started on the same snapshot
// refuses the tenant. A corrupt snapshot stops the gateway from starting.
func TestSnapshotKeepsTheDaysSpend(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	path := filepath.Join(t.TempDir(), "books.json")
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	cfg.Spend.Tenants = map[string]spend.TenantBudget{contract.AnonymousTenant: {PerDay: 2.5 * c}}
	cfg.Store = &config.StoreConfig{Snapshot: &config.SnapshotConfig{Path: path}}

	first := serve(t, cfg)
	if n := exhaust(t, first.url); n == 0 {
		t.Fatal("the first gateway refused at once")
	}
	if st := storeState(t, first.admin); st.Mode != "local" || st.Snapshot != path {
		t.Errorf("store state %+v, want local with the snapshot", st)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	second := serve(t, cfg)
	resp := post(t, t.Context(), second.url, bigModelBody, nil)
	if b := readAll(t, resp); resp.StatusCode != 429 || resp.Header.Get(contract.HeaderReason) != "tenant_budget" {
		t.Fatalf("after a restart, the exhausted tenant: %d %s, want 429 tenant_budget", resp.StatusCode, b)
	}
	_ = second.stop()

	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{}); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "store.snapshot.path") {
		t.Fatalf("a corrupt snapshot: %v, want an error naming store.snapshot.path and %s", err, path)
	}
}

// TestRedisSharesTheBooks: two gateways on one Redis keep one daily
// budget — what one spends, the other refuses within a sync — report
// store mode redis, keep serving with Redis stopped (mode degraded,
// sluice_store_up 0), and write what they booked meanwhile once it is back.
func TestRedisSharesTheBooks(t *testing.T) {
	rs := redistest.Start(t)
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := baseConfig(up.URL)
	cfg.Spend = testSpend()
	cfg.Spend.Tenants = map[string]spend.TenantBudget{contract.AnonymousTenant: {PerDay: 4.5 * c}}
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: rs.URL(), Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
		Timeout: config.Duration(time.Second)}} // two shared cores under -race: no spurious timeouts
	a, b := serve(t, cfg), serve(t, cfg)

	if n := exhaust(t, a.url); n == 0 {
		t.Fatal("gateway a refused at once")
	}
	testkit.Eventually(t, "gateway b refusing the tenant gateway a exhausted", func() bool {
		resp := post(t, t.Context(), b.url, bigModelBody, nil)
		readAll(t, resp)
		return resp.StatusCode == 429 && resp.Header.Get(contract.HeaderReason) == "tenant_budget"
	})
	testkit.Eventually(t, "store state redis, up, nothing queued", func() bool {
		st := storeState(t, b.admin)
		return st.Mode == "redis" && st.Up && st.Queued == 0
	})

	// A tenant without a budget keeps being served with Redis down.
	cfg.Spend.Tenants = nil
	x := serve(t, cfg)
	rs.Stop()
	for range 3 {
		resp := post(t, t.Context(), x.url, bigModelBody, nil)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("with Redis down: %d %s", resp.StatusCode, body)
		}
	}
	testkit.Eventually(t, "store mode degraded", func() bool { st := storeState(t, x.admin); return st.Mode == "degraded" && !st.Up })
	if st := storeState(t, x.admin); st.Queued == 0 || st.LastErrorAt == nil {
		t.Errorf("with Redis down: %+v, want queued spend and last_error_at", st)
	}
	if m := metricsText(t, x.admin); !strings.Contains(m, "sluice_store_up 0") || !strings.Contains(m, "sluice_store_queued_entries") {
		t.Errorf("metrics with Redis down lack sluice_store_up 0 / sluice_store_queued_entries")
	}
	if got := x.g.spend.Snapshot(time.Now()).LedgerErrors; got != 0 {
		t.Errorf("%d ledger errors reached the Limiter", got)
	}
	rs.Restart()
	testkit.Eventually(t, "the queued spend written", func() bool { st := storeState(t, x.admin); return st.Mode == "redis" && st.Queued == 0 })
}

func metricsText(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return string(readAll(t, resp))
}

// TestStoreConfigErrorsNameTheField: every bad store setting is refused by
// its YAML path, a missing password variable when the gateway is built.
func TestStoreConfigErrorsNameTheField(t *testing.T) {
	const base = "upstream: {url: http://x}\nadmission: {concurrency: 1}\nspend: {prices: {m: {input_per_mtok: 1}}}\n"
	for _, tc := range []struct{ yaml, field string }{
		{"upstream: {url: http://x}\nadmission: {concurrency: 1}\nstore: {snapshot: {path: /tmp/x}}\n", "store.snapshot"},
		{base + "store: {redis: {}}\n", "store.redis"},
		{base + "store: {redis: {url: 'redis://h:1', cluster_addrs: ['h:1']}}\n", "store.redis"},
		{base + "store: {redis: {url: 'http://h:1'}}\n", "store.redis.url"},
		{base + "store: {redis: {url: 'redis://:secret@h:1'}}\n", "store.redis.url"},
		{base + "store: {redis: {url: 'redis://h:1', tls: true}}\n", "store.redis.tls"},
		{base + "store: {redis: {sentinel: {addrs: ['h:1']}}}\n", "store.redis.sentinel.master"},
		{base + "store: {redis: {sentinel: {master: m, addrs: [h]}}}\n", "store.redis.sentinel.addrs[0]"},
		{base + "store: {redis: {cluster_addrs: ['h:1', 'nope']}}\n", "store.redis.cluster_addrs[1]"},
		{base + "store: {redis: {url: 'redis://h:1', password_env: 'not a name'}}\n", "store.redis.password_env"},
		{base + "store: {redis: {url: 'redis://h:1', key_prefix: 'a b'}}\n", "store.redis.key_prefix"},
		{base + "store: {redis: {url: 'redis://h:1', cluster: '{x}'}}\n", "store.redis.cluster"},
		{base + "store: {redis: {url: 'redis://h:1', timeout: 2s}}\n", "store.redis.timeout"},
		{base + "store: {redis: {url: 'redis://h:1', sync_interval: 1ms}}\n", "store.redis.sync_interval"},
		{base + "store: {redis: {url: 'redis://h:1', max_queued: -1}}\n", "store.redis.max_queued"},
		{base + "store: {redis: {url: 'redis://h:1', colour: red}}\n", "colour"},
		{base + "store: {redis: {url: 'redis://h:1', lease: {interval: 5ms}}}\n", "store.redis.lease.interval"},
		{base + "store: {redis: {url: 'redis://h:1', lease: {ttl: 300ms}}}\n", "store.redis.lease.ttl"},
		{base + "store: {redis: {url: 'redis://h:1', lease: {interval: 1s, ttl: 2s}}}\n", "store.redis.lease.ttl"},
		{base + "store: {redis: {url: 'redis://h:1', lease: {replicas: -1}}}\n", "store.redis.lease.replicas"},
		{base + "store: {redis: {url: 'redis://h:1', lease: {slots: 3}}}\n", "slots"},
		{base + "store: {redis: {url: 'redis://h:1'}, snapshot: {path: /tmp/x}}\n", "store.snapshot"},
		{base + "store: {snapshot: {interval: 10s}}\n", "store.snapshot.path"},
		{base + "store: {snapshot: {path: /tmp/x, interval: 2h}}\n", "store.snapshot.interval"},
	} {
		_, err := config.Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("config:\n%s→ %v, want an error naming %s", tc.yaml, err, tc.field)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	cfg, err := config.Parse([]byte(base + "store: {redis: {url: 'redis://127.0.0.1:1', password_env: SLUICE_TEST_UNSET}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{Getenv: func(string) string { return "" }}); err == nil || !strings.Contains(err.Error(), "store.redis.password_env") {
		t.Errorf("an unset password variable: %v, want an error naming store.redis.password_env", err)
	}
}
