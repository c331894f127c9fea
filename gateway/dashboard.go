package gateway

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// The dashboard's history: one sample a second for the last 15 minutes,
// kept in a fixed ring so that its memory never grows. The status line
// looks at the last 5 minutes of it.
const (
	dashboardEvery   = time.Second
	dashboardSamples = 900
	statusWindow     = 5 * time.Minute
)

// DashboardSample is one second of the gateway, as the dashboard draws it.
// Counts of the interval ("refused_*") are what happened since the
// previous sample, about one second earlier.
type DashboardSample struct {
	Time        int64   `json:"t"`        // Unix milliseconds
	Goodput     float64 `json:"goodput"`  // answers delivered per second
	Capacity    float64 `json:"capacity"` // concurrency ÷ mean service time, per second; 0 before any service time is known
	InFlight    int     `json:"in_flight"`
	Concurrency int     `json:"concurrency"`
	Queued      int     `json:"queued"`
	Depth       []int   `json:"depth"`   // by rank
	WaitMs      []int64 `json:"wait_ms"` // estimated wait by rank
	// Served and Refused are totals since start: the gate's successful
	// completions and its refusals, as /admin/v1/state counts them.
	Served  uint64 `json:"served"`
	Refused uint64 `json:"refused"`
	// RefusedReason and RefusedClass count the refusals of the interval
	// (every refusal the gateway answered, spend's included).
	RefusedReason map[string]float64 `json:"refused_reason"`
	RefusedClass  map[string]float64 `json:"refused_class"`
	// ShedClass counts, by class, the interval's refusals for want of
	// capacity (queue_wait, queue_full, evicted, expired): not those of
	// spend, the retry budget or draining, which have other causes.
	ShedClass map[string]float64 `json:"shed_class"`
	// ServiceMs is each model's service time: p50 and p95.
	ServiceMs   map[string][2]int64 `json:"service_ms"`
	RetryBudget *float64            `json:"retry_budget,omitempty"` // absent with retries disabled
	Spend       *DashboardSpend     `json:"spend,omitempty"`        // absent without a spend section
	Draining    bool                `json:"draining,omitempty"`
	Status      DashboardStatus     `json:"status"`

	// Cluster is the cluster's concurrency, of which Concurrency is this
	// replica's lease, with replicas leasing on Redis; 0 otherwise.
	Cluster int `json:"cluster,omitempty"`
	// Pools are the (deployment, model) pools with upstreams: (absent
	// with one upstream), each with its gate and buckets.
	Pools []DashboardPool `json:"pools,omitempty"`
}

// DashboardPool is one pool in a DashboardSample.
type DashboardPool struct {
	Name        string   `json:"name"`
	InFlight    int      `json:"in_flight"`
	Concurrency int      `json:"concurrency"`
	Queued      int      `json:"queued"`
	Tokens      *float64 `json:"tokens,omitempty"` // left in its tokens-per-minute bucket, when it has one
	Down        bool     `json:"down,omitempty"`
}

// DashboardSpend is the spend part of a sample.
type DashboardSpend struct {
	RatePerHour  float64            `json:"rate_per_hour"`
	Stage        string             `json:"stage"`
	Alerting     bool               `json:"alerting"`
	Tenants      map[string]float64 `json:"tenants"` // rate per hour
	TenantsAlert []string           `json:"tenants_alerting,omitempty"`
	WastedUSD    float64            `json:"wasted_usd"`      // total since start
	WastedPerH   float64            `json:"wasted_per_hour"` // the interval's, per hour
}

// DashboardStatus is the line at the top of the dashboard: Level is "ok",
// "warn" or "crit"; Text is the worst finding in plain words, Details the
// others.
type DashboardStatus struct {
	Level   string   `json:"level"`
	Text    string   `json:"text"`
	Details []string `json:"details,omitempty"`
}

// DashboardMeta is what does not change while the gateway runs: the
// classes' ranks and default deadlines, and the spend ceiling's stages.
type DashboardMeta struct {
	EverySeconds float64               `json:"every_seconds"`
	Classes      map[string]ClassState `json:"classes"`
	Spend        *DashboardSpendMeta   `json:"spend,omitempty"`
}

// DashboardSpendMeta places the spend rate against its limits, in USD per
// hour (zero: none).
type DashboardSpendMeta struct {
	CeilingPerHour float64 `json:"ceiling_per_hour,omitempty"`
	AlertPerHour   float64 `json:"alert_per_hour,omitempty"`
	ShedAt         float64 `json:"shed_speculative_at,omitempty"`
	DegradeAt      float64 `json:"degrade_at,omitempty"`
	RejectAt       float64 `json:"reject_at,omitempty"`
}

