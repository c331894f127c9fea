package idempotency

import (
	"container/list"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storableStatus says whether a provider's answer is kept: a 2xx, or a 4xx
// that is about the request itself (400, 404, 413, 422…), which the same
// request would get again. Not kept: 5xx and 429 (the provider's trouble
// or load, gone on a retry), 408 and 425 (about the moment), 409 (a
// conflict that may resolve), 401 and 403 (about the gateway's provider
// key, which an operator may fix), and 1xx/3xx.
func storableStatus(code int) bool {
	switch {
	case code >= 200 && code < 300:
		return true
	case code >= 400 && code < 500:
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout,
			http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
			return false
		}
		return true
	}
	return false
}

// tenantKey is a key within its tenant: tenant A's key never matches B's.
type tenantKey struct{ tenant, key string }

// entry is one key's call: in flight until done is closed, then either
// dropped from the map or stored with its answer.
type entry struct {
	key      tenantKey
	sum      [sha256.Size]byte // of the request: method, path, query, body
	stream   bool
	deadline time.Time     // the leader's: its stream has ended by then
	done     chan struct{} // closed when the entry leaves the in-flight state

	// Set under the store's lock before done is closed.
	answer  *answer // nil while in flight, and when dropped
	expires time.Time
	elem    *list.Element
	size    int64
}

// answer is a stored answer. Never modified once stored.
type answer struct {
	status int
	header http.Header // hop-by-hop headers already removed by the proxy
	body   []byte
	kept   bool // false: larger than max_entry_bytes, only its use is known
}

// Store keeps the entries: the calls in flight with a key, and the answers
// kept. Safe for concurrent use.
type Store struct {
	cfg     Config
	deps    Deps
	replays *prometheus.CounterVec // how: waited, stored
	mu      struct {
		sync.Mutex
		entries map[tenantKey]*entry
		stored  list.List // of *entry, oldest first: expiry and eviction order
		bytes   int64
	}
}

// New returns an empty store bounded by cfg (its zeros replaced by the
// defaults it documents). It registers sluice_idempotent_replays_total
// with reg, unless reg is nil. deps is how the store answers a request
// with an error of the gateway's own; its nil fields have defaults.
func New(cfg Config, reg prometheus.Registerer, deps Deps) *Store {
	s := &Store{cfg: cfg.withDefaults(), deps: deps.withDefaults()}
	s.mu.entries = map[tenantKey]*entry{}
	s.replays = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_idempotent_replays_total",
		Help: "Requests answered with another request's answer for the same Idempotency-Key, without an upstream call: how=waited (the first was in flight), stored (it had completed).",
	}, []string{"how"})
	if reg != nil {
		reg.MustRegister(s.replays)
	}
	return s
}

// keyState is what a lookup of a key found.
type keyState int

const (
	stateLead      keyState = iota // no entry: the caller makes the call
	stateWait                      // in flight: wait on entry.done
	stateStored                    // a stored answer
	stateMismatch                  // the key was used for another request
	stateStreaming                 // a stream in flight: 409
	stateNotKept                   // used, but its answer was too large to keep: 409
)

// begin looks k up for a request whose hash is sum, at now. When nobody
// holds the key, it records an entry in flight and returns a flight for the
// caller to complete or abandon.
func (s *Store) begin(k tenantKey, sum [sha256.Size]byte, stream bool, deadline, now time.Time) (keyState, *entry, *Flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	if e, ok := s.mu.entries[k]; ok {
		switch {
		case e.sum != sum:
			return stateMismatch, e, nil
		case e.answer == nil && e.stream:
			return stateStreaming, e, nil
		case e.answer == nil:
			return stateWait, e, nil
		case !e.answer.kept:
			return stateNotKept, e, nil
		}
		return stateStored, e, nil
	}
	e := &entry{key: k, sum: sum, stream: stream, deadline: deadline, done: make(chan struct{})}
	s.mu.entries[k] = e
	return stateLead, e, &Flight{s: s, e: e}
}

