// One file, over 600 lines, on purpose: the simulator's results — the
// exported Result types, whose fields are the JSON of `sluice sim --json`,
// and the counting that fills them during a run — kept together so that
// every figure's definition and the event that moves it are read side by
// side.

package sim

import (
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// refusal is why an attempt failed without an answer.
type refusal uint8

const (
	refQueueWait    refusal = iota // sluice: the wait would pass the deadline
	refQueueFull                   // a bound was reached
	refEvicted                     // sluice: displaced by higher-priority work
	refExpired                     // sluice: dropped at dequeue, too late to finish
	refRetryBudget                 // sluice: the gateway's retry budget is empty
	refTenantBudget                // sluice: the tenant's spend budget (429)
	refSpendCeiling                // sluice: the global spend ceiling (503)
	refQueueTimeout                // baseline: waited the fixed queue timeout
	refOther                       // a reason of the admission package not used here
	refTimeout                     // the caller's own timeout (not a server refusal)
	numRefusals
)

var refusalNames = [numRefusals]string{
	refQueueWait:    contract.ReasonQueueWait,
	refQueueFull:    contract.ReasonQueueFull,
	refEvicted:      contract.ReasonEvicted,
	refExpired:      contract.ReasonExpired,
	refRetryBudget:  contract.ReasonRetryBudget,
	refTenantBudget: contract.ReasonTenantBudget,
	refSpendCeiling: contract.ReasonSpendCeiling,
	refQueueTimeout: "queue_timeout",
	refOther:        "other",
	refTimeout:      "timeout",
}

func (r refusal) String() string { return refusalNames[r] }

func refusalOf(r admission.Reason) refusal {
	switch r {
	case admission.ReasonQueueWait:
		return refQueueWait
	case admission.ReasonQueueFull:
		return refQueueFull
	case admission.ReasonEvicted:
		return refEvicted
	case admission.ReasonExpired:
		return refExpired
	case admission.ReasonRetryBudget:
		return refRetryBudget
	case admission.ReasonTenantBudget:
		return refTenantBudget
	case admission.ReasonSpendCeiling:
		return refSpendCeiling
	}
	return refOther
}

// Result is what one run measured. Percentages are 0–100.
type Result struct {
	Scenario string  `json:"scenario"`
	Policy   string  `json:"policy"`
	Label    string  `json:"label"`
	Load     float64 `json:"load"`
	Seed     uint64  `json:"seed"`
	// WindowSeconds is the arrival window; the run goes on until every
	// caller has stopped listening.
	WindowSeconds float64 `json:"window_seconds"`
	// Capacity is the upstream's nominal throughput, calls per second
	// (concurrency / mean service time, before any step).
	Capacity float64 `json:"capacity_per_second"`

	// Requests are logical requests; Attempts were sent for them.
	Requests           int     `json:"requests"`
	Attempts           int     `json:"attempts"`
	AttemptsPerRequest float64 `json:"attempts_per_request"`
	// OnTime got their answer by their deadline; Late got it after (a naive
	// caller's last attempt can outlive its deadline); the rest got none.
	OnTime     int     `json:"on_time"`
	Late       int     `json:"late"`
	SuccessPct float64 `json:"success_pct"`
	// GoodputPct is the on-time answers delivered inside the window as a
	// percentage of what the upstream could have completed in it (the
	// integral of its capacity, steps included).
	GoodputPct float64 `json:"goodput_pct"`
	// Billed counts upstream calls started (each is billed in full);
	// Wasted those whose answer was not an on-time answer to a caller
	// still waiting for it.
	Billed     int     `json:"billed"`
	Wasted     int     `json:"wasted"`
	WastePct   float64 `json:"waste_pct"`
	BilledCost float64 `json:"billed_cost"`
	WastedCost float64 `json:"wasted_cost"`
	// P50Ms and P99Ms are the latency of on-time answers, from arrival to
	// answer, retries included.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Goodput and waste say what the upstream did; the next figures say
	// what callers felt when they got no answer: silence until their own
	// timeout, or a refusal, and how soon.
	//
	// Unanswered counts the attempts whose caller stopped listening — its
	// attempt timeout or its deadline passed — while the attempt waited in
	// the gateway's queue or was in service, with neither an answer nor a
	// refusal (Refusals["timeout"]). UnansweredPct is over Attempts.
	Unanswered    int     `json:"unanswered"`
	UnansweredPct float64 `json:"unanswered_pct"`
	// Refused counts the refusals a caller heard, for any of the server's
	// reasons in Refusals (all but "timeout"), and RefusalP50Ms and
	// RefusalP99Ms are the time from an attempt's send to its refusal: to
	// the millisecond below a minute, within 0.4% above (see msHist).
	// Sluice withdraws a queued attempt whose caller left, but a
	// queue-timeout baseline refuses it in its turn, to nobody: such an
	// attempt is counted in Refusals and Unanswered, not here.
	Refused      int     `json:"refused"`
	RefusalP50Ms float64 `json:"refusal_p50_ms"`
	RefusalP99Ms float64 `json:"refusal_p99_ms"`

	Classes []ClassResult `json:"classes"`
	// Sources break the figures down per traffic source (which differ
	// from classes when tenants share a class).
	Sources []ClassResult `json:"sources"`
	// Refusals counts failed attempts by reason (server refusals, and
	// "timeout" for the caller's own).
	Refusals map[string]int `json:"refusals"`
	// Withdrawn counts queued attempts the policy withdrew because their
	// caller left; Throttled and ClientBudget count what sluice clients
	// refused themselves.
	Withdrawn    int `json:"withdrawn"`
	Throttled    int `json:"client_throttled"`
	ClientBudget int `json:"client_retry_budget"`
	// Retries counts the attempts after a request's first, and
	// UndeclaredRetries those sent without a retry header (headers: none);
	// RetriesRecognised counts the undeclared ones the chain's recognise
	// stage took for retries, and FirstsRecognised the first attempts it
	// took for retries (copies of a failed request of the same prompt).
	// BilledRetries counts the upstream calls that were retries.
	Retries           int `json:"retries"`
	UndeclaredRetries int `json:"undeclared_retries"`
	RetriesRecognised int `json:"retries_recognised"`
	FirstsRecognised  int `json:"firsts_recognised"`
	BilledRetries     int `json:"billed_retries"`
	// MaxDepth is the longest queue seen.
	MaxDepth int `json:"max_depth"`
	// Paced counts the attempts the route stage held back for their
	// pool's requests or tokens per minute before their gate (policy
	// pools); DegradedByLoad the attempts it sent a rung down the ladder.
	Paced          int `json:"paced,omitempty"`
	DegradedByLoad int `json:"degraded_by_load,omitempty"`
	// Recovery is set when the upstream steps: see [Recovery].
	Recovery *Recovery `json:"recovery,omitempty"`
	// Events counts the events the run processed.
	Events int `json:"events"`

	// Spend is set for a scenario with a spend section: see [SpendResult].
	Spend *SpendResult `json:"spend,omitempty"`

	// Provider is set when replicas shared the upstream: see
	// [ProviderResult].
	Provider *ProviderResult `json:"provider,omitempty"`

	// Learned is set for the policy learned: see [LearnedResult].
	Learned *LearnedResult `json:"learned,omitempty"`

	// Series is set when Options.Trace asked for it.
	Series *Series `json:"-"`
}

// ClassResult is one class's (or traffic source's) share of a Result.
type ClassResult struct {
	Name       string  `json:"name"`
	Requests   int     `json:"requests"`
	Attempts   int     `json:"attempts"`
	OnTime     int     `json:"on_time"`
	SuccessPct float64 `json:"success_pct"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	// Unanswered, UnansweredPct (over its Attempts), Refused, RefusalP50Ms
	// and RefusalP99Ms are its share of the Result's.
	Unanswered    int     `json:"unanswered"`
	UnansweredPct float64 `json:"unanswered_pct"`
	Refused       int     `json:"refused"`
	RefusalP50Ms  float64 `json:"refusal_p50_ms"`
	RefusalP99Ms  float64 `json:"refusal_p99_ms"`
	// GoodputPerSecond is its on-time answers delivered inside the
	// arrival window, per second of the window.
	GoodputPerSecond float64 `json:"goodput_per_second"`
	// Degraded counts the on-time answers that came from a cheaper model
	// than the one asked for (by the spend limiter, or by the route stage
	// under load).
	Degraded int `json:"degraded,omitempty"`
}

// Recovery is how long the policy took to deliver good output again after
// the upstream's first service-time step. Right after a step, answers still
// come from calls started before it; the calls started after it take
// longer, and whether they are answered in time is what the policy decides.
// So recovery is measured on calls started after the step alone.
//
// The policy has recovered at the start of the first 5-second stretch in
// which such calls deliver Target on-time answers per second — 90% of what
// can be served after the step, the smaller of the new capacity and the
// offered rate of first attempts — provided that from there to the end of
// the phase no 30-second stretch falls below 80% of it. The second
// condition keeps a policy that looks good while it serves work queued
// before the step, and collapses later, from counting as recovered; the
// long stretch keeps the random ups and downs of a few dozen completions
// from counting as a collapse.
type Recovery struct {
	StepAtSeconds float64 `json:"step_at_seconds"`
	Target        float64 `json:"target_per_second"`
	// Recovered is false when the output never came back before the next
	// step or the end of the window; Seconds is then the time that passed.
	Recovered bool    `json:"recovered"`
	Seconds   float64 `json:"seconds"`
	// GoodputPct is the on-time answers of the calls started after the
	// step, per second from the step to the end of its phase, as a
	// percentage of what the upstream could serve then (the lower of its
	// capacity after the step and the offered rate): how much of the new
	// capacity went to answers someone still wanted.
	GoodputPct float64 `json:"goodput_pct"`
}

// Series are per-bucket time series of a run.
type Series struct {
	Bucket time.Duration
	// Goodput is on-time answers per second, Offered first attempts per
	// second, Wasted wasted calls per second (at their end).
	Goodput, Offered, Wasted []float64
	// Depth and EstimatedWait are sampled at the start of each bucket;
	// EstimatedWait is nil for policies that estimate none.
	Depth         []int
	EstimatedWait []time.Duration
	// LatencyP50 is the median latency of the on-time answers of each
	// bucket (0 when it had none).
	LatencyP50 []time.Duration
}

type classMetrics struct {
	requests, attempts, onTime, degraded, inWindow int
	unanswered                                     int
	lat                                            hist
	refusal                                        msHist // send to refusal
}

// metrics accumulates a run.
type metrics struct {
	s                           *setup
	requests, attempts          int
	onTime, inWindow, late      int
	billedN, wastedN            int
	billedCost, wastedCost      float64
	refusals                    [numRefusals]int
	withdrawn, unanswered       int
	throttled, clientBudget     int
	retries, undeclared         int
	retriesSeen, firstsSeen     int
	billedRetries               int
	maxDepth                    int
	paced, degradedByLoad       int
	lat                         hist
	refusal                     msHist // send to refusal, every server refusal
	classes, sources            []classMetrics
	good, offered, wastedSeries []int32
	goodAfter                   []int32 // on-time answers of calls started after the first step
	depth                       []int
	wait                        []time.Duration
	lats                        [][]time.Duration
	hasWait                     bool
	events                      int
	// spent is the cost of the calls started in each second, in
	// nano-dollars: [0] all, [1+i] tenant i. Only with a spend section.
	spent [][]int64
	// learned is the policy learned's figures (learned.go); nil for the
	// others.
	learned *learnedMetrics
}

// maxBuckets bounds the time series: a bucket far too small for the run is
// a configuration mistake, not a reason to allocate gigabytes.
const maxBuckets = 10_000_000

func newMetrics(s *setup) *metrics {
	m := &metrics{s: s, classes: make([]classMetrics, len(s.classes)), sources: make([]classMetrics, len(s.sources))}
	n := int(s.end/s.bucket) + 1
	if n > maxBuckets {
		n = maxBuckets
	}
	m.good = make([]int32, n)
	m.offered = make([]int32, n)
	m.wastedSeries = make([]int32, n)
	if st := s.sampler.steps; len(st) > 0 && st[0].at < s.window {
		m.goodAfter = make([]int32, n)
	}
	if s.spend != nil {
		secs := int(s.end/time.Second) + 1
		m.spent = make([][]int64, 1+len(s.tenants))
		for i := range m.spent {
			m.spent[i] = make([]int64, secs)
		}
	}
	if s.trace {
		m.depth = make([]int, n)
		m.wait = make([]time.Duration, n)
		m.lats = make([][]time.Duration, n)
	}
	return m
}

func (m *metrics) bucket(t time.Duration) int {
	return min(int(t/m.s.bucket), len(m.good)-1)
}

func (m *metrics) arrival(c *call) {
	m.requests++
	m.classes[c.src.class].requests++
	m.sources[c.src.idx].requests++
	m.offered[m.bucket(c.arrival)]++
}

func (m *metrics) attempt(c *call) {
	m.attempts++
	if c.sent > 1 {
		m.retries++
		if c.src.undeclared {
			m.undeclared++
		}
	}
	m.classes[c.src.class].attempts++
	m.sources[c.src.idx].attempts++
}

// recognised records whether the chain took attempt a for a retry its
// caller did not declare.
func (m *metrics) recognised(a *attempt, seen bool) {
	switch {
	case !seen:
	case a.n > 0:
		m.retriesSeen++
	default:
		m.firstsSeen++
	}
}

func (m *metrics) billed(a *attempt) {
	m.billedN++
	if a.n > 0 {
		m.billedRetries++
	}
	m.billedCost += a.cost
	if m.spent != nil {
		sec, nano := int(a.start/time.Second), nanoDollars(a.cost)
		m.spent[0][sec] += nano
		m.spent[1+a.c.src.tenant][sec] += nano
	}
}

func (m *metrics) wasted(a *attempt, now time.Duration) {
	m.wastedN++
	m.wastedCost += a.cost
	m.wastedSeries[m.bucket(now)]++
}

// refused records a server refusal of a at now.
func (m *metrics) refused(a *attempt, why refusal, now time.Duration, heard bool) {
	m.refusals[why]++
	if !heard {
		return // nobody was told: its caller had gone (the baselines' queue timeout)
	}
	took := now - a.sentAt
	m.refusal.add(took)
	m.classes[a.c.src.class].refusal.add(took)
	m.sources[a.c.src.idx].refusal.add(took)
}

// timedOut records that c's caller stopped listening for its current
// attempt, which had neither an answer nor a refusal.
func (m *metrics) timedOut(c *call) {
	m.unanswered++
	m.classes[c.src.class].unanswered++
	m.sources[c.src.idx].unanswered++
}

// answered records an answer that reached a caller still waiting for it.
func (m *metrics) answered(c *call, a *attempt, now time.Duration, onTime bool) {
	if !onTime {
		m.late++
		return
	}
	lat := now - c.arrival
	m.onTime++
	cm := &m.classes[c.src.class]
	cm.onTime++
	cm.lat.add(lat)
	sm := &m.sources[c.src.idx]
	sm.onTime++
	sm.lat.add(lat)
	if now <= m.s.window {
		m.inWindow++
		cm.inWindow++
		sm.inWindow++
	}
	if a.degraded {
		cm.degraded++
		sm.degraded++
	}
	m.lat.add(lat)
	b := m.bucket(now)
	m.good[b]++
	if m.goodAfter != nil && a.start >= m.s.sampler.steps[0].at {
		m.goodAfter[b]++
	}
	if m.lats != nil {
		m.lats[b] = append(m.lats[b], lat)
	}
}

func (m *metrics) sample(e *engine) {
	b := m.bucket(e.now)
	m.depth[b] = e.srv.depth()
	if w, ok := e.srv.estimatedWait(e.now); ok {
		m.wait[b] = w
		m.hasWait = true
	}
}

func (m *metrics) result(e *engine) *Result {
	s := m.s
	r := &Result{
		Scenario:       s.sc.Name,
		Policy:         s.policy.Name,
		Label:          s.policy.Label,
		Load:           s.load,
		Seed:           s.seed,
		WindowSeconds:  s.window.Seconds(),
		Capacity:       s.capacity,
		Requests:       m.requests,
		Attempts:       m.attempts,
		OnTime:         m.onTime,
		Late:           m.late,
		Billed:         m.billedN,
		Wasted:         m.wastedN,
		BilledCost:     m.billedCost,
		WastedCost:     m.wastedCost,
		P50Ms:          ms(m.lat.quantile(0.50)),
		P99Ms:          ms(m.lat.quantile(0.99)),
		Unanswered:     m.unanswered,
		UnansweredPct:  100 * ratio(m.unanswered, m.attempts),
		Refused:        m.refusal.n,
		RefusalP50Ms:   ms(m.refusal.quantile(0.50)),
		RefusalP99Ms:   ms(m.refusal.quantile(0.99)),
		Refusals:       map[string]int{},
		Withdrawn:      m.withdrawn,
		Throttled:      m.throttled,
		ClientBudget:   m.clientBudget,
		MaxDepth:       m.maxDepth,
		Paced:          m.paced,
		DegradedByLoad: m.degradedByLoad,
		Events:         m.events,

		Retries:           m.retries,
		UndeclaredRetries: m.undeclared,
		RetriesRecognised: m.retriesSeen,
		FirstsRecognised:  m.firstsSeen,
		BilledRetries:     m.billedRetries,
	}
	// Calls still running when the run stops are billed, and nobody is
	// listening for them any more.
	for _, ev := range e.q.h {
		if ev.kind == evDone && ev.a.gen == ev.gen && ev.a.state == stServing {
			r.Wasted++
			r.WastedCost += ev.a.cost
		}
	}
	r.Learned = m.learnedResult()
	r.AttemptsPerRequest = ratio(r.Attempts, r.Requests)
	r.SuccessPct = 100 * ratio(r.OnTime, r.Requests)
	r.WastePct = 100 * ratio(r.Wasted, r.Billed)
	if c := s.capacityOver(0, s.window); c > 0 {
		r.GoodputPct = 100 * float64(m.inWindow) / c
	}
	for i, why := range m.refusals {
		if why > 0 {
			r.Refusals[refusal(i).String()] = why
		}
	}
	if m.unanswered > 0 {
		r.Refusals[refTimeout.String()] = m.unanswered
	}
	for i := range m.classes {
		if s.usesClass(i) {
			r.Classes = append(r.Classes, m.classes[i].result(s.classes[i].Name, s.window))
		}
	}
	for i := range m.sources {
		r.Sources = append(r.Sources, m.sources[i].result(s.sources[i].name, s.window))
	}
	r.Recovery = m.recovery()
	r.Spend = m.spendResult(e)
	if rs, ok := e.srv.(*replicaServer); ok {
		r.Provider = rs.result(e.now)
	}
	if s.trace {
		r.Series = m.series()
	}
	return r
}

func (cm *classMetrics) result(name string, window time.Duration) ClassResult {
	var good float64
	if window > 0 {
		good = float64(cm.inWindow) / window.Seconds()
	}
	return ClassResult{
		GoodputPerSecond: good,
		Name:             name,
		Requests:         cm.requests,
		Attempts:         cm.attempts,
		OnTime:           cm.onTime,
		SuccessPct:       100 * ratio(cm.onTime, cm.requests),
		P50Ms:            ms(cm.lat.quantile(0.50)),
		P99Ms:            ms(cm.lat.quantile(0.99)),
		Unanswered:       cm.unanswered,
		UnansweredPct:    100 * ratio(cm.unanswered, cm.attempts),
		Refused:          cm.refusal.n,
		RefusalP50Ms:     ms(cm.refusal.quantile(0.50)),
		RefusalP99Ms:     ms(cm.refusal.quantile(0.99)),
		Degraded:         cm.degraded,
	}
}

// usesClass reports whether any source sends class i.
func (s *setup) usesClass(i int) bool {
	for _, src := range s.sources {
		if src.class == i {
			return true
		}
	}
	return false
}

// The stretches of Recovery.
const (
	recoveryWindow = 5 * time.Second
	sustainWindow  = 30 * time.Second
)

func (m *metrics) recovery() *Recovery {
	s := m.s
	if m.goodAfter == nil {
		return nil
	}
	step := s.sampler.steps[0]
	phaseEnd := s.window
	if len(s.sampler.steps) > 1 {
		phaseEnd = min(phaseEnd, s.sampler.steps[1].at)
	}
	capacity := float64(s.sc.Upstream.Concurrency) / (s.mean.Seconds() * step.factor)
	offered := 0.0
	for _, src := range s.sources {
		offered += src.rateAt(step.at)
	}
	servable := min(capacity, offered)
	rec := &Recovery{StepAtSeconds: step.at.Seconds(), Target: 0.9 * servable}
	first := int(step.at / s.bucket)
	end := min(int(phaseEnd/s.bucket), len(m.goodAfter))
	// prefix[k] is the on-time answers of post-step calls in buckets < k.
	prefix := make([]int, end+1)
	for k := 0; k < end; k++ {
		prefix[k+1] = prefix[k] + int(m.goodAfter[k])
	}
	if span := (time.Duration(end-first) * s.bucket).Seconds(); span > 0 && servable > 0 {
		rec.GoodputPct = 100 * float64(prefix[end]-prefix[first]) / span / servable
	}
	rate := func(k int, span time.Duration) float64 {
		w := max(1, int(span/s.bucket))
		return float64(prefix[k+w]-prefix[k]) / (time.Duration(w) * s.bucket).Seconds()
	}
	// The last long stretch that falls short: recovery comes after it.
	from := first
	long := max(1, int(sustainWindow/s.bucket))
	for j := end - long; j >= first; j-- {
		if rate(j, sustainWindow) < 0.8*servable {
			from = j + 1
			break
		}
	}
	short := max(1, int(recoveryWindow/s.bucket))
	for k := from; k+short <= end; k++ {
		if rate(k, recoveryWindow) >= rec.Target {
			rec.Recovered = true
			rec.Seconds = max(0, (time.Duration(k)*s.bucket - step.at).Seconds())
			return rec
		}
	}
	rec.Seconds = (phaseEnd - step.at).Seconds()
	return rec
}

// rateAt is the source's rate of first attempts at t, per second.
func (r *source) rateAt(t time.Duration) float64 {
	sec := t.Seconds()
	for _, sg := range r.segs {
		if sec < sg.end {
			return sg.rate
		}
	}
	return 0
}

func (m *metrics) series() *Series {
	s := m.s
	n := min(len(m.good), int(s.window/s.bucket)+1)
	per := 1 / s.bucket.Seconds()
	sr := &Series{Bucket: s.bucket, Depth: m.depth[:n]}
	for i := range n {
		sr.Goodput = append(sr.Goodput, float64(m.good[i])*per)
		sr.Offered = append(sr.Offered, float64(m.offered[i])*per)
		sr.Wasted = append(sr.Wasted, float64(m.wastedSeries[i])*per)
		var h hist
		for _, l := range m.lats[i] {
			h.add(l)
		}
		sr.LatencyP50 = append(sr.LatencyP50, h.quantile(0.5))
	}
	if m.hasWait {
		sr.EstimatedWait = m.wait[:n]
	}
	return sr
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
