package gateway

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/cluster"
	"github.com/sluicehq/sluice/spend"
)

// AdminHandler serves /healthz, /readyz, /metrics, the JSON state dump at
// /admin/v1/state, and the live dashboard at / (fed by /admin/v1/history and
// the server-sent events of /admin/v1/events, which RunDashboard samples).
// Mount it on a loopback listener: it names tenants and shows the gateway's
// state.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{Registry: g.metrics.reg}))
	mux.HandleFunc(contract.EstimatePath, func(w http.ResponseWriter, r *http.Request) { g.serveEstimate(w, r, true) })
	mux.HandleFunc("GET /admin/v1/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(g.State())
	})
	mux.HandleFunc("POST /admin/v1/reload", g.serveReload)
	g.metrics.dash.Mount(mux)
	return mux
}

// State is the JSON state dump. It never contains a key: tenants are named,
// the provider key only by the variable that holds it.
type State struct {
	Time        time.Time `json:"time"`
	Draining    bool      `json:"draining"`
	Upstream    string    `json:"upstream"`
	APIKeyEnv   string    `json:"api_key_env,omitempty"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"in_flight"`
	Queued      int       `json:"queued"`
	MaxQueue    int       `json:"max_queue"`
	Mode        string    `json:"mode"`
	// Enforcement is the gateway's mode (mode:): enforce, or observe —
	// decisions counted and logged, nothing refused. A tenant's own is in
	// its TenantState.
	Enforcement string                  `json:"enforcement"`
	LIFOQueues  int                     `json:"lifo_queues"`
	Ranks       []RankState             `json:"ranks"`
	Service     ServiceState            `json:"service"`
	Models      map[string]ServiceState `json:"models"`
	Counters    map[string]uint64       `json:"counters"`
	Rejected    map[string]uint64       `json:"rejected"`
	Classes     map[string]ClassState   `json:"classes"`
	Tenants     []TenantState           `json:"tenants"`
	Spend       *spend.Snapshot         `json:"spend,omitempty"`
	Store       *cluster.StoreState     `json:"store,omitempty"`
	Reloads     *ReloadState            `json:"reloads,omitempty"`
	// Pools are the (deployment, model) pools with upstreams:, each with
	// its own gate and buckets.
	Pools []PoolStatus `json:"pools,omitempty"`
	// Learned are the pools whose concurrency is learnt from the
	// provider's answers (limit.go), with what the learner estimates.
	Learned []LearnedState `json:"learned,omitempty"`
	// Saturation is the shedding on the gateway's own CPU (saturated.go);
	// absent when server.saturation.disabled.
	Saturation *SaturationState `json:"saturation,omitempty"`
}

// SaturationState is the gateway's own CPU in State: the last window's
// scheduling delay (its p99) against the target, the share of its cores
// the process used, the fraction of new calls admitted, and the calls
// shed so far.
type SaturationState struct {
	SchedulingDelayMs float64 `json:"scheduling_delay_ms"`
	TargetMs          float64 `json:"target_ms"`
	Busy              float64 `json:"busy"`
	Admitted          float64 `json:"admitted"`
	Shed              uint64  `json:"shed"`
}

// PoolStatus is one pool's state in State.
type PoolStatus struct {
	Name        string   `json:"name"`
	Deployment  string   `json:"deployment"`
	Model       string   `json:"model"`
	Upstream    string   `json:"upstream"` // the deployment's URL, without credentials
	Concurrency int      `json:"concurrency"`
	InFlight    int      `json:"in_flight"`
	Queued      int      `json:"queued"`
	Tokens      *float64 `json:"tokens_available,omitempty"`
	Requests    *float64 `json:"requests_available,omitempty"`
	Down        bool     `json:"down"`
}

type RankState struct {
	Rank            int   `json:"rank"`
	Depth           int   `json:"depth"`
	EstimatedWaitMs int64 `json:"estimated_wait_ms"`
}

type ServiceState struct {
	P50Ms   int64 `json:"p50_ms"`
	P95Ms   int64 `json:"p95_ms"`
	MeanMs  int64 `json:"mean_ms"`
	Samples int   `json:"samples"`
}

