package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// reloadYAML is a config with two tenants, a spend section and retry
// budgets; vars fills the parts a test changes between reloads.
func reloadYAML(upstream string, vars map[string]string) string {
	v := map[string]string{
		"concurrency": "4", "max_queue": "16", "acme_tier": "standard", "acme_key": HashKey("key-acme"),
		"beta_weight": "1", "price_in": "0.15", "acme_budget": "100", "ratio": "0.1", "url": upstream, "extra": "",
		"ceiling": "10000",
	}
	for k, x := range vars {
		v[k] = x
	}
	return fmt.Sprintf(`upstream: {url: %q, api_key_env: TEST_PROVIDER_KEY}
admission: {concurrency: %s, max_queue: %s, initial_service_time: 30ms}
tenants:
  - {name: acme, tier: %s, api_keys_sha256: [%q]}
  - {name: beta, tier: low, weight: %s, api_keys_sha256: [%q]}
retries:
  budget: {ratio: %s, min_per_second: 0.001, max_tokens: 1000000}
spend:
  prices:
    gpt-4o-mini: {input_per_mtok: %s, output_per_mtok: 0.6}
    gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}
  ceiling_per_hour: %s
  tenants: {acme: {per_hour: %s}}
%s`, v["url"], v["concurrency"], v["max_queue"], v["acme_tier"], v["acme_key"], v["beta_weight"], HashKey("key-beta"),
		v["ratio"], v["price_in"], v["ceiling"], v["acme_budget"], v["extra"])
}

// reloadable is a gateway whose config source is a file on disk, served
// on loopback: its API and its admin listener.
type reloadable struct {
	g          *Gateway
	file       string
	api, admin string
	logs       *syncBuffer
}

func startReloadable(t *testing.T, yaml string) *reloadable {
	t.Helper()
	r := &reloadable{file: filepath.Join(t.TempDir(), "sluice.yaml"), logs: &syncBuffer{}}
	r.write(t, yaml)
	cfg, err := config.Load(r.file)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	opts.ConfigSource = func() (config.Config, error) { return config.Load(r.file) }
	if r.g, err = New(cfg, opts); err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(r.g)
	admin := httptest.NewServer(r.g.AdminHandler())
	t.Cleanup(func() {
		api.Close()
		admin.Close()
	})
	r.api, r.admin = api.URL, admin.URL
	return r
}

