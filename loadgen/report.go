package loadgen

import (
	"errors"
	"math"
	"slices"
	"sync"
	"time"
)

// Report is what the callers of one run experienced. Durations are float
// milliseconds or seconds, as the field names say, so the JSON form needs no
// decoding conventions.
//
// The central distinction is between an answer and a useful answer: a 2xx
// whose last byte arrived by the request's deadline is on time and counts
// towards Goodput and SuccessRatio; one that arrived later is Late — paid for,
// but its caller had stopped listening.
type Report struct {
	Target string `json:"target"`
	Policy string `json:"policy"`
	// Rate is Config.Rate; for a trace replay, the calls replayed per
	// second of the window (Requests / WindowSeconds).
	Rate float64 `json:"rate"`
	// Trace is set when the run replayed a Config.Trace; Seed then played
	// no part.
	Trace  bool   `json:"trace,omitempty"`
	Seed   uint64 `json:"seed"`
	Stream bool   `json:"stream"`
	// SamePrompt and AttemptHeaders echo the Config fields: the same
	// figures mean different things for distinct or identical prompts, and
	// for callers that do or do not say which attempt they are sending.
	SamePrompt     bool           `json:"same_prompt"`
	AttemptHeaders AttemptHeaders `json:"attempt_headers"`
	// Interrupted is set when Run's context was cancelled: the report covers
	// only what happened until then.
	Interrupted bool `json:"interrupted,omitempty"`

	// WallSeconds is the whole run, from the start of arrivals until the
	// last request finished or was cancelled.
	WallSeconds float64 `json:"wall_seconds"`
	// WindowSeconds is the span goodput is measured over, from the start:
	// Config.Duration when arrivals ran for their full duration (or a
	// trace was cut there); a trace's last arrival offset when the whole
	// trace was played; the whole wall time when MaxRequests or
	// cancellation ended them first (or every call of a trace arrived at
	// the start).
	WindowSeconds float64 `json:"window_seconds"`

	// Requests counts logical requests (arrivals), Attempts the HTTP
	// attempts actually sent for them.
	Requests           int     `json:"requests"`
	Attempts           int     `json:"attempts"`
	AttemptsPerRequest float64 `json:"attempts_per_request"`
	// Answered counts requests that got a 2xx read to its end; OnTime those
	// whose last byte arrived by the deadline; Late the rest of Answered.
	Answered int `json:"answered"`
	OnTime   int `json:"on_time"`
	Late     int `json:"late"`
	// ClientOverflow counts requests the generator itself did not send
	// (or did not retry) because MaxInFlight attempts were in flight. A
	// non-zero value means the figures describe the generator's limit too.
	ClientOverflow int `json:"client_overflow"`
	// Goodput is on-time answers delivered within the window, per second:
	// the rate of useful work, in the same unit as Rate. Answers delivered
	// after a Duration window (the drain of a backlog) are left out, so that
	// goodput never exceeds what the target sustained; they still count in
	// OnTime and SuccessRatio.
	Goodput float64 `json:"goodput"`
	// SuccessRatio is OnTime / Requests.
	SuccessRatio float64 `json:"success_ratio"`
	// Latency is measured over answered requests, on time or late, from the
	// scheduled arrival to the last byte of the answer, retries included.
	// Late answers are kept in so that the tail shows how late they were.
	Latency Latency `json:"latency"`
	// AttemptLatency is measured over the attempts that were answered (a
	// 2xx read to its end), from the moment the attempt was handed to the
	// HTTP client to its last byte: what the target took, without the
	// generator's own scheduling delay (SendLag) or earlier attempts. It is
	// the figure to compare when measuring what a proxy adds.
	AttemptLatency Latency `json:"attempt_latency"`
	// SendLag is how late the generator sent first attempts: from the
	// scheduled arrival to the moment the attempt was handed to the HTTP
	// client. Go's timers wake on millisecond ticks when the process is
	// idle, so at high rates this is up to ~1 ms; it is part of Latency.
	SendLag Latency `json:"send_lag"`

	// Unanswered counts sent attempts left with neither an answer nor a
	// refusal by their caller's own timeout: the attempt's own timeout (the
	// client's: Naive's fixed one, Polite's the time left to the deadline)
	// fired while the caller was waiting for the response headers or for
	// the rest of the answer. A complete answer, a refusal (any non-2xx
	// status), a connection error or a body the policy closed are not
	// unanswered, whenever they came: a naive client that waits past its
	// request's deadline hears them (an answer that came after the
	// deadline is Late). UnansweredRatio is Unanswered / Attempts: the
	// share of attempts whose callers waited to their own timeout for
	// nothing. Attempts the generator did not send (client_overflow) are in
	// neither figure.
	Unanswered      int     `json:"unanswered"`
	UnansweredRatio float64 `json:"unanswered_ratio"`
	// RefusalTime is measured over attempts refused with 429 or 503 (or
	// any status with X-Sluice-Reason), from the moment the attempt was
	// handed to the HTTP client to the arrival of its response headers:
	// how long a caller waited to hear no.
	RefusalTime Latency `json:"refusal_time"`

	// Classes breaks the figures down per class, in Config order.
	Classes []ClassReport `json:"classes"`

	// Rejections counts failed attempts by reason: X-Sluice-Reason when the
	// server sent one, else the status code ("503"), or one of the runner's
	// reasons ("timeout", "connection_error", ...).
	Rejections map[string]int `json:"rejections"`
	// Failures counts logical requests that were not answered on time, by
	// the reason of their last failure, "late" for late answers and
	// "client_overflow" for those never sent.
	Failures map[string]int `json:"failures"`
	// StatusCodes counts attempts by HTTP status.
	StatusCodes map[int]int `json:"status_codes"`
	// EstimatedWait summarises the X-Sluice-Estimated-Wait-Ms values seen.
	EstimatedWait WaitStats `json:"estimated_wait"`
	// MalformedHeaders counts response headers the runner could not parse
	// (retry-after-ms, Retry-After, X-Sluice-Estimated-Wait-Ms), by name.
	MalformedHeaders map[string]int `json:"malformed_headers,omitempty"`
}