// expireLocked drops the stored entries whose window has passed: the list
// is in completion order and the window is the same for all, so they are
// at its front.
func (s *Store) expireLocked(now time.Time) {
	for el := s.mu.stored.Front(); el != nil; el = s.mu.stored.Front() {
		e := el.Value.(*entry)
		if now.Before(e.expires) {
			return
		}
		s.removeLocked(e)
	}
}

func (s *Store) removeLocked(e *entry) {
	s.mu.stored.Remove(e.elem)
	s.mu.bytes -= e.size
	if s.mu.entries[e.key] == e {
		delete(s.mu.entries, e.key)
	}
}

// Len reports the stored answers: how many, and the bytes they count
// against max_bytes (overhead included). Answers whose window has passed
// count until the next request with a key looks them up.
func (s *Store) Len() (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.stored.Len(), s.mu.bytes
}

// Flight is the leader's hold on its entry: it captures the answer as the
// proxy streams it, then stores it (Complete) or drops it (Abandon). Used
// by the leader's goroutine only, until it ends under the store's lock.
// Every method of a nil Flight (a request without a key) does nothing.
type Flight struct {
	s        *Store
	e        *entry
	status   int
	header   http.Header
	storable bool
	tooLarge bool
	body     []byte
	ended    bool // guarded by s.mu
}

// Respond records the provider's status and headers (the contract's
// X-Sluice-* included, hop-by-hop removed), before the body streams.
func (f *Flight) Respond(status int, h http.Header) {
	if f == nil {
		return
	}
	f.status, f.storable = status, storableStatus(status)
	f.header = h.Clone()
	// The replay writes the whole body with its own length; trailers are
	// not captured.
	f.header.Del("Content-Length")
	f.header.Del("Trailer")
}

// Capture copies bytes the caller was sent, up to max_entry_bytes. p is
// not retained.
func (f *Flight) Capture(p []byte) {
	if f == nil || !f.storable || f.tooLarge {
		return
	}
	if int64(len(f.body)+len(p)) > f.s.cfg.MaxEntryBytes {
		f.tooLarge, f.body = true, nil
		return
	}
	f.body = append(f.body, p...)
}

// WantsRest says whether the rest of the body is worth reading for the
// store after the caller stopped: the answer is one to keep, fits, and has
// not ended. Only the leader's goroutine reads ended before it is set.
func (f *Flight) WantsRest() bool {
	if f == nil || !f.storable || f.tooLarge {
		return false
	}
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return !f.ended
}

// Complete stores the answer whose body ended at now, or drops the entry
// if the answer is not one to keep. Waiters are woken either way. Once the
// flight has ended (Complete or Abandon), it does nothing.
func (f *Flight) Complete(now time.Time) {
	if f == nil {
		return
	}
	s := f.s
	s.mu.Lock()
	if f.ended {
		s.mu.Unlock()
		return
	}
	f.ended = true
	e := f.e
	if !f.storable {
		delete(s.mu.entries, e.key)
		s.mu.Unlock()
		close(e.done)
		return
	}
	a := &answer{status: f.status, header: f.header, kept: !f.tooLarge}
	e.size = overhead + int64(len(e.key.tenant)+len(e.key.key))
	if a.kept {
		a.body = f.body
		e.size += int64(len(a.body)) + headerSize(a.header)
	} else {
		a.header = nil
	}
	e.answer, e.expires = a, now.Add(s.cfg.Window.D())
	e.elem = s.mu.stored.PushBack(e)
	s.mu.bytes += e.size
	for s.mu.stored.Len() > s.cfg.MaxEntries || s.mu.bytes > s.cfg.MaxBytes {
		s.removeLocked(s.mu.stored.Front().Value.(*entry))
	}
	s.mu.Unlock()
	close(e.done)
}

// Abandon drops the entry unless it was completed: the call was refused,
// failed or cut short, and the next request with the key makes it again.
// Safe to call more than once, and after Complete.
func (f *Flight) Abandon() {
	if f == nil {
		return
	}
	f.s.mu.Lock()
	if f.ended {
		f.s.mu.Unlock()
		return
	}
	f.ended = true
	delete(f.s.mu.entries, f.e.key)
	f.s.mu.Unlock()
	close(f.e.done)
}

func headerSize(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}
