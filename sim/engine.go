package sim

import (
	"container/heap"
	"context"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
)

// call is one logical request: a caller that wants one answer by its
// deadline and may send several attempts for it.
type call struct {
	seq      uint64 // identifies the request across policies (source, count)
	prompt   uint64 // what it asks, when a replay script says (see gateServer.request); zero: its own
	src      *source
	arrival  time.Duration
	deadline time.Duration
	// in and out are its prompt's and its answer's tokens, maxTokens the
	// max_tokens it is sent with: its trace's, or its source's.
	in, out   int32
	maxTokens int32
	sent      int32    // attempts sent so far
	live      int32    // attempts still queued or in service
	cur       *attempt // the attempt the caller is waiting on; nil between attempts
	done      bool     // the caller has its answer or has given up
}

// attempt is one try of a call: queued, in service, or ended. An attempt
// whose caller stopped waiting (gone) stays where it is — a classic queue
// does not notice, and an upstream call keeps generating — and is wasted
// if it is ever served.
type attempt struct {
	c       *call
	n       int32  // attempt number, 0 for the first
	gen     uint32 // bumped on reuse, to recognise stale events
	state   attemptState
	gone    bool
	sentAt  time.Duration
	leaveAt time.Duration // when the caller gives up on this attempt
	enqAt   time.Duration
	start   time.Duration
	end     time.Duration // when its upstream call ends, once started
	slot    any           // the policy's own handle (a ticket)
	// model is the model called: the source's, or the rung below it when
	// the spend limiter degraded the attempt; cost is what a call to it
	// costs.
	model    *modelInfo
	cost     float64
	degraded bool
	replica  int32 // the gateway replica it was sent to (replicas.go)
	// inflight is the calls at the upstream once it was sent, itself
	// included, its expected work at the gate and the learner's window
	// that counted it (the policy learned's controller reads them).
	inflight int32
	units    float64
	window   uint64
}

type attemptState uint8

const (
	stIdle attemptState = iota
	stQueued
	stServing
	stEnded
)

// server is a policy under test, seen from the engine. It gets attempts
// and tells the engine what became of them through engine.grant (start the
// upstream call now), engine.refuse (answer with a rejection) and
// engine.withdrawn (the attempt left the queue because its caller left).
// None of those call back into the server, so a server never re-enters
// itself.
type server interface {
	// arrive offers an attempt. The attempt is granted, refused or queued
	// (the server sets a.state = stQueued) before it returns.
	arrive(now time.Duration, a *attempt)
	// leave tells the server that the caller of a queued attempt left.
	leave(now time.Duration, a *attempt)
	// done tells the server that a granted attempt's upstream call ended,
	// freeing its slot.
	done(now time.Duration, a *attempt)
	// abandoned tells the server that the caller of a granted attempt left
	// while its upstream call runs on (and keeps its slot until done).
	abandoned(now time.Duration, a *attempt)
	// depth is the number of queued attempts.
	depth() int
	// estimatedWait is the wait a first attempt of the first traffic
	// source would be told now, and false when the policy estimates none.
	estimatedWait(now time.Duration) (time.Duration, bool)
	// sweep is called at the times the server asked for with engine.wake.
	sweep(now time.Duration)
	// pace is called at the times the server asked for with
	// engine.wakePaced: calls its pools' rate limits held back are due.
	pace(now time.Duration)
	// end is called when the run stops; an error is a broken invariant.
	end(now time.Duration) error
}

// engine is the discrete-event loop of one run. It is single-threaded and
// owns every call, attempt and event; virtual time advances from event to
// event and nothing ever sleeps.
type engine struct {
	s       *setup
	srv     server
	q       eventHeap
	now     time.Duration
	m       *metrics
	callers []*caller // per tenant, for client callers
	freeC   []*call
	freeA   []*attempt
	err     error
	// provider holds, per model with slots of its own at the provider, the
	// times its calls in service end (see grant).
	provider map[*modelInfo]*endHeap
	// shared holds, for the policy learned, the times the calls in
	// service at the upstream's own slots end (upstream.concurrency, which
	// that policy is not told), and waiting the times the calls waiting
	// for one begin (see grant).
	shared, waiting *endHeap
	// heard, when set (by tests that replay a script), is told what the
	// caller of an attempt learnt of it, when it learnt it: an answer (why
	// is then meaningless), a refusal, or refTimeout when it stopped
	// waiting.
	heard func(a *attempt, answered bool, why refusal)
}