// Latency holds nearest-rank percentiles in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// ClassReport is one class's share of a Report (with a trace, one
// service's).
type ClassReport struct {
	Name string `json:"name"`
	// DeadlineMs is the class's Deadline; zero when it has none and each
	// of its trace calls carries its own. A trace call's own deadline is
	// the one its request is judged by.
	DeadlineMs   float64 `json:"deadline_ms"`
	Requests     int     `json:"requests"`
	Attempts     int     `json:"attempts"`
	Answered     int     `json:"answered"`
	OnTime       int     `json:"on_time"`
	Late         int     `json:"late"`
	SuccessRatio float64 `json:"success_ratio"`
	Latency      Latency `json:"latency"`
	// Unanswered, UnansweredRatio and RefusalTime are the class's share of
	// the Report's figures of the same names.
	Unanswered      int     `json:"unanswered"`
	UnansweredRatio float64 `json:"unanswered_ratio"`
	RefusalTime     Latency `json:"refusal_time"`
}

// WaitStats summarises the estimated waits a server advertised.
type WaitStats struct {
	Seen     int     `json:"seen"`
	MedianMs float64 `json:"median_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// collector accumulates finished requests; safe for concurrent use.
type collector struct {
	cfg   *resolved
	start time.Time // set before the first arrival
	mu    struct {
		sync.Mutex
		r         Report
		onTimeAt  []time.Duration // offsets from start of on-time answers
		latencies []time.Duration
		attempts  []time.Duration // AttemptLatency's samples
		sendLags  []time.Duration
		perClass  [][]time.Duration
		waits     []time.Duration
		refusals  [][]time.Duration // RefusalTime's samples, per class
	}
}

func newCollector(cfg *resolved) *collector {
	c := &collector{cfg: cfg}
	c.mu.r = Report{
		Target:         cfg.Target,
		Policy:         cfg.Policy.Name(),
		Rate:           cfg.Rate,
		Trace:          cfg.Trace != nil,
		Seed:           cfg.Seed,
		Stream:         cfg.Stream,
		SamePrompt:     cfg.SamePrompt,
		AttemptHeaders: cfg.AttemptHeaders,
		Classes:        make([]ClassReport, len(cfg.Classes)),
		Rejections:     map[string]int{},
		Failures:       map[string]int{},
		StatusCodes:    map[int]int{},
	}
	for i, cl := range cfg.Classes {
		c.mu.r.Classes[i] = ClassReport{Name: cl.Name, DeadlineMs: ms(cl.Deadline)}
	}
	c.mu.perClass = make([][]time.Duration, len(cfg.Classes))
	c.mu.refusals = make([][]time.Duration, len(cfg.Classes))
	return c
}

// record adds one finished logical request: answered tells whether a 2xx was
// read to its end (at end); err is what the policy returned.
func (c *collector) record(cl *call, answered bool, end time.Time, err error) {
	events := cl.attempts()
	reason := ""
	if !answered {
		reason = failureReason(cl.rn, events, err)
	}
	r := cl.r

	c.mu.Lock()
	defer c.mu.Unlock()
	rep := &c.mu.r
	cr := &rep.Classes[cl.class]
	rep.Requests++
	cr.Requests++
	for i, a := range events {
		if !a.sent {
			continue
		}
		if i == 0 {
			c.mu.sendLags = append(c.mu.sendLags, a.Start.Sub(r.Arrival))
		}
		if a.OK() {
			c.mu.attempts = append(c.mu.attempts, a.End.Sub(a.Start))
		}
		rep.Attempts++
		cr.Attempts++
		if a.Status != 0 {
			rep.StatusCodes[a.Status]++
		}
		if !a.OK() {
			rep.Rejections[a.Reason]++
		}
		if a.unanswered() {
			rep.Unanswered++
			cr.Unanswered++
		}
		if a.refused {
			c.mu.refusals[cl.class] = append(c.mu.refusals[cl.class], a.HeadersAt.Sub(a.Start))
		}
		if a.HasEstimatedWait {
			c.mu.waits = append(c.mu.waits, a.EstimatedWait)
		}
		for _, h := range a.malformed {
			if rep.MalformedHeaders == nil {
				rep.MalformedHeaders = map[string]int{}
			}
			rep.MalformedHeaders[h]++
		}
	}
	if !answered {
		rep.Failures[reason]++
		if reason == ReasonClientOverflow {
			rep.ClientOverflow++
		}
		return
	}
	lat := end.Sub(r.Arrival)
	c.mu.latencies = append(c.mu.latencies, lat)
	c.mu.perClass[cl.class] = append(c.mu.perClass[cl.class], lat)
	rep.Answered++
	cr.Answered++
	if end.After(r.Deadline) {
		rep.Late++
		cr.Late++
		rep.Failures[ReasonLate]++
		return
	}
	rep.OnTime++
	cr.OnTime++
	c.mu.onTimeAt = append(c.mu.onTimeAt, end.Sub(c.start))
}

// failureReason names why a logical request got no answer. A Refusal names
// itself; otherwise the last thing that happened to the request (its last
// attempt's failure, or the runner refusing it) is the reason.
func failureReason(rn *runner, events []*Attempt, err error) string {
	var refusal *Refusal
	if errors.As(err, &refusal) && refusal.Reason != "" {
		return refusal.Reason
	}
	if n := len(events); n > 0 {
		if last := events[n-1]; last.Reason != "" {
			return last.Reason
		}
		return ReasonPolicyError
	}
	switch {
	case rn.runCtx.Err() != nil:
		return rn.errReason(rn.runCtx, err)
	case errors.Is(err, errNoTime):
		return ReasonDeadline
	}
	return ReasonNotSent
}

// report finalises the figures. wall and window are described on Report.
func (c *collector) report(wall, window time.Duration, interrupted bool) *Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.mu.r // the maps are handed over; the collector is done
	r.Classes = slices.Clone(r.Classes)
	r.Interrupted = interrupted
	r.WallSeconds = wall.Seconds()
	r.WindowSeconds = window.Seconds()
	if r.Trace && window > 0 {
		r.Rate = float64(r.Requests) / window.Seconds()
	}
	r.AttemptsPerRequest = ratio(r.Attempts, r.Requests)
	r.SuccessRatio = ratio(r.OnTime, r.Requests)
	if window > 0 {
		inWindow := 0
		for _, at := range c.mu.onTimeAt {
			if at <= window {
				inWindow++
			}
		}
		r.Goodput = float64(inWindow) / window.Seconds()
	}
	r.Latency = latencyOf(c.mu.latencies)
	r.AttemptLatency = latencyOf(c.mu.attempts)
	r.SendLag = latencyOf(c.mu.sendLags)
	r.UnansweredRatio = ratio(r.Unanswered, r.Attempts)
	r.RefusalTime = latencyOf(slices.Concat(c.mu.refusals...))
	for i := range r.Classes {
		cr := &r.Classes[i]
		cr.SuccessRatio = ratio(cr.OnTime, cr.Requests)
		cr.Latency = latencyOf(c.mu.perClass[i])
		cr.UnansweredRatio = ratio(cr.Unanswered, cr.Attempts)
		cr.RefusalTime = latencyOf(c.mu.refusals[i])
	}
	if n := len(c.mu.waits); n > 0 {
		w := slices.Clone(c.mu.waits)
		slices.Sort(w)
		r.EstimatedWait = WaitStats{Seen: n, MedianMs: ms(quantile(w, 0.5)), MaxMs: ms(w[n-1])}
	}
	return &r
}

func latencyOf(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return Latency{
		Count: len(s),
		P50Ms: ms(quantile(s, 0.50)),
		P90Ms: ms(quantile(s, 0.90)),
		P99Ms: ms(quantile(s, 0.99)),
		MaxMs: ms(s[len(s)-1]),
	}
}

// quantile is the nearest-rank quantile of sorted, non-empty s: an observed
// value, never an interpolation between two.
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
