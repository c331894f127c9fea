package gateway

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
)

// deployment is where a call is sent: a provider's base URL and the key it
// is called with. With `upstream:` there is one, named "default", and one
// pool that serves every model; with `upstreams:` one per entry, and each
// (deployment, model) is a pool of the chain's route stage
// (chain/route.go).
type deployment struct {
	name    string
	url     *url.URL
	apiKey  string // never logged, never returned
	xAPIKey bool   // the key goes in x-api-key (Anthropic), not Authorization
}

// target points the outgoing request out of the caller's request in at
// the deployment, with the deployment's key in place of the caller's.
func (d *deployment) target(in, out *http.Request) {
	(&httputil.ProxyRequest{In: in, Out: out}).SetURL(d.url)
	out.Host = d.url.Host
	if d.apiKey == "" {
		return
	}
	h := out.Header
	h.Del("Authorization")
	h.Del("X-Api-Key")
	if d.xAPIKey {
		h.Set("X-Api-Key", d.apiKey)
	} else {
		h.Set("Authorization", "Bearer "+d.apiKey)
	}
}

// deploymentOf is the deployment of the call's pool (the first outside a
// call).
func (g *Gateway) deploymentOf(c *call) *deployment { return g.poolOf(c).dep }

// poolOf is the call's pool (the first outside a call).
func (g *Gateway) poolOf(c *call) *gatewayPool {
	if c == nil {
		return g.pools[0]
	}
	return g.pools[c.permit.Request().Pool]
}

// gatewayPool is one pool of the route stage as the gateway runs it: its
// deployment and its adaptive limit on the provider's 429s.
type gatewayPool struct {
	info  chain.PoolInfo
	dep   *deployment
	limit *aimd
	// set gives the pool's gate its adaptive limit's level (see
	// poolSetter), made once rather than on every admission.
	set func(int)
	// trial gives it a learnt limit and the part of it measured (see
	// poolTrial).
	trial func(n, settled int)
}

// poolSetter gives pool i's gate the level of its adaptive limit: with
// replicas sharing the deployments (store.redis, package cluster), this
// replica's part of it — its lease of the one pool's concurrency, or its
// share of each of several pools'.
func (g *Gateway) poolSetter(i int) func(int) {
	return func(n int) {
		if c := g.books.Lease(); c != nil && c.Leasing() {
			c.LimitChanged(n)
			return
		}
		_ = g.chain.SetPoolConcurrency(i, max(1, n/g.replicas()))
	}
}

// poolTrial returns the function that gives pool i's gate a learnt
// limit n of which settled is measured (admission.Gate.SetTrialConcurrency).
// A learnt concurrency has no leases (store.redis requires a configured
// one); if the pool leases anyway, the limit goes to the lease as set's.
func (g *Gateway) poolTrial(i int) func(n, settled int) {
	set := g.poolSetter(i)
	return func(n, settled int) {
		if c := g.books.Lease(); c != nil && c.Leasing() || g.replicas() > 1 {
			set(n)
			return
		}
		_ = g.chain.SetPoolTrialConcurrency(i, max(1, n), max(1, min(settled, n)))
	}
}

// replicas is how many replicas share the deployments' limits, as the
// cluster last counted them: 1 without a shared store.
func (g *Gateway) replicas() int {
	if c := g.books.Lease(); c != nil {
		return c.Replicas()
	}
	return 1
}

// sharePools applies this replica's share of every pool's limits, after
// the count of replicas changed: the concurrency of each pool's adaptive
// limit and its request and token buckets divided by n.
func (g *Gateway) sharePools(now time.Time, n int) {
	for i, p := range g.pools {
		p.set(p.limit.level(now)) // divided by replicas(), which is n now
		g.chain.SetPoolShare(i, 1/float64(n))
	}
}

// refreshLimits applies the climb back up that accrued while idle to every
// gate, before an admission.
func (g *Gateway) refreshLimits(now time.Time) {
	for _, p := range g.pools {
		p.limit.refresh(now, p.set)
	}
}

// poolCollector exports each pool's gate and buckets.
type poolCollector struct {
	g                                                     *Gateway
	inFlight, queued, concurrency, tokens, requests, down *prometheus.Desc
}

func newPoolCollector(g *Gateway) *poolCollector {
	l := []string{"pool", "deployment", "model"}
	return &poolCollector{g: g,
		inFlight:    prometheus.NewDesc("sluice_pool_in_flight", "Upstream calls in flight, per (deployment, model) pool.", l, nil),
		queued:      prometheus.NewDesc("sluice_pool_queued", "Requests waiting for a slot, per pool.", l, nil),
		concurrency: prometheus.NewDesc("sluice_pool_concurrency", "A pool's concurrency: its configured limit, lowered by the provider's 429s.", l, nil),
		tokens:      prometheus.NewDesc("sluice_pool_tokens_available", "Tokens left in a pool's tokens-per-minute bucket (negative: owed by paced calls); only pools with a limit, configured or learned from the provider's headers.", l, nil),
		requests:    prometheus.NewDesc("sluice_pool_requests_available", "Requests left in a pool's requests-per-minute bucket; only pools with a limit.", l, nil),
		down:        prometheus.NewDesc("sluice_pool_down", "1 while a pool is down (its deployment unreachable or failing): it gets only probes.", l, nil),
	}
}