func (r *reloadable) write(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(r.file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload POSTs /admin/v1/reload and returns the status and body.
func (r *reloadable) reload(t *testing.T) (int, []byte) {
	t.Helper()
	resp, err := http.Post(r.admin+"/admin/v1/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp)
}

// reloadState is the part of /admin/v1/state the reload tests read.
type reloadState struct {
	Concurrency int               `json:"concurrency"`
	InFlight    int               `json:"in_flight"`
	Queued      int               `json:"queued"`
	MaxQueue    int               `json:"max_queue"`
	Service     ServiceState      `json:"service"`
	Counters    map[string]uint64 `json:"counters"`
	Reloads     *ReloadState      `json:"reloads"`
	Spend       *struct {
		Global struct {
			SpentUSD   float64 `json:"spent_usd"`
			KnownCalls int64   `json:"known_calls"`
		} `json:"global"`
	} `json:"spend"`
}

func (r *reloadable) state(t *testing.T) reloadState {
	t.Helper()
	resp, err := http.Get(r.admin + "/admin/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	var st reloadState
	decodeJSON(t, resp, &st)
	return st
}

func (r *reloadable) status(t *testing.T, key string) int {
	t.Helper()
	resp := post(t, t.Context(), r.api, chatBody, map[string]string{"Authorization": "Bearer " + key})
	readAll(t, resp)
	return resp.StatusCode
}

func reloads(r *reloadable, result string) float64 {
	return testutil.ToFloat64(r.g.reload.total.WithLabelValues(result))
}

// TestReloadRefusesABadConfigAndKeepsTheRunningOne: a config that does not
// validate, and one that changes what only a restart changes, are refused
// with a 422 naming the field; the running config stays (the old key still
// works, the new one does not); a good config then applies, and each
// outcome is counted and logged without keys.
func TestReloadRefusesABadConfigAndKeepsTheRunningOne(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	r := startReloadable(t, reloadYAML(up.URL, nil))
	if got := r.status(t, "key-acme"); got != 200 {
		t.Fatalf("acme before any reload: %d", got)
	}
	for _, tc := range []struct {
		vars  map[string]string
		code  string
		param string
	}{
		{map[string]string{"acme_tier": "platinum", "acme_key": HashKey("key-new")}, "invalid_config", "tenants[0].tier"},
		{map[string]string{"acme_key": "sk-pasted-raw-key"}, "invalid_config", "tenants[0].api_keys_sha256[0]"},
		{map[string]string{"beta_weight": "-2", "acme_key": HashKey("key-new")}, "invalid_config", "tenants[1].weight"},
		{map[string]string{"price_in": "-1", "acme_key": HashKey("key-new")}, "invalid_config", "spend.prices.gpt-4o-mini.input_per_mtok"},
		{map[string]string{"extra": "bogus_key: 1\n", "acme_key": HashKey("key-new")}, "invalid_config", ""},
		{map[string]string{"url": "http://127.0.0.1:1", "acme_key": HashKey("key-new")}, "restart_required", "upstream.url"},
		{map[string]string{"extra": "limits: {max_timeout: 1m}\n", "acme_key": HashKey("key-new")}, "restart_required", "limits.max_timeout"},
		{map[string]string{"extra": "listen: 127.0.0.1:8080\n", "acme_key": HashKey("key-new"), "acme_tier": "weird"}, "invalid_config", "tenants[0].tier"},
		{map[string]string{"extra": "classes: {interactive: {default_timeout: 5s}}\n", "acme_key": HashKey("key-new")}, "restart_required", "classes.interactive"},
	} {
		r.write(t, reloadYAML(up.URL, tc.vars))
		status, b := r.reload(t)
		e := decodeError(t, b)
		if status != http.StatusUnprocessableEntity || e.Code != tc.code {
			t.Errorf("%v: %d %s, want 422 %s", tc.vars, status, b, tc.code)
		}
		if tc.param != "" && (e.Param == nil || *e.Param != tc.param) {
			t.Errorf("%v: param %v, want %s (%s)", tc.vars, e.Param, tc.param, e.Message)
		}
		if strings.Contains(string(b), "sk-pasted-raw-key") {
			t.Errorf("a refused reload echoed a key: %s", b)
		}
		if got := r.status(t, "key-acme"); got != 200 {
			t.Fatalf("%v: the old key after a refused reload: %d, want 200", tc.vars, got)
		}
		if got := r.status(t, "key-new"); got != 401 {
			t.Fatalf("%v: the new key after a refused reload: %d, want 401", tc.vars, got)
		}
	}
	if n := reloads(r, "error"); n != 9 {
		t.Errorf("sluice_config_reloads_total{result=error} = %v, want 9", n)
	}
	if st := r.state(t); st.Reloads == nil || st.Reloads.Errors != 9 || st.Reloads.OK != 0 || st.Reloads.LastError == "" {
		t.Errorf("state's reloads: %+v", st.Reloads)
	}
	if g := testutil.ToFloat64(r.g.reload.lastGood); g != 0 {
		t.Errorf("sluice_config_last_reload_successful %v after a refusal, want 0", g)
	}

	// A good config: acme's key changes, and so do the waiting room and
	// the ceiling.
	r.write(t, reloadYAML(up.URL, map[string]string{"acme_key": HashKey("key-new"), "max_queue": "3", "ceiling": "500"}))
	if status, b := r.reload(t); status != 200 {
		t.Fatalf("a good reload: %d %s", status, b)
	}
	if got := r.status(t, "key-acme"); got != 401 {
		t.Errorf("the old key after the reload: %d, want 401", got)
	}
	if got := r.status(t, "key-new"); got != 200 {
		t.Errorf("the new key after the reload: %d, want 200", got)
	}
	if st := r.state(t); st.MaxQueue != 3 || st.Reloads.OK != 1 || st.Reloads.LastError != "" {
		t.Errorf("state after the reload: max_queue %d, reloads %+v", st.MaxQueue, st.Reloads)
	}
	resp, err := http.Get(r.admin + "/admin/v1/history")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Meta struct {
			Spend struct {
				Ceiling float64 `json:"ceiling_per_hour"`
			} `json:"spend"`
		} `json:"meta"`
	}
	decodeJSON(t, resp, &h)
	if h.Meta.Spend.Ceiling != 500 {
		t.Errorf("the dashboard's ceiling after the reload: %v, want 500", h.Meta.Spend.Ceiling)
	}
	if n := reloads(r, "ok"); n != 1 {
		t.Errorf("sluice_config_reloads_total{result=ok} = %v, want 1", n)
	}
	if g := testutil.ToFloat64(r.g.reload.lastGood); g != 1 {
		t.Errorf("sluice_config_last_reload_successful %v, want 1", g)
	}
	logs := r.logs.String()
	for _, want := range []string{"config reloaded", "config reload refused", "field=tenants[0].tier", "restart_required=true"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q", want)
		}
	}
	for _, key := range []string{"key-acme", "key-new", "sk-pasted-raw-key", "sk-provider-secret", HashKey("key-new")} {
		if strings.Contains(logs, key) {
			t.Errorf("logs hold %q", key)
		}
	}
	// A GET is not a reload.
	resp, err = http.Get(r.admin + "/admin/v1/reload")
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /admin/v1/reload: %d", resp.StatusCode)
	}
}

// TestReloadWithoutASource: a gateway started without a config file has
// nothing to re-read, and says so.
func TestReloadWithoutASource(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	g, _ := startGateway(t, baseConfig(up.URL))
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	resp, err := http.Post(admin.URL+"/admin/v1/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusConflict || decodeError(t, b).Code != "reload_unavailable" {
		t.Fatalf("reload without a source: %d %s", resp.StatusCode, b)
	}
	if !errors.Is(g.Reload(), ErrNoConfigSource) {
		t.Fatal("Reload without a source")
	}
}

// TestRestartFieldNamesTheField: what a reload changes is not reported;
// anything else is, by its YAML path.
func TestRestartFieldNamesTheField(t *testing.T) {
	parse := func(yaml string) *config.Config {
		t.Helper()
		c, err := config.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		c = c.WithDefaults()
		return &c
	}
	old := parse(reloadYAML("http://127.0.0.1:9", nil))
	extra := func(yaml string) map[string]string { return map[string]string{"extra": yaml} }
	for _, tc := range []struct {
		vars map[string]string
		want string // "": reloads; "parse": not a config
	}{
		{map[string]string{"concurrency": "9", "max_queue": "0", "acme_tier": "high", "beta_weight": "3", "price_in": "0.1", "acme_budget": "5", "ratio": "0.3"}, ""},
		{extra("listen: 127.0.0.1:1\n"), "listen"},
		{extra("admin: 127.0.0.1:1\n"), "admin"},
		{extra("store: {snapshot: {path: /tmp/x}}\n"), "store"},
		{extra("passthrough: [{path: /v1/models, methods: [GET]}]\n"), "passthrough"},
		{extra("upstream_limit: {disabled: true}\n"), "upstream_limit.disabled"},
		{extra("idempotency: {window: 1m}\n"), "idempotency.window"},
		{extra("default_class: batch\n"), "default_class"},
		{extra("ranks: {retry: 0}\n"), "ranks.retry"},
		{extra("not_a_field: 1\n"), "parse"},
		{map[string]string{"url": "http://127.0.0.1:9/v2"}, "upstream.url"},
	} {
		next, err := config.Parse([]byte(reloadYAML("http://127.0.0.1:9", tc.vars)))
		if tc.want == "parse" {
			if err == nil {
				t.Errorf("%v: parsed", tc.vars)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.vars, err)
		}
		next = next.WithDefaults()
		if got := restartField(old, &next); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.vars, got, tc.want)
		}
	}
	noRetries := *old
	noRetries.Retries.Disabled = true
	if got := restartField(old, &noRetries); got != "retries.disabled" {
		t.Errorf("retries disabled: %q", got)
	}
	// The spend section: its policy reloads, its alerter does not, and
	// adding or removing it is a restart.
	sp := *old
	s := *old.Spend
	s.CeilingPerHour, s.Ladder = 5, map[string]string{"gpt-4o": "gpt-4o-mini"}
	sp.Spend = &s
	if got := restartField(old, &sp); got != "" {
		t.Errorf("a new ceiling and ladder: %q", got)
	}
	s.AlertWebhook = "http://127.0.0.1:1/hook"
	if got := restartField(old, &sp); got != "spend.alert_webhook" {
		t.Errorf("a new webhook: %q", got)
	}
	sp.Spend = nil
	if got := restartField(old, &sp); got != "spend" {
		t.Errorf("no spend section: %q", got)
	}
}

