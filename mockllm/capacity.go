package mockllm

import (
	"context"
	"errors"
	"time"
)

// The slots and their FIFO follow x/sync/semaphore: waiters sit in a list
// under the server's mutex, each with a channel closed to wake it. A freed
// slot is handed straight to the head of the queue, so the in-service count
// never dips and a newcomer can never overtake a waiter.

var (
	errBusy   = errors.New("mockllm: all slots busy")
	errGone   = errors.New("mockllm: client went away before its request started")
	errClosed = errors.New("mockllm: server closed")
)

// waiter is one request parked in the FIFO.
type waiter struct {
	ready   chan struct{} // closed after granted is set, to wake the waiter
	granted bool          // guarded by Server.mu: a slot was handed over
}

// acquire takes a slot for a request. In ModeQueue it waits in the FIFO as
// long as it takes; in Mode429 it fails with errBusy at once. It returns
// how long the request waited.
//
// A request whose client has gone by the time it would start is not
// started: it is counted Abandoned and never billed, even when a slot was
// handed to it at the very moment its client left (the slot moves on to the
// next waiter). That is the rule that makes "abandoned in the queue" cost
// nothing, as it does at a real provider.
func (s *Server) acquire(ctx context.Context) (time.Duration, error) {
	s.mu.Lock()
	switch {
	case s.mu.closed:
		s.mu.Unlock()
		return 0, errClosed
	case ctx.Err() != nil:
		s.mu.stats.Abandoned++
		s.mu.Unlock()
		return 0, errGone
	case s.cfg.Slots == 0 || (s.mu.inService < s.cfg.Slots && s.mu.queue.Len() == 0):
		s.mu.inService++
		s.mu.stats.Started++
		s.notePeakLocked()
		s.mu.Unlock()
		return 0, nil
	case s.cfg.Mode == Mode429:
		s.mu.stats.Rejected429++
		s.mu.Unlock()
		return 0, errBusy
	}
	w := &waiter{ready: make(chan struct{})}
	elem := s.mu.queue.PushBack(w)
	s.notePeakLocked()
	s.mu.Unlock()

	start := time.Now()
	select {
	case <-w.ready:
	case <-ctx.Done():
	case <-s.done:
	}
	waited := time.Since(start)

	s.mu.Lock()
	if !w.granted {
		s.mu.queue.Remove(elem)
	}
	var err error
	switch {
	case s.mu.closed:
		s.mu.stats.Dropped++
		err = errClosed
	case ctx.Err() != nil:
		s.mu.stats.Abandoned++
		err = errGone
	default:
		s.mu.stats.Started++
		s.mu.Unlock()
		return waited, nil
	}
	var next *waiter
	if w.granted {
		next = s.releaseLocked()
	}
	s.mu.Unlock()
	if next != nil {
		close(next.ready)
	}
	return waited, err
}

// release gives a slot back, handing it to the head of the FIFO if any.
func (s *Server) release() {
	s.mu.Lock()
	next := s.releaseLocked()
	s.mu.Unlock()
	if next != nil {
		close(next.ready)
	}
}

// releaseLocked frees a slot or transfers it to the first waiter, whom the
// caller must wake (after unlocking) by closing the returned waiter's
// ready channel. Once the server is closed, slots are not handed over: every
// waiter is leaving anyway.
func (s *Server) releaseLocked() *waiter {
	if !s.mu.closed {
		if front := s.mu.queue.Front(); front != nil {
			w := s.mu.queue.Remove(front).(*waiter)
			w.granted = true
			return w
		}
	}
	s.mu.inService--
	return nil
}
