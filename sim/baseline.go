package sim

import "time"

// queueServer is a baseline: what a classic proxy or worker pool does in
// front of the upstream. Slots are served from one FIFO; depending on the
// kind the queue is unbounded, refuses at a depth threshold or a small
// bound, or drops what waited longer than a fixed queue timeout. Like such
// proxies it does not notice callers that left: their attempts stay queued
// and are executed — billed, and wasted — when their turn comes.
// Rejections are bare 503s without Retry-After.
type queueServer struct {
	e       *engine
	slots   int
	busy    int
	limit   int           // refuse when this many are queued; 0 is no limit
	timeout time.Duration // drop what waited this long; 0 is none
	q       ring
	waking  bool // a sweep is scheduled
}

func newQueueServer(e *engine) *queueServer {
	s := e.s
	b := s.sc.Baselines
	qs := &queueServer{e: e, slots: s.sc.Upstream.Concurrency}
	switch s.policy.queue {
	case queueDepth:
		qs.limit = b.DepthThreshold
		if qs.limit == 0 {
			qs.limit = 500
		}
	case queueTimeout:
		qs.timeout = b.QueueTimeout
		if qs.timeout == 0 {
			qs.timeout = 30 * time.Second
		}
	case queueSmall:
		qs.limit = b.SmallQueue
		if qs.limit == 0 {
			qs.limit = s.sc.Upstream.Concurrency
		}
	}
	return qs
}

func (qs *queueServer) arrive(now time.Duration, a *attempt) {
	if qs.busy < qs.slots && qs.q.len() == 0 {
		qs.busy++
		qs.e.grant(a)
		return
	}
	if qs.limit > 0 && qs.q.len() >= qs.limit {
		qs.e.refuse(a, refQueueFull, 0, false)
		return
	}
	a.state = stQueued
	a.enqAt = now
	qs.q.push(a)
	if qs.timeout > 0 && !qs.waking {
		qs.waking = true
		qs.e.wake(a.enqAt + qs.timeout)
	}
}

// leave does nothing: a classic queue learns that a caller left only when
// it writes the answer to a closed connection.
func (qs *queueServer) leave(time.Duration, *attempt) {}

func (qs *queueServer) done(now time.Duration, _ *attempt) {
	qs.busy--
	for qs.busy < qs.slots && qs.q.len() > 0 {
		a := qs.q.pop()
		qs.busy++
		qs.e.grant(a)
	}
}

// sweep drops the attempts that have waited the queue timeout. The queue
// is in arrival order, so they are at its head, and one pending wake-up (at
// the head's expiry) is enough.
func (qs *queueServer) sweep(now time.Duration) {
	qs.waking = false
	for qs.q.len() > 0 && qs.q.front().enqAt+qs.timeout <= now {
		qs.e.refuse(qs.q.pop(), refQueueTimeout, 0, false)
	}
	if qs.q.len() > 0 {
		qs.waking = true
		qs.e.wake(qs.q.front().enqAt + qs.timeout)
	}
}

// abandoned does nothing: the call runs on, as it does for every policy.
func (qs *queueServer) abandoned(time.Duration, *attempt) {}

func (qs *queueServer) end(time.Duration) error { return nil }

func (qs *queueServer) depth() int { return qs.q.len() }

func (qs *queueServer) estimatedWait(time.Duration) (time.Duration, bool) { return 0, false }

// ring is a FIFO of attempts in a growable circular buffer.
type ring struct {
	buf        []*attempt
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) push(a *attempt) {
	if r.size == len(r.buf) {
		n := max(64, 2*len(r.buf))
		buf := make([]*attempt, n)
		for i := range r.size {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = a
	r.size++
}

func (r *ring) front() *attempt { return r.buf[r.head] }

func (r *ring) pop() *attempt {
	a := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return a
}

// pace is never asked for: a queue paces nothing.
func (qs *queueServer) pace(time.Duration) {}
