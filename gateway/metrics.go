package gateway

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/gateway/dashboard"
)

// metrics are registered on the gateway's own registry, never the global
// one, so that two gateways in one process (or a program embedding one) do
// not collide.
type metrics struct {
	reg              *prometheus.Registry
	admissions       *prometheus.CounterVec   // class, tenant
	rejections       *prometheus.CounterVec   // reason, class, tenant
	responses        *prometheus.CounterVec   // class, code
	service          *prometheus.HistogramVec // model
	queue            *prometheus.HistogramVec // class
	badInput         *prometheus.CounterVec   // code
	attempts         *prometheus.CounterVec   // kind: first, retry
	upstreamRetries  *prometheus.CounterVec   // why: connection, 429, 5xx
	upstreamFailures *prometheus.CounterVec   // kind: upstream_unreachable, upstream_reset, upstream_timeout
	limitDecreases   prometheus.Counter
	tokens           *prometheus.CounterVec // model, kind
	degraded         *prometheus.CounterVec // cause: spend, load
	failovers        *prometheus.CounterVec // pool: the pool a call left
	would            *wouldMetrics          // observe mode (observemode.go)
	// ended counts admitted calls by who ended them (ending.go), its
	// children made once, every ending's series present from the start.
	ended      [numEndings]prometheus.Counter
	recognised *recognisedRetries // how: header, stainless, fingerprint (seen.go)
	models     *labelLimiter
	// dash is the admin dashboard (package dashboard): it reads these
	// metrics and the gate once a second while RunDashboard runs.
	dash *dashboard.Board

	// The children of the series every call touches, looked up once:
	// WithLabelValues hashes and checks its label values on each call, and
	// a call makes eight of them. A child is created (and its series
	// appears) only when first used, as with WithLabelValues.
	attemptsOf   childCache[bool, prometheus.Counter] // by retry
	admissionsOf childCache[admissionKey, prometheus.Counter]
	queueOf      childCache[string, prometheus.Observer]
	responsesOf  childCache[responseKey, prometheus.Counter]
	serviceOf    childCache[string, prometheus.Observer]
	tokensOf     childCache[string, *[3]prometheus.Counter] // by model: input, cached_input, output
}

type admissionKey struct {
	class, tenant string
	retry         bool
}

type responseKey struct {
	class string
	code  int
}

// childCache memoizes a metric vector's children by key. Series are never
// deleted, so a cached child stays the registered one.
type childCache[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (c *childCache[K, V]) get(k K, child func() V) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok {
		return v
	}
	if c.m == nil {
		c.m = map[K]V{}
	}
	v = child()
	c.m[k] = v
	return v
}

func (m *metrics) attempt(attempt int) prometheus.Counter {
	return m.attemptsOf.get(attempt > 0, func() prometheus.Counter { return m.attempts.WithLabelValues(attemptKind(attempt)) })
}

func (m *metrics) admission(class, tenant string, attempt int) prometheus.Counter {
	return m.admissionsOf.get(admissionKey{class, tenant, attempt > 0}, func() prometheus.Counter {
		return m.admissions.WithLabelValues(class, tenant, attemptKind(attempt))
	})
}

func (m *metrics) queueTime(class string) prometheus.Observer {
	return m.queueOf.get(class, func() prometheus.Observer { return m.queue.WithLabelValues(class) })
}

func (m *metrics) response(class string, code int) prometheus.Counter {
	return m.responsesOf.get(responseKey{class, code}, func() prometheus.Counter {
		return m.responses.WithLabelValues(class, strconv.Itoa(code))
	})
}

func (m *metrics) serviceTime(model string) prometheus.Observer {
	return m.serviceOf.get(model, func() prometheus.Observer { return m.service.WithLabelValues(model) })
}

// modelTokens returns the model's token counters: input, cached_input,
// output.
func (m *metrics) modelTokens(model string) *[3]prometheus.Counter {
	return m.tokensOf.get(model, func() *[3]prometheus.Counter {
		return &[3]prometheus.Counter{m.tokens.WithLabelValues(model, "input"),
			m.tokens.WithLabelValues(model, "cached_input"), m.tokens.WithLabelValues(model, "output")}
	})
}

