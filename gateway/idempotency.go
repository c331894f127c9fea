package gateway

import (
	"container/list"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/contract"
)

// Idempotency-Key: requests of one tenant with the same key within the
// window make one upstream call and all get its answer (contract's
// HeaderIdempotencyKey). A retry that raced its own timeout is then billed
// once, not twice.
//
// The first request with a key leads: it goes through the chain and to the
// provider, and the answer is captured as it streams to its caller (a tee in
// releasingBody: nothing is held back from the caller). A duplicate that
// arrives while the leader is in flight waits for it, bounded by its own
// deadline and context, and is answered from the capture; one that arrives
// later is answered from the store. Duplicates never enter the chain: they
// cost nothing upstream and take no slot.
//
// Only answers the provider gave, and that say something about the request
// rather than about the moment, are stored (storableStatus). A refusal by
// sluice itself (429/503 from the gate), a provider 5xx or 429, a timeout or
// a broken stream are not: the entry is dropped, and a waiting duplicate
// (or a later retry) makes the call itself, which is what a retry is for.
//
// Streams: a duplicate of a stream still in flight is refused with 409 and
// Retry-After (the leader's deadline, by which the stream has ended),
// instead of waiting. Waiting would hold the duplicate's caller without a
// byte for the whole stream and then hand it everything at once, which
// defeats streaming; tailing the live stream would tie the leader's pace to
// the slowest duplicate's reader. Once the stream has ended, its bytes are
// replayed like any stored answer.
//
// A leader whose caller leaves (a client-side timeout, the very race the
// key is for) does not cancel its upstream call: the call runs on to the
// leader's deadline, its answer is read to the end, and the retry gets it.
// The slot is held meanwhile, as the provider's capacity is; a call
// without a key is cancelled as before.
//
// Bounds: stored answers are kept for the window after they complete, at
// most max_entries of them and max_bytes in all, the oldest evicted first.
// An answer larger than max_entry_bytes is not kept; only the fact that the
// key was used is, and a duplicate within the window gets 409 (the call was
// made and billed: making it again is what the caller asked not to happen).
// Entries in flight are not counted: they are bounded by the requests the
// gateway is serving.

// Idempotency defaults: see IdempotencyConfig.
const (
	defaultIdemWindow        = 10 * time.Minute
	defaultIdemMaxEntries    = 10_000
	defaultIdemMaxBytes      = 64 << 20
	defaultIdemMaxEntryBytes = 1 << 20

	maxIdemWindow     = 24 * time.Hour
	maxIdemEntries    = 1_000_000
	maxIdemBytes      = 16 << 30
	maxIdempotencyKey = 255

	// idemOverhead approximates an entry's bookkeeping beyond its bytes
	// (map slot, list element, structs), so that max_bytes bounds memory
	// even when the answers are tiny.
	idemOverhead = 256
)

// IdempotencyConfig bounds the answers kept for Idempotency-Key.
type IdempotencyConfig struct {
	// Window is how long an answer is kept after it completes. Zero means
	// 10m: longer than a client's whole retry schedule (SDKs back off for
	// at most a minute or so between a handful of attempts) for a call of
	// up to limits.max_timeout's default, and short enough that the
	// answers, which can be large, do not pile up in memory. At most 24h.
	Window Duration `yaml:"window"`
	// MaxEntries bounds the answers kept. Zero means 10000; at most
	// 1000000.
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes bounds the memory of the answers kept (bodies, headers and
	// an overhead per entry). Zero means 64 MiB; at most 16 GiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxEntryBytes is the largest answer kept. Zero means 1 MiB (a long
	// completion is tens of KiB); at most max_bytes. A larger answer is
	// delivered to its caller but not kept: a duplicate gets 409.
	MaxEntryBytes int64 `yaml:"max_entry_bytes"`
}

func (c IdempotencyConfig) withDefaults() IdempotencyConfig {
	if c.Window == 0 {
		c.Window = Duration(defaultIdemWindow)
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = defaultIdemMaxEntries
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = defaultIdemMaxBytes
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = min(defaultIdemMaxEntryBytes, c.MaxBytes)
	}
	return c
}

func (c IdempotencyConfig) validate() error {
	if err := durationIn("idempotency.window", c.Window, 0, maxIdemWindow); err != nil {
		return err
	}
	if err := intIn("idempotency.max_entries", c.MaxEntries, 0, maxIdemEntries); err != nil {
		return err
	}
	if err := intIn("idempotency.max_bytes", c.MaxBytes, 0, maxIdemBytes); err != nil {
		return err
	}
	d := c.withDefaults()
	if err := intIn("idempotency.max_entry_bytes", c.MaxEntryBytes, 0, d.MaxBytes); err != nil {
		return fmt.Errorf("%w (idempotency.max_bytes)", err)
	}
	return nil
}

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

// idemKey is a key within its tenant: tenant A's key never matches B's.
type idemKey struct{ tenant, key string }

// idemEntry is one key's call: in flight until done is closed, then either
// dropped from the map or stored with its answer.
type idemEntry struct {
	key      idemKey
	sum      [sha256.Size]byte // of the request: method, path, query, body
	stream   bool
	deadline time.Time     // the leader's: its stream has ended by then
	done     chan struct{} // closed when the entry leaves the in-flight state

	// Set under the store's lock before done is closed.
	answer  *idemAnswer // nil while in flight, and when dropped
	expires time.Time
	elem    *list.Element
	size    int64
}

// idemAnswer is a stored answer. Never modified once stored.
type idemAnswer struct {
	status int
	header http.Header // hop-by-hop headers already removed by the proxy
	body   []byte
	kept   bool // false: larger than max_entry_bytes, only its use is known
}

// idemStore keeps the entries. Safe for concurrent use.
type idemStore struct {
	cfg     IdempotencyConfig
	replays *prometheus.CounterVec // how: waited, stored
	mu      struct {
		sync.Mutex
		entries map[idemKey]*idemEntry
		stored  list.List // of *idemEntry, oldest first: expiry and eviction order
		bytes   int64
	}
}

func newIdemStore(cfg IdempotencyConfig, reg prometheus.Registerer) *idemStore {
	s := &idemStore{cfg: cfg.withDefaults()}
	s.mu.entries = map[idemKey]*idemEntry{}
	s.replays = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_idempotent_replays_total",
		Help: "Requests answered with another request's answer for the same Idempotency-Key, without an upstream call: how=waited (the first was in flight), stored (it had completed).",
	}, []string{"how"})
	if reg != nil {
		reg.MustRegister(s.replays)
	}
	return s
}