func (pc *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pc.inFlight, pc.queued, pc.concurrency, pc.tokens, pc.requests, pc.down} {
		ch <- d
	}
}

func (pc *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for i, p := range pc.g.pools {
		l := []string{p.info.Name, p.info.Deployment, p.info.Model}
		st := p.info.Gate.Stats()
		s := pc.g.chain.PoolState(i)
		ch <- prometheus.MustNewConstMetric(pc.inFlight, prometheus.GaugeValue, float64(st.InFlight), l...)
		ch <- prometheus.MustNewConstMetric(pc.queued, prometheus.GaugeValue, float64(st.Queued), l...)
		ch <- prometheus.MustNewConstMetric(pc.concurrency, prometheus.GaugeValue, float64(st.Concurrency), l...)
		if s.TokensKnown {
			ch <- prometheus.MustNewConstMetric(pc.tokens, prometheus.GaugeValue, s.Tokens, l...)
		}
		if s.RequestsKnown {
			ch <- prometheus.MustNewConstMetric(pc.requests, prometheus.GaugeValue, s.Requests, l...)
		}
		down := 0.0
		if s.Down {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(pc.down, prometheus.GaugeValue, down, l...)
	}
}

// gateOf is the gate of the call's pool.
func (g *Gateway) gateOf(c *call) *admission.Gate { return g.poolOf(c).info.Gate }

// modelName is the call's model, "" outside a call.
func (c *call) modelName() string {
	if c == nil {
		return ""
	}
	return c.model
}

// stats is the gateway's admission state: the one pool's, or every pool's
// added up — slots, calls in flight and queued, by rank and in all, the
// counters — with the longest estimated wait of each rank, LIFO when any
// pool serves newest-first, the slowest percentiles and the mean weighted
// by samples. The dashboard, the metrics, the state dump, the Batch API
// and the drain at shutdown read it.
func (g *Gateway) stats() admission.Stats {
	if len(g.pools) == 1 {
		return g.pools[0].info.Gate.Stats()
	}
	var out admission.Stats
	out.Rejected, out.Completed = map[admission.Reason]uint64{}, map[admission.Result]uint64{}
	var meanSum float64
	for _, p := range g.pools {
		st := p.info.Gate.Stats()
		out.Concurrency += st.Concurrency
		out.InFlight += st.InFlight
		out.Queued += st.Queued
		out.InFlightByRank = addInts(out.InFlightByRank, st.InFlightByRank)
		out.Depth = addInts(out.Depth, st.Depth)
		if len(out.EstimatedWait) < len(st.EstimatedWait) {
			out.EstimatedWait = append(out.EstimatedWait, make([]time.Duration, len(st.EstimatedWait)-len(out.EstimatedWait))...)
		}
		for r, w := range st.EstimatedWait {
			out.EstimatedWait[r] = max(out.EstimatedWait[r], w)
		}
		if st.Mode == admission.LIFO {
			out.Mode = admission.LIFO
		}
		out.LIFOQueues += st.LIFOQueues
		out.ServiceP50, out.ServiceP95, out.ServiceP99 = max(out.ServiceP50, st.ServiceP50), max(out.ServiceP95, st.ServiceP95), max(out.ServiceP99, st.ServiceP99)
		meanSum += float64(st.ServiceMean) * float64(st.ServiceSamples)
		out.ServiceSamples += st.ServiceSamples
		out.Admitted += st.Admitted
		out.Enqueued += st.Enqueued
		out.Granted += st.Granted
		out.Canceled += st.Canceled
		for k, n := range st.Rejected {
			out.Rejected[k] += n
		}
		for k, n := range st.Completed {
			out.Completed[k] += n
		}
	}
	if out.ServiceSamples > 0 {
		out.ServiceMean = time.Duration(meanSum / float64(out.ServiceSamples))
	}
	return out
}

func addInts(a, b []int) []int {
	if len(a) < len(b) {
		a = append(a, make([]int, len(b)-len(a))...)
	}
	for i, n := range b {
		a[i] += n
	}
	return a
}

// serviceByKey calls f with the service-time statistics of each pool
// (named deployment/model), or, for a pool that serves every model, of
// each model it keeps them for.
func (g *Gateway) serviceByKey(f func(name string, ks admission.KeyStats)) {
	for _, p := range g.pools {
		if p.info.Model != chain.AnyModel {
			f(p.info.Name, p.info.Gate.KeyStats(p.info.Model))
			continue
		}
		for _, model := range p.info.Gate.Keys() {
			f(model, p.info.Gate.KeyStats(model))
		}
	}
}

// maxQueue is the waiting room in force: every pool's.
func (g *Gateway) maxQueue() int {
	n := 0
	for _, p := range g.pools {
		n += p.info.Gate.MaxQueue()
	}
	return n
}