// DashboardHistory is the first message of /admin/v1/events and the body
// of /admin/v1/history: the meta and the samples of the last 15 minutes,
// oldest first.
type DashboardHistory struct {
	Meta    DashboardMeta     `json:"meta"`
	Samples []DashboardSample `json:"samples"`
}

// sampler keeps the dashboard's history. Its readings cost the request
// path nothing: once a second it takes the gate's Stats (one lock, as a
// scrape does) and reads the refusal counters; the handlers are untouched.
// Safe for concurrent use.
type sampler struct {
	g    *Gateway
	meta DashboardMeta   // read under mu: a reload replaces its Spend
	top  map[string]bool // the classes of the highest rank: the work that must not be shed

	// prev is the previous reading, for the interval's rates; only the
	// goroutine that calls sample touches it.
	prev struct {
		at      time.Time
		served  uint64
		refused map[[2]string]float64 // reason, class
		wasted  float64
		ok      bool
	}

	mu struct {
		sync.Mutex
		ring    [dashboardSamples]DashboardSample
		n, next int // samples held; where the next goes
		subs    map[chan DashboardSample]struct{}
	}
}

func newSampler(g *Gateway) *sampler {
	s := &sampler{g: g, top: map[string]bool{}}
	s.mu.subs = map[chan DashboardSample]struct{}{}
	s.meta = DashboardMeta{EverySeconds: dashboardEvery.Seconds(), Classes: map[string]ClassState{}}
	best := -1
	for name, cl := range g.cfg.Classes {
		rank, _ := g.chain.Rank(admissionRequest(name))
		timeout := cl.DefaultTimeout.D()
		if timeout == 0 {
			timeout = g.cfg.Limits.MaxTimeout.D()
		}
		s.meta.Classes[name] = ClassState{Rank: rank, DefaultTimeoutMs: timeout.Milliseconds()}
		if rank > best {
			best = rank
			clear(s.top)
		}
		if rank == best {
			s.top[name] = true
		}
	}
	s.meta.Spend = dashboardSpend(g.cfg.Spend)
	return s
}

// dashboardSpend is the spend part of the dashboard's meta: the ceiling
// and its stages' thresholds. Nil without a spend section.
func dashboardSpend(sc *spend.Config) *DashboardSpendMeta {
	if sc == nil {
		return nil
	}
	m := &DashboardSpendMeta{
		CeilingPerHour: sc.CeilingPerHour,
		AlertPerHour:   sc.AlertPerHour,
	}
	if sc.CeilingPerHour > 0 {
		m.ShedAt = sc.CeilingPerHour * cmp.Or(sc.Stages.ShedSpeculativeAt, spend.DefaultShedSpeculativeAt)
		m.DegradeAt = sc.CeilingPerHour * cmp.Or(sc.Stages.DegradeAt, spend.DefaultDegradeAt)
		m.RejectAt = sc.CeilingPerHour * cmp.Or(sc.Stages.RejectAt, spend.DefaultRejectAt)
	}
	return m
}

// RunDashboard samples the gateway for the admin dashboard once a second
// until ctx ends (Server.Serve runs it; a program that mounts the Gateway
// and its AdminHandler itself should too, once). The event streams of
// /admin/v1/events end with it.
func (g *Gateway) RunDashboard(ctx context.Context) error {
	s := g.metrics.dash
	defer s.closeSubscribers()
	tick := time.NewTicker(dashboardEvery)
	defer tick.Stop()
	s.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			s.sample(now)
		}
	}
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