// Run simulates one policy at one load factor of the scenario.
func Run(ctx context.Context, sc *scenario.Scenario, policy string, load float64, opt Options) (*Result, error) {
	s, err := newSetup(sc, policy, load, opt)
	if err != nil {
		return nil, err
	}
	return s.run(ctx)
}

func (s *setup) run(ctx context.Context) (*Result, error) {
	e, err := s.newEngine()
	if err != nil {
		return nil, err
	}
	for i, src := range s.sources {
		if at, ok := src.next(); ok {
			e.q.push(event{at: at, kind: evArrive, i: int32(i)})
		}
	}
	return e.loop(ctx)
}

// newEngine returns an engine for s with its callers and policy, and no
// events yet.
func (s *setup) newEngine() (*engine, error) {
	e := &engine{s: s, m: newMetrics(s)}
	// A tenant's client allows as many attempts as the most permissive of
	// its client sources (zero, the client's default, when it has none);
	// failed holds each source to its own.
	maxAttempts := make([]int, len(s.tenants))
	for _, src := range s.sources {
		if src.client == clientSluice {
			maxAttempts[src.tenant] = max(maxAttempts[src.tenant], src.maxAttempts)
		}
	}
	for _, n := range maxAttempts {
		c, err := newCaller(n)
		if err != nil {
			return nil, err
		}
		e.callers = append(e.callers, c)
	}
	srv, err := newServer(e)
	if err != nil {
		return nil, err
	}
	e.srv = srv
	return e, nil
}

// loop runs the events queued so far, and those they make, to the end of
// the run.
func (e *engine) loop(ctx context.Context) (*Result, error) {
	s := e.s
	if s.trace {
		e.q.push(event{at: 0, kind: evTick})
	}
	const checkEvery = 1 << 16
	for n := 0; e.q.len() > 0 && e.err == nil; n++ {
		if n%checkEvery == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if e.q.peek() > s.end {
			break
		}
		ev := e.q.pop()
		e.now = ev.at
		e.m.events++
		switch ev.kind {
		case evArrive:
			e.arrive(int(ev.i))
		case evSend:
			e.send(ev.c)
		case evTimeout:
			e.timeout(ev.a, ev.gen)
		case evDone:
			e.finish(ev.a)
		case evSweep:
			e.srv.sweep(e.now)
		case evTick:
			e.tick()
		case evPace:
			e.srv.pace(e.now)
		}
	}
	if e.err == nil {
		e.err = e.srv.end(e.now)
	}
	if e.err != nil {
		return nil, e.err
	}
	return e.m.result(e), nil
}

// fail stops the run with an error: a decision the engine cannot carry out
// (such as an admission error) is a bug to report, not to paper over.
func (e *engine) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// wake asks for a sweep call at the given time.
func (e *engine) wake(at time.Duration) { e.q.push(event{at: at, kind: evSweep}) }

// wakePaced asks for a pace call at the given time.
func (e *engine) wakePaced(at time.Duration) { e.q.push(event{at: at, kind: evPace}) }

func (e *engine) arrive(i int) {
	src := e.s.sources[i]
	if at, ok := src.next(); ok {
		e.q.push(event{at: at, kind: evArrive, i: int32(i)})
	}
	c := e.newCall()
	c.seq = uint64(i)<<40 | src.count
	c.src = src
	c.arrival = e.now
	c.deadline = e.now + src.deadline
	c.sized(src)
	if src.calls != nil {
		tc := &src.calls[src.count]
		c.in, c.out = int32(tc.PromptTokens), int32(tc.OutputTokens)
		if tc.MaxTokens > 0 {
			c.maxTokens = int32(tc.MaxTokens)
		}
		if tc.Deadline > 0 {
			c.deadline = e.now + tc.Deadline
		}
	}
	src.count++
	e.m.arrival(c)
	e.send(c)
}

