package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"iter"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/workload"
)

// Run generates the load described by cfg and returns what the callers
// experienced. It returns an error only for an invalid cfg (a *ConfigError);
// failures of the target are results, not errors.
//
// Run is bounded: arrivals stop after cfg.Duration or cfg.MaxRequests (or
// at the end of cfg.Trace), and once the last arrival's deadline horizon
// (the last arrival time plus the longest deadline of a class or a trace
// call) has passed, every request still in flight is cancelled and
// reported as run_ended — its caller had stopped listening anyway.
// Cancelling ctx stops arrivals and cancels everything in flight at once;
// Run then returns the partial report with Interrupted set. No goroutine
// started by Run outlives it.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	return run(ctx, cfg, env{clock: wallClock{}})
}

// env is what tests inject into a run.
type env struct {
	clock clock
	// arrivalsDone, if set, is called once the arrival loop has stopped and
	// before the runner waits for in-flight requests.
	arrivalsDone func()
}

// runner is the state of one Run.
type runner struct {
	cfg    *resolved
	clk    clock
	client *http.Client
	rt     http.RoundTripper // the policy's transport
	runCtx context.Context
	col    *collector

	wg       sync.WaitGroup
	inFlight struct {
		sync.Mutex
		n int
	}
}

// howEnded says why the arrival loop stopped.
type howEnded int

const (
	endedByDuration howEnded = iota
	endedByCount
	endedByCancel
	endedByTrace // every call of the trace was sent
)

func run(ctx context.Context, cfg Config, e env) (*Report, error) {
	rc, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	client := rc.Client
	if client == nil {
		tr := defaultTransport(rc.MaxInFlight)
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)

	rn := &runner{cfg: rc, clk: e.clock, client: client, runCtx: runCtx, col: newCollector(rc)}
	rn.rt, err = rc.Policy.Transport(&attemptTransport{rn: rn})
	if err != nil {
		return nil, &ConfigError{Field: "Policy", Problem: err.Error()}
	}
	if rn.rt == nil {
		return nil, &ConfigError{Field: "Policy", Problem: rc.Policy.Name() + ": Transport returned nil"}
	}
	start := rn.clk.Now()
	rn.col.start = start
	lastAt, ended := rn.generate(start)
	if e.arrivalsDone != nil {
		e.arrivalsDone()
	}
	done := make(chan struct{})
	go func() {
		rn.wg.Wait()
		close(done)
	}()
	// Past this point every request's deadline has passed, so nothing still
	// in flight can produce an answer anyone wants.
	horizon := start.Add(lastAt + rc.maxDeadline).Sub(rn.clk.Now())
	hardCtx, cancelHard := rn.clk.WithTimeout(runCtx, max(horizon, 0))
	select {
	case <-done:
	case <-hardCtx.Done():
		cancelRun(errRunEnded)
		<-done
	}
	cancelHard()

	wall := rn.clk.Now().Sub(start)
	// Goodput is measured over the arrival window when there is one, so the
	// drain after arrivals stop cannot lift it above what the server
	// sustained; a run bounded by count or cut short has no such window,
	// and is measured over its whole wall time. A trace played to its end
	// arrived over its last arrival's offset (unless all its calls came
	// at once).
	window := wall
	switch {
	case ended == endedByDuration:
		window = rc.Duration
	case ended == endedByTrace && lastAt > 0:
		window = lastAt
	}
	interrupted := ctx.Err() != nil
	return rn.col.report(wall, window, interrupted), nil
}

// defaultTransport is tuned for an open-loop generator: keep as many idle
// connections per host as there can be attempts in flight, so that steady
// load reuses connections instead of paying a handshake per request.
func defaultTransport(maxInFlight int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = maxInFlight
	tr.MaxIdleConnsPerHost = maxInFlight
	return tr
}

// generate runs the arrival loop in the calling goroutine and returns the
// offset of the last arrival and why the loop stopped. It never waits for
// a request: that is what makes the load open-loop.
func (rn *runner) generate(start time.Time) (lastAt time.Duration, ended howEnded) {
	cfg := rn.cfg
	arrivals, end := Arrivals(cfg.Seed, cfg.Rate, cfg.Classes), endedByDuration // infinite for a valid config
	if cfg.Trace != nil {
		arrivals, end = rn.traceArrivals(), endedByTrace
	}
	for a := range arrivals {
		if cfg.Duration > 0 && a.At >= cfg.Duration {
			return lastAt, endedByDuration
		}
		// Sleep to the scheduled offset from start rather than for the
		// inter-arrival gap, so that scheduling delays do not accumulate;
		// when the loop is behind, it sends at once to catch up.
		if err := rn.clk.Sleep(rn.runCtx, start.Add(a.At).Sub(rn.clk.Now())); err != nil {
			return lastAt, endedByCancel
		}
		lastAt = a.At
		rn.dispatch(start, a)
		if cfg.MaxRequests > 0 && a.Seq+1 >= cfg.MaxRequests {
			return lastAt, endedByCount
		}
	}
	return lastAt, end
}