// idemState is what a lookup found.
type idemState int

const (
	idemLead      idemState = iota // no entry: the caller makes the call
	idemWait                       // in flight: wait on entry.done
	idemStored                     // a stored answer
	idemMismatch                   // the key was used for another request
	idemStreaming                  // a stream in flight: 409
	idemNotKept                    // used, but its answer was too large to keep: 409
)

// begin looks k up for a request whose hash is sum, at now. When nobody
// holds the key, it records an entry in flight and returns a flight for the
// caller to complete or abandon.
func (s *idemStore) begin(k idemKey, sum [sha256.Size]byte, stream bool, deadline, now time.Time) (idemState, *idemEntry, *idemFlight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	if e, ok := s.mu.entries[k]; ok {
		switch {
		case e.sum != sum:
			return idemMismatch, e, nil
		case e.answer == nil && e.stream:
			return idemStreaming, e, nil
		case e.answer == nil:
			return idemWait, e, nil
		case !e.answer.kept:
			return idemNotKept, e, nil
		}
		return idemStored, e, nil
	}
	e := &idemEntry{key: k, sum: sum, stream: stream, deadline: deadline, done: make(chan struct{})}
	s.mu.entries[k] = e
	return idemLead, e, &idemFlight{s: s, e: e}
}

// expireLocked drops the stored entries whose window has passed: the list
// is in completion order and the window is the same for all, so they are
// at its front.
func (s *idemStore) expireLocked(now time.Time) {
	for el := s.mu.stored.Front(); el != nil; el = s.mu.stored.Front() {
		e := el.Value.(*idemEntry)
		if now.Before(e.expires) {
			return
		}
		s.removeLocked(e)
	}
}

func (s *idemStore) removeLocked(e *idemEntry) {
	s.mu.stored.Remove(e.elem)
	s.mu.bytes -= e.size
	if s.mu.entries[e.key] == e {
		delete(s.mu.entries, e.key)
	}
}

// len and bytes report the stored answers, for tests and metrics.
func (s *idemStore) len() (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.stored.Len(), s.mu.bytes
}

// idemFlight is the leader's hold on its entry: it captures the answer as
// the proxy streams it, then stores it (complete) or drops it (abandon).
// Used by the leader's goroutine only, until it ends under the store's lock.
type idemFlight struct {
	s        *idemStore
	e        *idemEntry
	status   int
	header   http.Header
	storable bool
	tooLarge bool
	body     []byte
	ended    bool // guarded by s.mu
}

// respond records the provider's status and headers (the contract's
// X-Sluice-* included, hop-by-hop removed), before the body streams.
func (f *idemFlight) respond(status int, h http.Header) {
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

// write captures bytes the caller was sent, up to max_entry_bytes.
func (f *idemFlight) write(p []byte) {
	if f == nil || !f.storable || f.tooLarge {
		return
	}
	if int64(len(f.body)+len(p)) > f.s.cfg.MaxEntryBytes {
		f.tooLarge, f.body = true, nil
		return
	}
	f.body = append(f.body, p...)
}

// wantsRest says whether the rest of the body is worth reading for the
// store after the caller stopped: the answer is one to keep, fits, and has
// not ended. Only the leader's goroutine reads ended before it is set.
func (f *idemFlight) wantsRest() bool {
	if f == nil || !f.storable || f.tooLarge {
		return false
	}
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return !f.ended
}

// complete stores the answer whose body ended at now, or drops the entry
// if the answer is not one to keep. Waiters are woken either way.
func (f *idemFlight) complete(now time.Time) {
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
	a := &idemAnswer{status: f.status, header: f.header, kept: !f.tooLarge}
	e.size = idemOverhead + int64(len(e.key.tenant)+len(e.key.key))
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
		s.removeLocked(s.mu.stored.Front().Value.(*idemEntry))
	}
	s.mu.Unlock()
	close(e.done)
}

