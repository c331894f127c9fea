package sim

import "time"

// eventKind is what happens at an event.
type eventKind uint8

const (
	evArrive  eventKind = iota + 1 // source i's next logical request arrives
	evSend                         // call c sends its next attempt
	evTimeout                      // the caller of attempt a stops waiting for it
	evDone                         // attempt a's upstream call ends
	evSweep                        // the queue-timeout baseline drops what waited too long
	evTick                         // a time-series sample
	evPace                         // calls a pool's rate limits held back are due (gateServer.pace)
)

// event is one scheduled happening. Events that become moot (the timeout of
// an attempt that was answered) are not removed: they carry the attempt's
// generation and are skipped when they fire, which is cheaper than keeping
// a heap index in every attempt.
type event struct {
	at   time.Duration
	seq  uint64 // ties at the same instant fire in scheduling order
	a    *attempt
	c    *call
	gen  uint32
	i    int32
	kind eventKind
}

// eventHeap is a binary min-heap of events by (at, seq), written out rather
// than through container/heap so that no event is boxed in an interface:
// the simulator pushes and pops several events per request.
type eventHeap struct {
	h   []event
	seq uint64
}

func (q *eventHeap) len() int { return len(q.h) }

func less(a, b *event) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (q *eventHeap) push(e event) {
	e.seq = q.seq
	q.seq++
	q.h = append(q.h, e)
	h := q.h
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// peek returns the time of the next event; the heap must not be empty.
func (q *eventHeap) peek() time.Duration { return q.h[0].at }

func (q *eventHeap) pop() event {
	h := q.h
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{} // drop the pointers for the collector
	h = h[:n]
	q.h = h
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && less(&h[r], &h[l]) {
			m = r
		}
		if !less(&h[m], &h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top
}