// sample takes one reading at now, adds it to the ring and sends it to the
// subscribers. Not safe for concurrent use: one goroutine samples.
func (s *sampler) sample(now time.Time) DashboardSample {
	g := s.g
	st := g.stats()
	d := DashboardSample{
		Time:          now.UnixMilli(),
		InFlight:      st.InFlight,
		Concurrency:   st.Concurrency,
		Queued:        st.Queued,
		Depth:         st.Depth,
		WaitMs:        make([]int64, len(st.EstimatedWait)),
		Served:        st.Completed[admission.Success],
		RefusedReason: map[string]float64{},
		RefusedClass:  map[string]float64{},
		ShedClass:     map[string]float64{},
		ServiceMs:     map[string][2]int64{},
		Draining:      g.draining.Load(),
	}
	if c := g.books.cluster; c != nil {
		d.Cluster = c.state().Concurrency
	}
	for i, p := range g.pools {
		pst, ps := p.info.Gate.Stats(), g.chain.PoolState(i)
		dp := DashboardPool{Name: p.info.Name, InFlight: pst.InFlight, Concurrency: pst.Concurrency, Queued: pst.Queued, Down: ps.Down}
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
	refused := refusalCounts(g.metrics.rejections)
	var wasted float64
	if g.spend != nil {
		snap := g.spend.Snapshot(now)
		wasted = snap.Global.WastedUSD
		d.Spend = &DashboardSpend{RatePerHour: snap.Global.RatePerHour, Stage: snap.Global.Stage.String(),
			Alerting: snap.Global.Alerting, Tenants: map[string]float64{}, WastedUSD: wasted}
		for _, t := range snap.Tenants {
			d.Spend.Tenants[t.Name] = t.RatePerHour
			if t.Alerting {
				d.Spend.TenantsAlert = append(d.Spend.TenantsAlert, t.Name)
			}
		}
	}
	if p := &s.prev; p.ok {
		if dt := now.Sub(p.at).Seconds(); dt > 0 {
			d.Goodput = float64(d.Served-p.served) / dt
			if d.Spend != nil {
				d.Spend.WastedPerH = (wasted - p.wasted) / dt * 3600
			}
		}
		for k, n := range refused {
			if delta := n - p.refused[k]; delta > 0 {
				d.RefusedReason[k[0]] += delta
				d.RefusedClass[k[1]] += delta
				if capacityReason[k[0]] {
					d.ShedClass[k[1]] += delta
				}
			}
		}
	}
	s.prev.at, s.prev.served, s.prev.refused, s.prev.wasted, s.prev.ok = now, d.Served, refused, wasted, true

	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.ring[s.mu.next] = d
	s.mu.next = (s.mu.next + 1) % dashboardSamples
	s.mu.n = min(s.mu.n+1, dashboardSamples)
	// The status reads the ring with the new sample in it, then is stored
	// in it: the slot is the one just written.
	d.Status = s.statusLocked(now)
	s.mu.ring[(s.mu.next+dashboardSamples-1)%dashboardSamples].Status = d.Status
	for ch := range s.mu.subs {
		select {
		case ch <- d:
		default: // a subscriber that has not taken the last second's sample skips this one
		}
	}
	return d
}

// capacityReason names the refusals that say capacity is missing.
var capacityReason = map[string]bool{
	admission.ReasonQueueWait.String(): true,
	admission.ReasonQueueFull.String(): true,
	admission.ReasonEvicted.String():   true,
	admission.ReasonExpired.String():   true,
}

// refusalCounts reads the refusal counter's children: totals by reason and
// class (summed over tenants).
func refusalCounts(vec *prometheus.CounterVec) map[[2]string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		vec.Collect(ch)
		close(ch)
	}()
	out := map[[2]string]float64{}
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Counter == nil {
			continue
		}
		var reason, class string
		for _, l := range pb.Label {
			switch l.GetName() {
			case "reason":
				reason = l.GetValue()
			case "class":
				class = l.GetValue()
			}
		}
		if class == "" {
			class = "none" // refused before its class was read: draining
		}
		out[[2]string{reason, class}] += pb.Counter.GetValue()
	}
	return out
}

// samplesLocked returns the samples of the ring, oldest first, that are no
// older than since.
func (s *sampler) samplesLocked(since time.Time) []DashboardSample {
	out := make([]DashboardSample, 0, s.mu.n)
	for i := range s.mu.n {
		d := s.mu.ring[(s.mu.next-s.mu.n+i+dashboardSamples)%dashboardSamples]
		if d.Time >= since.UnixMilli() {
			out = append(out, d)
		}
	}
	return out
}

// statusLocked says in plain words what is wrong, from the samples of the
// last five minutes and the newest one. The most urgent finding is the
// text; the rest are details.
func (s *sampler) statusLocked(now time.Time) DashboardStatus {
	// Pointers into the ring, not copies: this runs every second over up
	// to 300 samples.
	since := now.Add(-statusWindow).UnixMilli()
	recent := make([]*DashboardSample, 0, int(statusWindow/dashboardEvery)+1)
	for i := range s.mu.n {
		if d := &s.mu.ring[(s.mu.next-s.mu.n+i+dashboardSamples)%dashboardSamples]; d.Time >= since {
			recent = append(recent, d)
		}
	}
	return dashboardStatus(recent, s.top)
}