// TestRescaleKeepsTheLoweredLevel: the provider's rate limits lowered the
// concurrency; a reload that changes the configured concurrency keeps the
// lowered level (cut to a lower ceiling) and climbs from it to the new
// ceiling, rather than jumping to it.
func TestRescaleKeepsTheLoweredLevel(t *testing.T) {
	a := newAIMD(config.UpstreamLimitConfig{Interval: config.Duration(time.Second)}, 16)
	t0 := time.Unix(1000, 0)
	if n, _, lowered := a.next(t0, true, nil); n != 8 || !lowered {
		t.Fatalf("after a 429: %d", n)
	}
	var got int
	apply := func(n int) error { got = n; return nil }
	if err := a.rescale(t0, 32, apply); err != nil || got != 8 {
		t.Fatalf("ceiling raised to 32 while lowered: level %d, want 8 kept", got)
	}
	if n, _, _ := a.next(t0.Add(20*time.Second), false, nil); n != 28 {
		t.Fatalf("20 intervals later: %d, want 8+20", n)
	}
	if err := a.rescale(t0.Add(20*time.Second), 4, apply); err != nil || got != 4 {
		t.Fatalf("ceiling lowered to 4: level %d", got)
	}
	if err := a.rescale(t0, 9, func(int) error { return errors.New("no") }); err == nil || a.ceiling != 4 {
		t.Fatalf("a refused apply changed the ceiling to %d", a.ceiling)
	}
	off := newAIMD(config.UpstreamLimitConfig{Disabled: true}, 16)
	if err := off.rescale(t0, 5, apply); err != nil || got != 5 {
		t.Fatalf("disabled controller: level %d, want the ceiling 5", got)
	}
}