type ClassState struct {
	Rank             int   `json:"rank"`
	DefaultTimeoutMs int64 `json:"default_timeout_ms"`
}

type TenantState struct {
	Name string `json:"name"`
	Tier string `json:"tier"`
	Keys int    `json:"keys"`
	Mode string `json:"mode"` // enforce or observe: its own, or the gateway's
}

// State returns the gateway's state.
func (g *Gateway) State() State {
	st := g.stats()
	s := State{
		Time:        time.Now().UTC(),
		Draining:    g.draining.Load(),
		Upstream:    g.deps[0].url.Redacted(),
		APIKeyEnv:   g.cfg.Upstream.APIKeyEnv,
		Concurrency: st.Concurrency,
		InFlight:    st.InFlight,
		Queued:      st.Queued,
		MaxQueue:    g.maxQueue(), // the bound in force, which a reload may change
		Mode:        st.Mode.String(),
		Enforcement: g.chain.Mode(),
		LIFOQueues:  st.LIFOQueues,
		Service: ServiceState{P50Ms: st.ServiceP50.Milliseconds(), P95Ms: st.ServiceP95.Milliseconds(),
			MeanMs: st.ServiceMean.Milliseconds(), Samples: st.ServiceSamples},
		Models:   map[string]ServiceState{},
		Counters: map[string]uint64{"admitted": st.Admitted, "enqueued": st.Enqueued, "granted": st.Granted, "canceled": st.Canceled},
		Rejected: map[string]uint64{},
		Classes:  map[string]ClassState{},
	}
	s.Saturation = g.cpu.state()
	for r := range st.Depth {
		s.Ranks = append(s.Ranks, RankState{Rank: r, Depth: st.Depth[r], EstimatedWaitMs: st.EstimatedWait[r].Milliseconds()})
	}
	for reason, n := range st.Rejected {
		s.Rejected[reason.String()] = n
	}
	for result, n := range st.Completed {
		s.Counters["completed_"+result.String()] = n
	}
	for i, p := range g.pools {
		pst := p.info.Gate.Stats()
		ps := g.chain.PoolState(i)
		e := PoolStatus{Name: p.info.Name, Deployment: p.info.Deployment, Model: p.info.Model, Upstream: p.dep.url.Redacted(),
			Concurrency: pst.Concurrency, InFlight: pst.InFlight, Queued: pst.Queued, Down: ps.Down}
		if ps.TokensKnown {
			e.Tokens = &ps.Tokens
		}
		if ps.RequestsKnown {
			e.Requests = &ps.Requests
		}
		s.Pools = append(s.Pools, e)
	}
	s.Learned = g.learnedStates()
	g.serviceByKey(func(model string, ks admission.KeyStats) {
		s.Models[model] = ServiceState{P50Ms: ks.P50.Milliseconds(), P95Ms: ks.P95.Milliseconds(), MeanMs: ks.Mean.Milliseconds(), Samples: ks.Samples}
	})
	for name, cl := range g.cfg.Classes {
		rank, _ := g.chain.Rank(admissionRequest(name))
		timeout := cl.DefaultTimeout.D()
		if timeout == 0 {
			timeout = g.cfg.Limits.MaxTimeout.D()
		}
		s.Classes[name] = ClassState{Rank: rank, DefaultTimeoutMs: timeout.Milliseconds()}
	}
	for _, t := range g.chain.Tenants() {
		s.Tenants = append(s.Tenants, TenantState{Name: t.Name, Tier: t.Tier.String(), Keys: t.Keys, Mode: t.Mode})
	}
	sort.Slice(s.Tenants, func(i, j int) bool { return s.Tenants[i].Name < s.Tenants[j].Name })
	if g.spend != nil {
		snap := g.spend.Snapshot(time.Now())
		s.Spend = &snap
	}
	s.Store = g.books.State(g.spend != nil)
	s.Reloads = g.reloadState()
	return s
}

func admissionRequest(class string) admission.Request { return admission.Request{Class: class} }