// sized gives c its source's sizes: the tokens each of its calls reports
// and the max_tokens it sends (a trace's call then has its own).
func (c *call) sized(src *source) {
	c.in, c.out, c.maxTokens = int32(src.usage.Input), int32(src.usage.Output), int32(src.maxTokens)
}

// send sends the call's next attempt.
func (e *engine) send(c *call) {
	src := c.src
	leaveAt := c.deadline
	if src.client == clientNaive {
		leaveAt = e.now + src.attemptTimeout
	}
	if src.client == clientSluice {
		if !e.callers[src.tenant].allow(e, c) {
			e.end(c)
			e.maybeFreeCall(c)
			return
		}
	}
	a := e.newAttempt()
	a.c = c
	a.n = c.sent
	a.sentAt = e.now
	a.leaveAt = leaveAt
	a.model = src.model
	a.cost = src.cost
	c.sent++
	c.live++
	c.cur = a
	e.m.attempt(c)
	gen := a.gen
	e.srv.arrive(e.now, a)
	if d := e.srv.depth(); d > e.m.maxDepth {
		e.m.maxDepth = d
	}
	// The caller's timeout matters only while the attempt waits, or when
	// its call will still be running when the caller stops listening.
	if a.gen == gen && (a.state == stQueued || (a.state == stServing && a.end > a.leaveAt)) {
		e.q.push(event{at: a.leaveAt, kind: evTimeout, a: a, gen: gen})
	}
}

// grant starts a's upstream call now. It is billed from this moment. A
// model with slots of its own at the provider (upstream.models.<name>.
// concurrency) serves its calls first come first served: a call sent while
// they are all busy waits for the first to free before its service
// begins, and that wait is part of the time the policy sees it take.
func (e *engine) grant(a *attempt) {
	c := a.c
	a.state = stServing
	a.start = e.now
	begin := e.now
	var busy *endHeap
	if m := a.model; m.slots > 0 {
		if e.provider == nil {
			e.provider = map[*modelInfo]*endHeap{}
		}
		busy = e.provider[m]
		if busy == nil {
			busy = &endHeap{}
			e.provider[m] = busy
		}
		if busy.Len() >= m.slots {
			begin = max(begin, heap.Pop(busy).(time.Duration))
		}
	} else if e.s.policy.gate.learn {
		// The upstream's own slots, which the policy is not told.
		if e.shared == nil {
			e.shared, e.waiting = &endHeap{}, &endHeap{}
		}
		busy = e.shared
		if busy.Len() >= e.s.sc.Upstream.Concurrency {
			begin = max(begin, heap.Pop(busy).(time.Duration))
		}
		for e.waiting.Len() > 0 && (*e.waiting)[0] <= e.now {
			heap.Pop(e.waiting)
		}
		if begin > e.now {
			heap.Push(e.waiting, begin)
		}
		e.m.providerQueue(e.now, e.waiting.Len())
	}
	a.end = begin + e.s.sampler.draw(uniform(e.s.seed, saltService, c.seq, uint64(a.n)), begin, a.model.factorFor(begin), int(c.in), int(c.out))
	if busy != nil {
		heap.Push(busy, a.end)
	}
	e.m.billed(a)
	e.q.push(event{at: a.end, kind: evDone, a: a, gen: a.gen})
	// A queued attempt already has its timeout event; one granted at
	// arrival gets it in send.
}

// refuse answers a with a rejection: reason, and a Retry-After when hasRA.
func (e *engine) refuse(a *attempt, why refusal, retryAfter time.Duration, hasRA bool) {
	c := a.c
	a.state = stEnded
	c.live--
	heard := !a.gone && c.cur == a && !c.done
	e.m.refused(a, why, e.now, heard)
	if heard {
		c.cur = nil
		if e.heard != nil {
			e.heard(a, false, why)
		}
		e.failed(c, a, why, retryAfter, hasRA)
	}
	e.freeAttempt(a)
	e.maybeFreeCall(c)
}

// withdrawn ends a queued attempt that the server removed because its
// caller left.
func (e *engine) withdrawn(a *attempt) {
	c := a.c
	a.state = stEnded
	c.live--
	e.m.withdrawn++
	e.freeAttempt(a)
	e.maybeFreeCall(c)
}

