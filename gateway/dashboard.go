package gateway

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/gateway/dashboard"
)

// newDashboard is the admin dashboard of g (package dashboard): the
// classes' ranks and default deadlines, the spend section, and
// dashboardReading as its source.
func newDashboard(g *Gateway) *dashboard.Board {
	classes := map[string]dashboard.Class{}
	for name, cl := range g.cfg.Classes {
		rank, _ := g.chain.Rank(admissionRequest(name))
		timeout := cl.DefaultTimeout.D()
		if timeout == 0 {
			timeout = g.cfg.Limits.MaxTimeout.D()
		}
		classes[name] = dashboard.Class{Rank: rank, DefaultTimeoutMs: timeout.Milliseconds()}
	}
	return dashboard.New(classes, g.cfg.Spend, g.dashboardReading)
}

// dashboardReading reads the gateway for the dashboard at now. It costs
// the request path nothing: the gate's Stats (one lock, as a scrape takes
// it), each pool's, and the refusal counters; the handlers are untouched.
func (g *Gateway) dashboardReading(now time.Time) dashboard.Reading {
	st := g.stats()
	d := dashboard.Sample{
		InFlight:    st.InFlight,
		Concurrency: st.Concurrency,
		Queued:      st.Queued,
		Depth:       st.Depth,
		WaitMs:      make([]int64, len(st.EstimatedWait)),
		Served:      st.Completed[admission.Success],
		ServiceMs:   map[string][2]int64{},
		Draining:    g.draining.Load(),
	}
	if c := g.books.Lease(); c != nil {
		d.Cluster = c.State().Concurrency
	}
	if state, since, ok := g.books.RedisState(); ok {
		d.Store = &dashboard.Store{State: state, Since: since.UnixMilli()}
	}
	for _, p := range g.pools {
		d.Learned = d.Learned || p.limit.learn != nil
	}
	for i, p := range g.pools {
		pst, ps := p.info.Gate.Stats(), g.chain.PoolState(i)
		dp := dashboard.Pool{Name: p.info.Name, InFlight: pst.InFlight, Concurrency: pst.Concurrency, Queued: pst.Queued, Down: ps.Down}
		if ps.TokensKnown {
			dp.Tokens = &ps.Tokens
		}
		d.Pools = append(d.Pools, dp)
	}
	for r, w := range st.EstimatedWait {
		d.WaitMs[r] = w.Milliseconds()
	}
	for _, n := range st.Rejected {
		d.Refused += n
	}
	if st.ServiceMean > 0 {
		d.Capacity = float64(st.Concurrency) / st.ServiceMean.Seconds()
	}
	g.serviceByKey(func(model string, ks admission.KeyStats) {
		d.ServiceMs[model] = [2]int64{ks.P50.Milliseconds(), ks.P95.Milliseconds()}
	})
	if b, ok := g.chain.RetryBalance(now); ok {
		d.RetryBudget = &b
	}
	if g.spend != nil {
		snap := g.spend.Snapshot(now)
		d.Spend = &dashboard.Spend{RatePerHour: snap.Global.RatePerHour, Stage: snap.Global.Stage.String(),
			Alerting: snap.Global.Alerting, Tenants: map[string]float64{}, WastedUSD: snap.Global.WastedUSD}
		for _, t := range snap.Tenants {
			d.Spend.Tenants[t.Name] = t.RatePerHour
			if t.Alerting {
				d.Spend.TenantsAlert = append(d.Spend.TenantsAlert, t.Name)
			}
		}
	}
	return dashboard.Reading{Sample: d, Refusals: dashboard.RefusalTotals(g.metrics.rejections),
		WouldRefuse: dashboard.RefusalTotals(g.metrics.would.refuse)}
}

// RunDashboard samples the gateway for the admin dashboard once a second
// until ctx ends (Server.Serve runs it; a program that mounts the Gateway
// and its AdminHandler itself should too, once). The event streams of
// /admin/v1/events end with it.
func (g *Gateway) RunDashboard(ctx context.Context) error {
	return g.metrics.dash.Run(ctx)
}

// startDashboard runs RunDashboard until the returned function is called,
// which waits for it to end.
func (g *Gateway) startDashboard() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.RunDashboard(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