// dashboardStatus is the status of recent samples (oldest first, the last
// being now). top names the classes of the highest rank.
func dashboardStatus(recent []*DashboardSample, top map[string]bool) DashboardStatus {
	if len(recent) == 0 {
		return DashboardStatus{Level: "ok", Text: "Starting: no sample yet"}
	}
	last := recent[len(recent)-1]
	var topShed, otherShed float64
	byClass := map[string]float64{}
	policy := map[string]float64{} // refusals by the spend policy or the retry budget, by reason
	for _, d := range recent {
		for reason, n := range d.RefusedReason {
			if !capacityReason[reason] && reason != admission.ReasonDraining.String() {
				policy[reason] += n
			}
		}
		for class, n := range d.ShedClass {
			byClass[class] += n
			if top[class] {
				topShed += n
			} else {
				otherShed += n
			}
		}
	}
	type finding struct {
		level, text string
	}
	var found []finding
	if last.Draining {
		found = append(found, finding{"warn", "Draining: new work is refused while the gateway shuts down"})
	}
	var down []string
	for _, p := range last.Pools {
		if p.Down {
			down = append(down, p.Name)
		}
	}
	if len(down) > 0 {
		found = append(found, finding{"warn", fmt.Sprintf("Deployment down, calls going elsewhere and one probe at a time: %s", strings.Join(down, ", "))})
	}
	if topShed > 0 {
		found = append(found, finding{"crit", fmt.Sprintf("%s work is being shed: capacity is missing (%s refused in the last 5 minutes)",
			capitalize(strings.Join(sortedNames(top, byClass), ", ")), count(topShed))})
	}
	if sp := last.Spend; sp != nil && (sp.Alerting || len(sp.TenantsAlert) > 0) {
		who := "global"
		if !sp.Alerting {
			who = "tenant " + strings.Join(sp.TenantsAlert, ", ")
		}
		found = append(found, finding{"crit", fmt.Sprintf("Spend rate over its alert level (%s)", who)})
	}
	if sp := last.Spend; sp != nil && sp.Stage != spend.StageNormal.String() {
		found = append(found, finding{"warn", fmt.Sprintf("Spend ceiling in force: stage %s", sp.Stage)})
	}
	if otherShed > 0 {
		var lower []string
		for class := range byClass {
			if !top[class] {
				lower = append(lower, class)
			}
		}
		slices.Sort(lower)
		found = append(found, finding{"warn", fmt.Sprintf("Lower-priority work is being shed (%s: %s refused in the last 5 minutes)",
			strings.Join(lower, ", "), count(otherShed))})
	}
	if n := policy[admission.ReasonRetryBudget.String()]; n > 0 {
		// Not the budget's level: it is empty on an idle gateway too, and
		// fills with first attempts; what matters is retries refused.
		found = append(found, finding{"warn", fmt.Sprintf("Retry budget exhausted: %.0f retries refused in the last 5 minutes", n)})
		delete(policy, admission.ReasonRetryBudget.String())
	}
	if len(policy) > 0 {
		var parts []string
		for _, reason := range slices.Sorted(maps.Keys(policy)) {
			parts = append(parts, fmt.Sprintf("%s: %s", reason, count(policy[reason])))
		}
		found = append(found, finding{"warn", fmt.Sprintf("Refused by the spend policy in the last 5 minutes (%s)", strings.Join(parts, ", "))})
	}
	if len(found) == 0 {
		return DashboardStatus{Level: "ok", Text: "All clear: nothing shed in the last 5 minutes"}
	}
	// The most severe first; among equals, the order above.
	slices.SortStableFunc(found, func(a, b finding) int { return cmp.Compare(severity(b.level), severity(a.level)) })
	st := DashboardStatus{Level: found[0].level, Text: found[0].text}
	for _, f := range found[1:] {
		st.Details = append(st.Details, f.text)
	}
	return st
}

func severity(level string) int {
	switch level {
	case "crit":
		return 2
	case "warn":
		return 1
	}
	return 0
}

// sortedNames lists the top classes that were refused, or all of them.
func sortedNames(top map[string]bool, refused map[string]float64) []string {
	var names []string
	for class := range top {
		if refused[class] > 0 {
			names = append(names, class)
		}
	}
	slices.Sort(names)
	return names
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func count(n float64) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%.0f requests", n)
}

// history returns the meta and the samples held.
func (s *sampler) history() DashboardHistory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return DashboardHistory{Meta: s.meta, Samples: s.samplesLocked(time.Time{})}
}

// subscribe returns the history and a channel of the samples to come. The
// channel is closed when the sampler stops; cancel unsubscribes.
func (s *sampler) subscribe() (DashboardHistory, <-chan DashboardSample, func()) {
	ch := make(chan DashboardSample, 1)
	s.mu.Lock()
	h := DashboardHistory{Meta: s.meta, Samples: s.samplesLocked(time.Time{})}
	s.mu.subs[ch] = struct{}{}
	s.mu.Unlock()
	return h, ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.mu.subs[ch]; ok {
			delete(s.mu.subs, ch)
			close(ch)
		}
	}
}

// closeSubscribers ends every event stream, and lets later ones start
// again when the sampler is run again.
func (s *sampler) closeSubscribers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.mu.subs {
		close(ch)
		delete(s.mu.subs, ch)
	}
}