// finish ends a's upstream call: the slot frees, and the answer reaches its
// caller if the caller is still listening.
func (e *engine) finish(a *attempt) {
	c := a.c
	a.state = stEnded
	c.live--
	useful := false
	if !a.gone && c.cur == a && !c.done {
		c.cur = nil
		useful = e.now <= c.deadline
		if e.heard != nil {
			e.heard(a, true, 0)
		}
		e.m.answered(c, a, e.now, useful)
		if src := c.src; src.client == clientSluice {
			e.callers[src.tenant].observe(e, true)
		}
		e.end(c)
	}
	if !useful {
		e.m.wasted(a, e.now)
	}
	e.srv.done(e.now, a)
	e.freeAttempt(a)
	e.maybeFreeCall(c)
}

// timeout: a's caller stops waiting for it.
func (e *engine) timeout(a *attempt, gen uint32) {
	if a.gen != gen || a.state == stEnded || (a.state == stServing && a.end <= e.now) {
		return // answered, refused, or its answer is due this very instant
	}
	c := a.c
	a.gone = true
	if c.cur == a && !c.done {
		c.cur = nil
		e.m.timedOut(c)
		if e.heard != nil {
			e.heard(a, false, refTimeout)
		}
		e.failed(c, a, refTimeout, 0, false)
	}
	switch a.state {
	case stQueued:
		e.srv.leave(e.now, a) // may withdraw (and free) a
	case stServing:
		e.srv.abandoned(e.now, a)
	}
	e.maybeFreeCall(c)
}

// failed decides what the caller of c does after attempt a failed.
func (e *engine) failed(c *call, a *attempt, why refusal, retryAfter time.Duration, hasRA bool) {
	src := c.src
	if int(c.sent) >= src.maxAttempts {
		e.end(c)
		return
	}
	var wait time.Duration
	switch src.client {
	case clientNaive:
		// Every failure is retried at once, whatever the server said.
	case clientPolite:
		wait = retryAfter
		if !hasRA {
			wait = politeBackoff(int(a.n))
		}
		if e.now+wait >= c.deadline {
			e.end(c)
			return
		}
	case clientSluice:
		cl := e.callers[src.tenant]
		if why != refTimeout {
			cl.observe(e, false)
		}
		var ok bool
		wait, ok = cl.retry(e, c, a, why, retryAfter, hasRA)
		if !ok {
			e.end(c)
			return
		}
	}
	e.q.push(event{at: e.now + wait, kind: evSend, c: c})
}

// end records the call's outcome. The handler that ends a call frees it
// (maybeFreeCall) once it has no further use for it.
func (e *engine) end(c *call) {
	c.done = true
}

func (e *engine) tick() {
	e.m.sample(e)
	if next := e.now + e.s.bucket; next <= e.s.end {
		e.q.push(event{at: next, kind: evTick})
	}
}

// Calls and attempts are recycled: a million-request run would otherwise
// allocate millions of small objects for the collector to chase.

func (e *engine) newCall() *call {
	if n := len(e.freeC); n > 0 {
		c := e.freeC[n-1]
		e.freeC = e.freeC[:n-1]
		return c
	}
	return &call{}
}

func (e *engine) maybeFreeCall(c *call) {
	if c.done && c.live == 0 && c.src != nil {
		*c = call{}
		e.freeC = append(e.freeC, c)
	}
}

func (e *engine) newAttempt() *attempt {
	if n := len(e.freeA); n > 0 {
		a := e.freeA[n-1]
		e.freeA = e.freeA[:n-1]
		return a
	}
	return &attempt{}
}

func (e *engine) freeAttempt(a *attempt) {
	gen := a.gen + 1
	*a = attempt{gen: gen}
	e.freeA = append(e.freeA, a)
}

// endHeap is a min-heap of the times calls in service end.
type endHeap []time.Duration

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// politeBackoff is loadgen.Polite's wait when the server gave no
// Retry-After: 100ms doubling per retry, capped at 5s, without jitter.
func politeBackoff(n int) time.Duration {
	const base, ceiling = 100 * time.Millisecond, 5 * time.Second
	w := base << min(n, 16)
	if w > ceiling || w <= 0 {
		w = ceiling
	}
	return w
}