// traceArrivals is the trace's schedule: call i is arrival i, at its own
// offset, of its service's class.
func (rn *runner) traceArrivals() iter.Seq[Arrival] {
	return func(yield func(Arrival) bool) {
		for i, c := range rn.cfg.Trace.Calls {
			if !yield(Arrival{Seq: i, At: c.At, Class: rn.cfg.traceClass[c.Service]}) {
				return
			}
		}
	}
}

// dispatch starts one logical request. The in-flight slot for its first
// attempt is taken here, synchronously, so that overflow is decided at the
// arrival instant rather than whenever a goroutine gets scheduled.
func (rn *runner) dispatch(start time.Time, a Arrival) {
	cl := rn.cfg.Classes[a.Class]
	arrival := start.Add(a.At)
	var tc *workload.Call
	deadline := cl.Deadline
	if rn.cfg.Trace != nil {
		tc = &rn.cfg.Trace.Calls[a.Seq]
		deadline = cmp.Or(tc.Deadline, deadline)
	}
	r := &Request{
		Seq:            a.Seq,
		Class:          cl.Name,
		Arrival:        arrival,
		Deadline:       arrival.Add(deadline),
		AttemptTimeout: cmp.Or(cl.AttemptTimeout, rn.cfg.AttemptTimeout),
		MaxAttempts:    rn.cfg.MaxAttempts,
	}
	if r.AttemptTimeout == 0 {
		// Half of this request's own deadline: a trace call's caller
		// configured its timeout for the wait it would accept.
		r.AttemptTimeout = deadline / 2
	}
	c := &call{rn: rn, r: r, class: a.Class, trace: tc}
	if !rn.acquire() {
		now := rn.clk.Now()
		c.mu.events = []*Attempt{{Reason: ReasonClientOverflow, Start: now, End: now}}
		rn.col.record(c, false, time.Time{}, ErrClientOverflow)
		return
	}
	c.mu.preSlot = true
	rn.wg.Add(1)
	go func() {
		defer rn.wg.Done()
		rn.serve(c)
	}()
}

// serve sends one logical request through the policy and reads the answer to
// its last byte.
func (rn *runner) serve(c *call) {
	ctx := context.WithValue(rn.runCtx, callKey{}, c)
	cl := &rn.cfg.Classes[c.class]
	var body []byte
	switch {
	case c.trace != nil:
		body = rn.cfg.traceBody.build(c.trace.PromptTokens*CharsPerToken, cmp.Or(c.trace.MaxTokens, cl.MaxTokens), c.r.Seq)
	case rn.cfg.SamePrompt:
		body = rn.cfg.bodies[c.class]
	default:
		body = requestBody(rn.cfg.bodies[c.class], c.r.Seq)
	}
	// A bytes.Reader gives the request a GetBody, so every attempt sends
	// these same bytes.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rn.cfg.endpoint, bytes.NewReader(body))
	if err != nil {
		// The endpoint was validated; should this still fail, the request
		// is reported as never sent rather than crashing a long run.
		c.close()
		rn.col.record(c, false, time.Time{}, err)
		return
	}
	for k, vs := range rn.cfg.Headers {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Content-Type", "application/json")
	if rn.cfg.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if cl.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cl.APIKey)
	}
	req.Header.Set(contract.HeaderPriority, cl.Priority)
	if c.trace != nil {
		// At least 1: an answer has a token, and the mock refuses 0 with a
		// 400, which would turn a trace's empty answers into failures.
		req.Header.Set(HeaderMockOutputTokens, strconv.Itoa(max(c.trace.OutputTokens, 1)))
	}

	resp, err := rn.rt.RoundTrip(req)
	answered := false
	var end time.Time
	if err == nil {
		_, rerr := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		end = rn.clk.Now()
		answered = rerr == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
	}
	c.close()
	rn.col.record(c, answered, end, err)
}

// acquire takes an in-flight slot if one is free. It never waits: a load
// generator that queued its own requests would stop being open-loop.
func (rn *runner) acquire() bool {
	rn.inFlight.Lock()
	defer rn.inFlight.Unlock()
	if rn.inFlight.n >= rn.cfg.MaxInFlight {
		return false
	}
	rn.inFlight.n++
	return true
}

func (rn *runner) release() {
	rn.inFlight.Lock()
	rn.inFlight.n--
	rn.inFlight.Unlock()
}

// requestBody is the body of logical request seq: the configured one with
// "seed": seq added, so that no two logical requests send the same bytes
// while the attempts of one do. Real traffic is mostly distinct prompts; a
// gateway that recognises a retry by its bytes (sluice's recognise stage)
// would otherwise take every request after a refusal for the refused
// one's retry. Config.SamePrompt leaves the seed out, for the traffic where
// that is exactly the question.
func requestBody(body []byte, seq int) []byte {
	b := make([]byte, 0, len(body)+24)
	b = append(b, body[:len(body)-1]...) // without its closing brace
	b = append(b, `,"seed":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	return append(b, '}')
}
