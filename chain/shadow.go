package chain

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// shadow is an observing pool's picture of the pool as an enforcing chain
// would have run it. In observe mode every call its gate would take is
// sent at once and holds a slot of the gate (admission Observe), beyond
// the concurrency if need be; those past the concurrency stand for the
// queue it would have had. But the calls' own durations are no measure of
// that queue: the provider, sent everything, queues them itself, and a
// call that would have waited a second in the gate and then run for one
// now runs for two — a service-time sample twice the provider's, and an
// estimate that would refuse far more than an enforcing gate does.
//
// So the picture keeps the pool's slots itself: the first concurrency of
// the calls holding one are running, the rest wait, in order of arrival.
// A call that completes (whatever it held: a call its gate would have
// refused is let through without a slot, and the provider serves it all
// the same) ends one running slot — its own if it is running, else the
// oldest — with the time since that slot started running as its service
// time; the first waiting slot then starts running. Slots end at the rate
// the provider completes calls, and service times are what the provider
// takes for a call while it serves as many as the gate would let it:
// the estimates, and so the decisions, of the gate that enforces the
// policy. A call that fails or whose caller leaves ends only its own
// slot, running or waiting, as it would leave an enforcing gate's slot or
// queue; a failure is no measure of the provider's pace.
//
// Every slot taken is given back. A slot can outlive its call (a call
// that completes while its slot waits ends another), so the picture holds
// no more slots than it has calls in flight: past that, the slots of
// calls already completed end, unused — at the latest when the last
// observed call completes, which a reload to enforce mode may make the
// last for good.
type shadow struct {
	mu      sync.Mutex
	running []*shadowSlot
	waiting []*shadowSlot
	calls   int // observed calls in flight, with a slot or without
}

// shadowSlot is one observed call's slot of the gate, and how to give it
// back: release books o with the gate (with the outcome's service time).
type shadowSlot struct {
	start   time.Time // when it started running in the picture
	done    bool      // its call has completed
	release func(now time.Time, o admission.Outcome)
}

// take counts an observed call sent at now and adds its slot (nil: its
// gate would have refused it), running if fewer than capacity are.
func (s *shadow) take(now time.Time, sl *shadowSlot, capacity int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if sl == nil {
		return
	}
	if len(s.running) < capacity {
		sl.start = now
		s.running = append(s.running, sl)
		return
	}
	s.waiting = append(s.waiting, sl)
}

// end books the completion at now of a call that held own (nil: none)
// with result, and gives back the slots it ends.
func (s *shadow) end(now time.Time, own *shadowSlot, result admission.Result, capacity int) {
	s.mu.Lock()
	s.calls--
	if own != nil {
		own.done = true
	}
	var ended *shadowSlot
	i := slices.Index(s.running, own)
	switch {
	case own != nil && i >= 0:
		ended = own
		s.running = slices.Delete(s.running, i, i+1)
	case result != admission.Success:
		// Its own waiting slot, as a call that leaves a queue; nothing
		// for a call without one.
		if j := slices.Index(s.waiting, own); own != nil && j >= 0 {
			s.waiting = slices.Delete(s.waiting, j, j+1)
			s.mu.Unlock()
			// Never started in the picture: no service time to book.
			own.release(now, admission.Outcome{Result: admission.Unused})
			s.settle(now, capacity)
			return
		}
	case len(s.running) > 0:
		ended, result = s.running[0], admission.Success
		s.running = slices.Delete(s.running, 0, 1)
	}
	s.mu.Unlock()
	if ended != nil {
		ended.release(now, admission.Outcome{Result: result, ServiceTime: max(now.Sub(ended.start), time.Nanosecond)})
	}
	s.settle(now, capacity)
}

// settle ends, unused, the slots of completed calls while more are held
// than calls are in flight, oldest first, then starts waiting slots while
// fewer than capacity run.
func (s *shadow) settle(now time.Time, capacity int) {
	s.mu.Lock()
	var stale []*shadowSlot
	for _, list := range []*[]*shadowSlot{&s.running, &s.waiting} {
		for i := 0; i < len(*list) && len(s.running)+len(s.waiting) > s.calls; {
			if sl := (*list)[i]; sl.done {
				*list = slices.Delete(*list, i, i+1)
				stale = append(stale, sl)
				continue
			}
			i++
		}
	}
	n := min(max(capacity-len(s.running), 0), len(s.waiting))
	for _, sl := range s.waiting[:n] {
		sl.start = now
	}
	s.running = append(s.running, s.waiting[:n]...)
	s.waiting = slices.Delete(s.waiting, 0, n)
	s.mu.Unlock()
	for _, sl := range stale {
		sl.release(now, admission.Outcome{Result: admission.Unused})
	}
}

// held is how many slots the picture holds, running and waiting.
func (s *shadow) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running) + len(s.waiting)
}
