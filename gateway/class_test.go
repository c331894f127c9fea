package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// A tenant allowed only batch that labels everything interactive during a
// flood is demoted to batch, so it cannot take another tenant's
// interactive slots: its answers say batch in X-Sluice-Class, and the
// other tenant's interactive calls all succeed. (The fair shares of the
// gate protect the other tenant's share even without the rule; the rule is
// what keeps the flood out of the interactive rank.)
func TestTenantHeldToItsClassDuringAFlood(t *testing.T) {
	measuresThroughput(t) // web's success during the flood, a floor of 99%
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: 50 * time.Millisecond, Sigma: 0.01})
	cfg := baseConfig(up.URL)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Admission = config.AdmissionConfig{Concurrency: 2, MaxQueue: new(64), InitialServiceTime: config.Duration(50 * time.Millisecond)}
	cfg.Tenants = []chain.TenantConfig{
		{Name: "nightly", APIKeysSHA256: []string{HashKey("k-nightly")}, Classes: []string{"batch"}},
		{Name: "web", APIKeysSHA256: []string{HashKey("k-web")}},
	}
	_, gw := startGateway(t, cfg)
	send := func(ctx context.Context, key, timeoutMs string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set(contract.HeaderPriority, "interactive")
		req.Header.Set(contract.HeaderTimeoutMs, timeoutMs)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, ""
		}
		readAll(t, resp)
		return resp.StatusCode, resp.Header.Get(contract.HeaderClass)
	}
	// The flood: 32 callers back to back for the whole run.
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var demoted, floodSent atomic.Int64
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if code, class := send(ctx, "k-nightly", "5000"); code == 200 {
					floodSent.Add(1)
					if class == "batch" {
						demoted.Add(1)
					}
				}
			}
		})
	}
	// The other tenant: 30 requests a second for 2.5 s, with 800 ms
	// deadlines — about 0.4× of what the mock's two slots serve here,
	// within its fair share, which it keeps whatever the flood's class.
	var ok, total atomic.Int64
	var web sync.WaitGroup
	tick := time.NewTicker(time.Second / 30)
	for range 75 {
		<-tick.C
		web.Go(func() {
			code, class := send(t.Context(), "k-web", "800")
			total.Add(1)
			if code == 200 && class == "interactive" {
				ok.Add(1)
			}
		})
	}
	tick.Stop()
	web.Wait()
	stop()
	wg.Wait()
	if share := float64(ok.Load()) / float64(total.Load()); share < 0.99 {
		t.Errorf("web's interactive success %.1f%% (%d of %d) during the flood, want ≥ 99%%", 100*share, ok.Load(), total.Load())
	}
	if floodSent.Load() == 0 || demoted.Load() != floodSent.Load() {
		t.Errorf("nightly: %d answered, %d with X-Sluice-Class: batch", floodSent.Load(), demoted.Load())
	}
}