// TestReloadDuringAStorm reloads the config five times while twice the
// gateway's capacity of callers (closed loop, two tenants) call the mock
// provider through it, alternating between two policies that differ in
// concurrency, waiting room, tier, weight, price, budget and retry ratio.
// Every request gets a normal answer or a normal refusal — no 5xx other
// than an overload refusal, no connection error — and across every reload
// the spend books, the gate's counters and service-time window and the
// retry budget's level carry on.
func TestReloadDuringAStorm(t *testing.T) {
	const (
		service  = 30 * time.Millisecond
		callers  = 8 // twice the 4 slots
		requests = 320
		nReloads = 5
	)
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 16, Median: service})
	policies := []string{
		reloadYAML(up.URL, nil),
		reloadYAML(up.URL, map[string]string{"concurrency": "5", "max_queue": "2", "acme_tier": "high", "beta_weight": "2",
			"price_in": "0.3", "acme_budget": "50", "ratio": "0.2"}),
	}
	r := startReloadable(t, policies[0])
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var sent, answered atomic.Int64
	var mu sync.Mutex
	bad := map[string]int{}
	refusals := map[string]int{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
	var wg sync.WaitGroup
	for i := range callers {
		key := []string{"key-acme", "key-beta"}[i%2]
		wg.Go(func() {
			for n := sent.Add(1); n <= requests && ctx.Err() == nil; n = sent.Add(1) {
				// A prompt of its own per request: the storm is of first
				// attempts, which a copy of a refused prompt would not be.
				body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"storm %d"}],"max_tokens":16}`, n)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.api+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set(contract.HeaderTimeoutMs, "5000")
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					bad["transport: "+err.Error()]++
					mu.Unlock()
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				answered.Add(1)
				mu.Lock()
				switch {
				case err != nil:
					bad["body: "+err.Error()]++
				case resp.StatusCode == 200:
				case (resp.StatusCode == 429 || resp.StatusCode == 503) && resp.Header.Get(contract.HeaderReason) != "":
					refusals[resp.Header.Get(contract.HeaderReason)]++
				default:
					bad[fmt.Sprintf("%d %s", resp.StatusCode, b)]++
				}
				mu.Unlock()
			}
		})
	}

	busy := 0
	for i := 1; i <= nReloads; i++ {
		// Reload at evenly spaced points of the storm.
		testkit.Eventually(t, "the storm's progress", func() bool { return answered.Load() >= int64(i*requests/(nReloads+2)) })
		before := r.state(t)
		balanceBefore := metricValue(t, r, "sluice_retry_budget_tokens")
		r.write(t, policies[i%2])
		if status, b := r.reload(t); status != 200 {
			t.Fatalf("reload %d: %d %s", i, status, b)
		}
		after := r.state(t)
		balanceAfter := metricValue(t, r, "sluice_retry_budget_tokens")
		if before.InFlight+before.Queued > 0 {
			busy++
		}
		b, a := before.Spend.Global, after.Spend.Global
		if a.SpentUSD < b.SpentUSD || a.KnownCalls < b.KnownCalls || b.KnownCalls == 0 {
			t.Errorf("reload %d: the books went from %v$ over %d calls to %v$ over %d", i, b.SpentUSD, b.KnownCalls, a.SpentUSD, a.KnownCalls)
		}
		if after.Counters["admitted"] < before.Counters["admitted"] || after.Service.Samples < before.Service.Samples {
			t.Errorf("reload %d: gate counters or window reset: before %v/%d after %v/%d", i,
				before.Counters["admitted"], before.Service.Samples, after.Counters["admitted"], after.Service.Samples)
		}
		if balanceBefore <= 0 || balanceAfter < balanceBefore {
			t.Errorf("reload %d: retry budget %v → %v, want the level kept", i, balanceBefore, balanceAfter)
		}
		wantConc := []int{4, 5}[i%2]
		if after.Concurrency != wantConc {
			t.Errorf("reload %d: concurrency %d, want %d", i, after.Concurrency, wantConc)
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the storm did not finish in time: %d answered", answered.Load())
	}
	if len(bad) > 0 {
		t.Fatalf("requests dropped or errored across reloads: %v", bad)
	}
	if answered.Load() != requests {
		t.Fatalf("%d answered of %d", answered.Load(), requests)
	}
	if busy == 0 {
		t.Errorf("no reload happened while calls were in flight or queued")
	}
	if n := reloads(r, "ok"); n != nReloads {
		t.Errorf("reloads ok %v, want %d", n, nReloads)
	}
	t.Logf("%d requests, %d reloads (%d with calls in flight or queued), refusals %v", requests, nReloads, busy, refusals)
}

// metricValue reads one unlabelled series from the admin listener's
// /metrics.
func metricValue(t *testing.T, r *reloadable, name string) float64 {
	t.Helper()
	resp, err := http.Get(r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(readAll(t, resp)), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}