// latencyBuckets span fast embeddings to slow reasoning calls.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admissions_total", Help: "Requests granted a slot, by class, tenant and attempt (first or retry).",
		}, []string{"class", "tenant", "attempt"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rejections_total", Help: "Requests refused, by reason, class and tenant.",
		}, []string{"reason", "class", "tenant"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_responses_total", Help: "Upstream responses by class and status code (0: no response).",
		}, []string{"class", "code"}),
		service: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_service_time_seconds", Help: "Upstream service time (slot held: grant to end of body), by model.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_queue_time_seconds", Help: "Time waited for a slot by admitted requests, by class.",
			Buckets: latencyBuckets,
		}, []string{"class"}),
		badInput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_bad_requests_total", Help: "Requests refused for bad input (4xx), by code.",
		}, []string{"code"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_attempts_total", Help: "Requests by kind: first attempts and retries (X-Sluice-Attempt or X-Stainless-Retry-Count ≥ 1).",
		}, []string{"kind"}),
		upstreamRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_retries_total", Help: "The gateway's own retries of the provider, by cause.",
		}, []string{"cause"}),
		upstreamFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_failures_total", Help: "Calls the provider never answered, by kind: upstream_unreachable, upstream_reset, upstream_timeout.",
		}, []string{"kind"}),
		limitDecreases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_concurrency_decreases_total", Help: "Times the provider's rate limit (429 or x-ratelimit-remaining at 0) lowered concurrency.",
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_tokens_total", Help: "Tokens the provider reported in usage, by model and kind (input, cached_input, output).",
		}, []string{"model", "kind"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_degraded_requests_total", Help: "Requests sent one rung down the model ladder, by cause: spend (the spend policy's degrade stage) or load (no pool of the model could serve them in time, and their class or X-Sluice-Degrade allowed it).",
		}, []string{"cause"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_failovers_total", Help: "Calls moved to the next deployment of their model's route after a connection failure, a 5xx or a 429 before any byte reached the caller, by the pool they left.",
		}, []string{"pool"}),
		recognised: &recognisedRetries{chain: g.chain},
		models:     newLabelLimiter(32),
	}
	m.reg.MustRegister(m.recognised, m.tokens, m.degraded, m.failovers, newPoolCollector(g), newLearnedCollector(g), m.attempts, m.upstreamRetries, m.upstreamFailures, m.limitDecreases, m.admissions, m.rejections, m.responses, m.service, m.queue, m.badInput,
		&gateCollector{g: g, classes: classRanks(g)},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, cause := range []string{chain.DegradedBySpend, chain.DegradedByLoad} {
		m.degraded.WithLabelValues(cause)
	}
	for _, p := range g.pools {
		m.failovers.WithLabelValues(p.info.Name)
	}
	ended := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_calls_ended_total",
		Help: "Admitted calls by who ended them: completed (the answer reached the caller whole), provider_error (an error answer, or the provider never reached), provider_cut (the provider broke off its answer), caller_left, caller_deadline (X-Sluice-Timeout-Ms), max_duration (limits.max_call_duration).",
	}, []string{"outcome"})
	m.reg.MustRegister(ended)
	for e := endCompleted; e < numEndings; e++ {
		m.ended[e] = ended.WithLabelValues(e.String())
	}
	m.would = newWouldMetrics(m.reg)
	m.dash = newDashboard(g)
	return m
}

// classRanks maps each configured class to its rank.
func classRanks(g *Gateway) map[string]int {
	out := map[string]int{}
	for name := range g.cfg.Classes {
		out[name], _ = g.chain.Rank(admissionRequest(name))
	}
	return out
}

// gateCollector reads the gate's state at scrape time: depths and waits are
// gauges of now, not counters to keep in step.
type gateCollector struct {
	g       *Gateway
	classes map[string]int // class → rank, fixed at start
}