// abandon drops the entry unless it was completed: the call was refused,
// failed or cut short, and the next request with the key makes it again.
func (f *idemFlight) abandon() {
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

// idempotencyKey reads the request's Idempotency-Key: "" when it has none,
// an error naming the header when it is malformed.
func idempotencyKey(h http.Header) (string, error) {
	vs, ok := h[contract.HeaderIdempotencyKey]
	if !ok {
		return "", nil
	}
	name := contract.HeaderIdempotencyKey
	switch {
	case len(vs) != 1:
		return "", badHeader(name, "sent %d times: a request has one key", len(vs))
	case vs[0] == "":
		return "", badHeader(name, "empty: a key is 1 to %d printable ASCII characters", maxIdempotencyKey)
	case len(vs[0]) > maxIdempotencyKey:
		return "", badHeader(name, "%d bytes, above the limit of %d", len(vs[0]), maxIdempotencyKey)
	}
	for i := 0; i < len(vs[0]); i++ {
		if c := vs[0][i]; c < 0x20 || c > 0x7e {
			return "", badHeader(name, "byte %d is not printable ASCII (0x20-0x7e): a key is 1 to %d of them", i, maxIdempotencyKey)
		}
	}
	return vs[0], nil
}

// idempotencySum hashes what makes two requests the same: method, path,
// query and body bytes, each length-prefixed so that no two splits collide.
func idempotencySum(r *http.Request, body []byte) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range []string{r.Method, r.URL.Path, r.URL.RawQuery} {
		h.Write([]byte(strconv.Itoa(len(part)) + ":" + part))
	}
	h.Write(body)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// idempotent runs the Idempotency-Key part of a call before admission. It
// returns the flight to complete when this request is to make the call
// (nil when it has no key), or handled when it has been answered: from
// another request's answer, or with an error.
func (g *Gateway) idempotent(ctx context.Context, w http.ResponseWriter, r *http.Request, tenant string, body callBody) (f *idemFlight, handled bool) {
	key, err := idempotencyKey(r.Header)
	if err != nil {
		g.badInput(w, err)
		return nil, true
	}
	if key == "" {
		return nil, false
	}
	k := idemKey{tenant: tenant, key: key}
	sum := idempotencySum(r, body.raw)
	deadline, _ := ctx.Deadline()
	waited := false
	for {
		now := time.Now()
		state, e, f := g.idem.begin(k, sum, body.stream, deadline, now)
		switch state {
		case idemLead:
			return f, false
		case idemWait:
			select {
			case <-e.done:
				waited = true
				continue // stored, or dropped: look again
			case <-ctx.Done():
				if r.Context().Err() != nil {
					return nil, true // the caller left: nobody to answer
				}
				writeError(w, http.StatusGatewayTimeout, "timeout_error", "deadline_exceeded",
					"the request's deadline (X-Sluice-Timeout-Ms) passed while the request with the same Idempotency-Key was still in flight")
				return nil, true
			}
		case idemStored:
			how := "stored"
			if waited {
				how = "waited"
			}
			g.idem.replays.WithLabelValues(how).Inc()
			writeReplay(w, e.answer)
			return nil, true
		case idemMismatch:
			g.badInput(w, &badRequest{status: http.StatusUnprocessableEntity, code: "idempotency_key_reused",
				msg: contract.HeaderIdempotencyKey + ": the key was used for a different request (method, path or body) within the idempotency window; use a new key for a new request"})
			return nil, true
		case idemStreaming:
			w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(ceilSeconds(e.deadline.Sub(now)), 10))
			g.badInput(w, &badRequest{status: http.StatusConflict, code: "idempotency_key_in_flight",
				msg: contract.HeaderIdempotencyKey + ": a streamed request with this key is still in flight; its answer is replayed once the stream has ended (see Retry-After)"})
			return nil, true
		case idemNotKept:
			w.Header().Set(contract.HeaderRetryAfter, strconv.FormatInt(ceilSeconds(e.expires.Sub(now)), 10))
			g.badInput(w, &badRequest{status: http.StatusConflict, code: "idempotency_answer_not_kept",
				msg: contract.HeaderIdempotencyKey + ": a request with this key was answered, but its answer was larger than idempotency.max_entry_bytes and was not kept; the key may be used again after Retry-After"})
			return nil, true
		}
	}
}

// writeReplay writes a stored answer as the provider's was written.
func writeReplay(w http.ResponseWriter, a *idemAnswer) {
	h := w.Header()
	for k, vs := range a.header {
		h[k] = append([]string(nil), vs...)
	}
	if a.status != http.StatusNoContent && a.status != http.StatusNotModified {
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}
