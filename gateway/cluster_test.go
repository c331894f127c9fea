package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/cluster"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/store/redistest"
)

func clusterState(t *testing.T, admin string) *cluster.ClusterState {
	t.Helper()
	resp, err := http.Get(admin + "/admin/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Store *cluster.StoreState `json:"store"`
	}
	if err := json.Unmarshal(readAll(t, resp), &st); err != nil {
		t.Fatal(err)
	}
	if st.Store == nil {
		return nil
	}
	return st.Store.Cluster
}

func leasedConfig(t *testing.T, upstream, redisURL string) config.Config {
	cfg := baseConfig(upstream)
	cfg.Admission.Concurrency = 16
	cfg.UpstreamLimit = config.UpstreamLimitConfig{Interval: config.Duration(time.Hour)} // no climb back during the test
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: redisURL, Cluster: strings.ReplaceAll(t.Name(), "/", "-"),
		Timeout: config.Duration(time.Second), Lease: &config.LeaseConfig{Interval: config.Duration(50 * time.Millisecond)}}}
	return cfg
}

// TestClusterLeasesShareTheConcurrency: two replicas with store.redis and
// no spend section divide admission.concurrency between them (the state
// dump and sluice_cluster_lease_slots say so). A 429 seen by one replica
// lowers the cluster's number, not only its own share: both replicas'
// leases now divide 8, and add up to it.
func TestClusterLeasesShareTheConcurrency(t *testing.T) {
	rs := redistest.Start(t)
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := leasedConfig(t, up.URL, rs.URL())
	a, b := serve(t, cfg), serve(t, cfg)
	settled := func(total int) func() bool {
		return func() bool {
			ca, cb := clusterState(t, a.admin), clusterState(t, b.admin)
			return ca != nil && cb != nil && ca.Mode == "shared" && cb.Mode == "shared" &&
				ca.Replicas == 2 && cb.Replicas == 2 && ca.Concurrency == total && cb.Concurrency == total &&
				ca.Slots+cb.Slots == total && a.g.Gate().Stats().Concurrency+b.g.Gate().Stats().Concurrency == total
		}
	}
	testkit.Eventually(t, "two leases adding up to 16", settled(16))
	if m := metricsText(t, a.admin); !strings.Contains(m, "sluice_cluster_lease_slots") || !strings.Contains(m, "sluice_cluster_replicas 2") {
		t.Errorf("metrics lack sluice_cluster_lease_slots / sluice_cluster_replicas 2")
	}

	resp := post(t, t.Context(), a.url, chatBody, map[string]string{mockllm.HeaderFault: "429"})
	readAll(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the provider's 429: %d", resp.StatusCode)
	}
	testkit.Eventually(t, "two leases adding up to the lowered 8", settled(8))
}

// TestClusterStartsOnOneSlotAndFallsBack: a replica whose Redis never
// answers does not run on the whole of admission.concurrency: one slot
// while it tries, then its local share, 16 ÷ 2 (lease.replicas' default)
// — and it keeps serving.
func TestClusterStartsOnOneSlotAndFallsBack(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := leasedConfig(t, up.URL, "redis://127.0.0.1:1")
	g, err := New(cfg, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r, _ := g.books.Redis(); r != nil {
			r.Close()
		}
	})
	if c := g.Gate().Stats().Concurrency; c != 1 {
		t.Fatalf("before the first lease the gate has %d slots, want 1", c)
	}
	x := serve(t, cfg)
	testkit.Eventually(t, "the local share", func() bool {
		c := clusterState(t, x.admin)
		return c != nil && c.Mode == "local" && c.Slots == 8 && x.g.Gate().Stats().Concurrency == 8
	})
	resp := post(t, t.Context(), x.url, chatBody, nil)
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("on the local share: %d %s", resp.StatusCode, body)
	}
	if m := metricsText(t, x.admin); !strings.Contains(m, "sluice_cluster_local_share 1") {
		t.Errorf("metrics lack sluice_cluster_local_share 1")
	}
}

// TestClusterLeaseShrinkLetsCallsFinish: replica A alone holds all 16
// slots and has 10 calls in flight when replica B starts with 12 of its
// own. A's lease shrinks below its calls in flight; none of them is cut —
// all 10 are answered — and B gets the slots A gives up only as A's calls
// end, so the provider never has more than 16 calls, plus B's one floor
// slot while A held everything.
func TestClusterLeaseShrinkLetsCallsFinish(t *testing.T) {
	rs := redistest.Start(t)
	m, up := testkit.StartMock(t, mockllm.Config{})
	cfg := leasedConfig(t, up.URL, rs.URL())
	a := serve(t, cfg)
	testkit.Eventually(t, "A alone with all 16 slots", func() bool { return a.g.Gate().Stats().Concurrency == 16 })
	const held = "1500" // ms at the provider
	send := func(url string, n int) chan int {
		codes := make(chan int, n)
		for range n {
			go func() {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set(mockllm.HeaderLatencyMs, held)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					codes <- 0
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			}()
		}
		return codes
	}
	fromA := send(a.url, 10)
	testkit.Eventually(t, "A's 10 calls in flight", func() bool { return a.g.Gate().Stats().InFlight == 10 })
	b := serve(t, cfg)
	fromB := send(b.url, 12)
	peak := 0
	shrunk := false
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < 22; {
		st := a.g.Gate().Stats()
		shrunk = shrunk || st.Concurrency < st.InFlight
		peak = max(peak, m.Stats().InService)
		select {
		case code := <-fromA:
			if code != 200 {
				t.Errorf("a call in flight on A when its lease shrank: %d", code)
			}
			n++
		case code := <-fromB:
			if code != 200 {
				t.Errorf("a call on B: %d", code)
			}
			n++
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the calls did not all end within 10s")
		}
	}
	if !shrunk {
		t.Error("A's lease never went below its calls in flight: the test did not test")
	}
	if peak > 17 {
		t.Errorf("the provider had %d calls at once, want ≤ 17", peak)
	}
}

// TestClusterDividesThePools: with upstreams, two replicas on one Redis
// each take half of every pool's concurrency and of its token bucket; when
// one leaves, the other takes the whole again.
func TestClusterDividesThePools(t *testing.T) {
	rs := redistest.Start(t)
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := leasedConfig(t, up.URL, rs.URL())
	cfg.Upstream, cfg.Admission.Concurrency = config.UpstreamConfig{}, 0
	cfg.Upstreams = []config.DeploymentConfig{{Name: "east", URL: up.URL, Concurrency: 8,
		Models: []config.ModelConfig{{Name: "gpt-4o-mini", TPM: 60000}, {Name: "gpt-4.1", Concurrency: 4}}}}
	a, b := serve(t, cfg), serve(t, cfg)
	pools := func(s *served) (mini, big int, tokens float64) {
		st := s.g.State()
		for _, p := range st.Pools {
			switch p.Model {
			case "gpt-4o-mini":
				mini = p.Concurrency
				if p.Tokens != nil {
					tokens = *p.Tokens
				}
			case "gpt-4.1":
				big = p.Concurrency
			}
		}
		return mini, big, tokens
	}
	testkit.Eventually(t, "each replica at half of each pool", func() bool {
		for _, s := range []*served{a, b} {
			if mini, big, tokens := pools(s); mini != 4 || big != 2 || tokens > 30000 {
				return false
			}
		}
		return true
	})
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the replica left alone takes the whole pools", func() bool {
		mini, big, _ := pools(a)
		return mini == 8 && big == 4
	})
}