var (
	descDepth       = prometheus.NewDesc("sluice_queue_depth", "Requests waiting, by rank.", []string{"rank"}, nil)
	descWait        = prometheus.NewDesc("sluice_estimated_wait_seconds", "Wait a newcomer of each rank would be told now.", []string{"rank"}, nil)
	descInFlight    = prometheus.NewDesc("sluice_in_flight", "Upstream calls holding a slot.", nil, nil)
	descConcurrency = prometheus.NewDesc("sluice_concurrency", "Slots: upstream calls allowed at once.", nil, nil)
	descLIFO        = prometheus.NewDesc("sluice_lifo_queues", "Tenant queues serving newest-first (overloaded).", nil, nil)
	descServiceQ    = prometheus.NewDesc("sluice_service_time_estimate_seconds", "Service-time estimate over the recent window.", []string{"stat"}, nil)
	descDraining    = prometheus.NewDesc("sluice_draining", "1 while the gateway refuses new work to shut down.", nil, nil)
	descBudget      = prometheus.NewDesc("sluice_retry_budget_tokens", "Retries the global retry budget would allow now.", nil, nil)
	// The wait by class, beside sluice_queue_time_seconds{class}: the
	// estimate a newcomer is told and the wait admitted requests measured
	// can then be compared without knowing the classes' ranks.
	descClassWait = prometheus.NewDesc("sluice_class_estimated_wait_seconds", "Wait a newcomer of each class (at its rank, standard tier, first attempt) would be told now.", []string{"class"}, nil)
)

func (c *gateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDepth, descWait, descInFlight, descConcurrency, descLIFO, descServiceQ, descDraining, descBudget, descClassWait} {
		ch <- d
	}
}

func (c *gateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.stats()
	for r := range st.Depth {
		rank := strconv.Itoa(r)
		ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(st.Depth[r]), rank)
		ch <- prometheus.MustNewConstMetric(descWait, prometheus.GaugeValue, st.EstimatedWait[r].Seconds(), rank)
	}
	for class, r := range c.classes {
		if r >= 0 && r < len(st.EstimatedWait) {
			ch <- prometheus.MustNewConstMetric(descClassWait, prometheus.GaugeValue, st.EstimatedWait[r].Seconds(), class)
		}
	}
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(st.InFlight))
	ch <- prometheus.MustNewConstMetric(descConcurrency, prometheus.GaugeValue, float64(st.Concurrency))
	ch <- prometheus.MustNewConstMetric(descLIFO, prometheus.GaugeValue, float64(st.LIFOQueues))
	ch <- prometheus.MustNewConstMetric(descServiceQ, prometheus.GaugeValue, st.ServiceP50.Seconds(), "p50")
	ch <- prometheus.MustNewConstMetric(descServiceQ, prometheus.GaugeValue, st.ServiceP95.Seconds(), "p95")
	ch <- prometheus.MustNewConstMetric(descServiceQ, prometheus.GaugeValue, st.ServiceMean.Seconds(), "mean")
	draining := 0.0
	if c.g.draining.Load() {
		draining = 1
	}
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, draining)
	if b, ok := c.g.chain.RetryBalance(time.Now()); ok { // absent with retries.disabled
		ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, b)
	}
}

// labelLimiter keeps a label's cardinality bounded: the first n distinct
// values are themselves, later ones are "other". Model names come from
// request bodies, which callers control.
type labelLimiter struct {
	mu   sync.RWMutex
	n    int
	seen map[string]bool
}

func newLabelLimiter(n int) *labelLimiter { return &labelLimiter{n: n, seen: map[string]bool{}} }

func (l *labelLimiter) label(v string) string {
	if v == "" {
		return "unknown"
	}
	l.mu.RLock()
	ok := l.seen[v]
	full := len(l.seen) >= l.n
	l.mu.RUnlock()
	if ok {
		return v
	}
	if full {
		return "other"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) < l.n {
		l.seen[v] = true
		return v
	}
	if l.seen[v] {
		return v
	}
	return "other"
}

func reasonLabel(r admission.Reason) string { return r.String() }
