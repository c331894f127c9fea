package chain

import (
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/yamlpath"
)

// Defaults and bounds of RecogniseConfig.
const (
	DefaultRecogniseWindow     = 30 * time.Second
	DefaultRecogniseMaxEntries = 1 << 16
	// MaxRecogniseWindow bounds Window: a copy an hour old is a new
	// request.
	MaxRecogniseWindow = time.Hour
	// MaxRecogniseEntries bounds MaxEntries: about 4 GiB of entries is no
	// longer a bounded memory anyone meant to configure.
	MaxRecogniseEntries = 1 << 26
)

// RecogniseConfig configures the stage that recognises retries sent
// without a retry header (X-Sluice-Attempt, X-Stainless-Retry-Count): a
// request identical to one its tenant sent within the window (same class,
// model and body bytes) whose last copy was refused, timed out, was
// abandoned by its caller or failed upstream is a retry — ranked as one and
// charged to the retry budgets. One whose last copy succeeded is not (see
// docs/retries.md). In a configuration file it is retries.recognise.
type RecogniseConfig struct {
	// Disabled leaves the stage out: only the attempt the shell read from
	// the caller (a header) marks a retry.
	Disabled bool `yaml:"disabled"`
	// Window is how long after a copy of a request failed another copy
	// counts as its retry. Zero means DefaultRecogniseWindow (30s); at most
	// MaxRecogniseWindow (1h).
	Window time.Duration `yaml:"window"`
	// MaxEntries bounds the requests remembered, each in constant memory
	// (about 67 bytes, see the seen type: 4.2 MiB at the default); past it
	// the oldest is forgotten first. Nil (absent) means
	// DefaultRecogniseMaxEntries (65536); 1 to MaxRecogniseEntries
	// otherwise. Zero is an error: Disabled turns recognition off.
	MaxEntries *int `yaml:"max_entries"`
}

// Validate names the first bad field by its YAML key (a
// *yamlpath.FieldError relative to the section). A disabled stage is not
// checked: nothing of it is used.
func (c RecogniseConfig) Validate() error {
	if c.Disabled {
		return nil
	}
	if c.Window < 0 || c.Window > MaxRecogniseWindow {
		return yamlpath.Errorf("window", "%v is out of range, want 0 (for %v) to %v", c.Window, DefaultRecogniseWindow, MaxRecogniseWindow)
	}
	if m := c.MaxEntries; m != nil {
		if *m == 0 {
			return yamlpath.Errorf("max_entries", "0 remembers nothing; want 1..%d (or disabled: true)", MaxRecogniseEntries)
		}
		if *m < 1 || *m > MaxRecogniseEntries {
			return yamlpath.Errorf("max_entries", "%d is out of range, want 1..%d", *m, MaxRecogniseEntries)
		}
	}
	return nil
}

// resolved validates c and returns its window and bound with the defaults
// filled in.
func (c RecogniseConfig) resolved() (window time.Duration, maxEntries int, err error) {
	if err := c.Validate(); err != nil {
		return 0, 0, err
	}
	window, maxEntries = c.Window, DefaultRecogniseMaxEntries
	if window == 0 {
		window = DefaultRecogniseWindow
	}
	if c.MaxEntries != nil {
		maxEntries = *c.MaxEntries
	}
	return window, maxEntries, nil
}

// seen is the stage that recognises a retry by what it asks rather than by
// what its caller says. A shell loop, a framework's own retries or a
// homemade SDK send no X-Sluice-Attempt, and without this stage their
// retries would be first attempts: deposited into the retry budgets
// instead of paid from them, and ranked as new work.
//
// A call whose caller declared its attempt (Request.AttemptDeclared) is
// left alone: a declared first attempt is a first attempt, and a declared
// retry is charged as one by the retry budgets without help. Only callers
// that say nothing are recognised; their calls are remembered and
// compared with each other.
//
// The rule: calls with a Fingerprint are copies of one request when their
// tenant, class, model and fingerprint are the same. Every copy that
// fails — refused by a stage or the gate, withdrawn from the queue (its
// caller left or its deadline passed), or settled with any result but
// Success: the provider's error or 429, a caller that hung up — leaves a
// failure to be retried, for Window after it failed. A copy that arrives
// while one is left is its retry: it takes that failure, and its Attempt
// is raised to one more than the highest of the copies before it (ranks
// ask only whether it is ≥ 1). A copy that arrives
// with none left is not a retry, whether the earlier copies succeeded
// (sampling one prompt several times is legitimate work) or are still in
// flight: parallel samples (best-of-n, evaluation harnesses) look exactly
// like that, and a caller that gave up on a copy has, in the gateway,
// cancelled it by hanging up before it can send the next. Counting
// failures, rather than asking whether the last copy failed, matches
// retries to failures one for one: when one of many copies of a popular
// prompt fails, one later copy is a retry, not all of them, and a retry
// that arrives after a parallel copy succeeded is still seen. A retry its
// caller declared (Attempt ≥ 1 from a header) also takes a failure, so
//
// Recognition cannot feed itself: a copy refused because it was
// recognised — the retry budgets refused it (reason retry_budget) — took a
// failure and leaves none, so the next copy is a first attempt again.
// Otherwise one failure of a popular prompt under overload would make
// every later copy, whoever sent it, a retry refused for its budget, and
// each refusal the failure of the next. And a recognised retry past its
// budgets still takes a slot that is free with nobody waiting (see
// retries.Admit): what recognition decides never leaves the provider idle.
//
// Memory is bounded: at most MaxEntries requests are remembered, each a
// fixed-size entry plus its index slot — no body, no strings — in a ring
// in the order they were first seen. A request that can no longer matter
// (no copy open, no failure left within the window) is forgotten when it
// reaches the front, so the ring holds about the last window's requests;
// when it is full of requests that may matter, the oldest is forgotten.
// The key is a 64-bit hash of tenant, class, model and fingerprint, seeded
// per process so that no caller can make its request collide with another
// tenant's; a collision between honest requests (one in 2^64 per pair)
// would at worst charge one call as a retry. One mutex guards the ring: the
// work under it is a map lookup and a few stores, and the retry budgets
// stage after it takes a lock of its own on every call anyway.
type seen struct {
	window     time.Duration
	max        int
	seed       maphash.Seed
	recognised atomic.Uint64
	mu         struct {
		sync.Mutex
		index map[uint64]uint32 // key → slot in ring
		// ring is a queue of n entries from head, wrapping, in the order
		// they were first seen (or renewed, see pruneLocked). It grows by
		// doubling up to max.
		ring    []seenEntry
		head, n int
		// free are holds given back, for reuse: a call's hold would
		// otherwise be one allocation per call. As many as calls were
		// once open at the same time.
		free []*seenHold
	}
}

// seenEntry is one remembered request: 32 bytes, and about as much again
// for its slot in the index (see TestSeenMemoryPerEntry).
type seenEntry struct {
	key uint64
	// since is when it was first seen, or renewed (unix ns).
	since int64
	// failedAt is when its last failure was (unix ns): the failures left
	// to retry expire together, Window after the last one.
	failedAt int64
	// failed counts the failures not yet retried (at most 65535).
	failed uint16
	// attempt is the highest attempt of a copy so far (at most 65535): a
	// recognised retry is one more.
	attempt uint16
	// open counts its copies not yet ended.
	open uint32
}

// alive says whether e can still matter at t: a copy is open, whose
// failure would be retried, or a failure is left to retry. A request that
// is neither is forgotten without loss: its next copy would be a first
// attempt either way.
func (s *seen) alive(e *seenEntry, t int64) bool {
	return e.open > 0 || (e.failed > 0 && t-e.failedAt <= int64(s.window))
}

func newSeen(cfg RecogniseConfig) (*seen, error) {
	if cfg.Disabled {
		return nil, nil
	}
	window, maxEntries, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	s := &seen{window: window, max: maxEntries, seed: maphash.MakeSeed()}
	s.mu.index = map[uint64]uint32{}
	return s, nil
}

// key hashes what makes two calls copies of one request: the seeded
// hashes of the three names and the fingerprint, each folded in through a
// multiply-xorshift mixer (so that no two fields cancel out).
func (s *seen) key(r *Request) uint64 {
	h := mix64(maphash.String(s.seed, r.Tenant))
	h = mix64(h ^ maphash.String(s.seed, r.Class))
	h = mix64(h ^ maphash.String(s.seed, r.Model))
	return mix64(h ^ r.Fingerprint)
}

// mix64 is SplitMix64's finaliser: every input bit moves every output bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Admit recognises the call, and remembers it. It never refuses.
func (s *seen) Admit(now time.Time, r *Request) (Hold, error) {
	if r.Fingerprint == 0 || r.AttemptDeclared || r.Attempt > 0 {
		return nil, nil
	}
	key, t := s.key(r), now.UnixNano()
	s.mu.Lock()
	e := s.entryLocked(key, t)
	if e.failed > 0 && t-e.failedAt > int64(s.window) {
		e.failed = 0 // too long ago: the caller has moved on
	}
	if e.failed > 0 {
		e.failed--
		r.Attempt = int(e.attempt) + 1
		r.RetrySeen = true
	}
	e.attempt = uint16(min(max(int(e.attempt), r.Attempt), math.MaxUint16))
	e.open++
	var h *seenHold
	if n := len(s.mu.free); n > 0 {
		h = s.mu.free[n-1]
		s.mu.free = s.mu.free[:n-1]
	} else {
		h = &seenHold{s: s}
	}
	h.key = key
	s.mu.Unlock()
	if r.RetrySeen {
		s.recognised.Add(1)
	}
	return h, nil
}

// entryLocked returns the entry of key, new if it was not remembered.
func (s *seen) entryLocked(key uint64, t int64) *seenEntry {
	if i, ok := s.mu.index[key]; ok {
		return &s.mu.ring[i]
	}
	s.pruneLocked(t)
	if s.mu.n == len(s.mu.ring) {
		if len(s.mu.ring) < s.max {
			s.growLocked()
		} else { // full of requests that may matter: the oldest goes
			delete(s.mu.index, s.mu.ring[s.mu.head].key)
			s.mu.head = (s.mu.head + 1) % len(s.mu.ring)
			s.mu.n--
		}
	}
	i := (s.mu.head + s.mu.n) % len(s.mu.ring)
	s.mu.n++
	s.mu.ring[i] = seenEntry{key: key, since: t}
	s.mu.index[key] = uint32(i)
	return &s.mu.ring[i]
}

// pruneLocked forgets, from the front of the ring, the requests that can
// no longer matter, so that the ring holds about the requests of the last
// window rather than the last max. A request at the front that is still
// alive after a window in the ring is renewed — moved to the back — so
// that one long-lived request (a prompt sampled without pause) does not
// keep the dead behind it. The work is bounded per call; each entry is
// forgotten once and renewed at most once a window.
func (s *seen) pruneLocked(t int64) {
	for range 4 {
		if s.mu.n == 0 {
			return
		}
		L := len(s.mu.ring)
		e := &s.mu.ring[s.mu.head]
		switch {
		case !s.alive(e, t):
			delete(s.mu.index, e.key)
			s.mu.n--
		case t-e.since > int64(s.window):
			tail := (s.mu.head + s.mu.n) % L
			moved := *e
			moved.since = t
			s.mu.ring[tail] = moved
			s.mu.index[moved.key] = uint32(tail)
		default:
			return
		}
		s.mu.head = (s.mu.head + 1) % L
	}
}

// growLocked doubles the ring, up to max, keeping its order.
func (s *seen) growLocked() {
	old := s.mu.ring
	ring := make([]seenEntry, min(max(2*len(old), 64), s.max))
	for k := range s.mu.n {
		e := old[(s.mu.head+k)%len(old)]
		ring[k] = e
		s.mu.index[e.key] = uint32(k)
	}
	s.mu.ring, s.mu.head = ring, 0
}

// end books how copy h ended, and takes h back. A request forgotten
// meanwhile is not remembered again: its next copy will be a first
// attempt.
func (s *seen) end(now time.Time, h *seenHold, failed bool) {
	s.mu.Lock()
	if i, ok := s.mu.index[h.key]; ok {
		e := &s.mu.ring[i]
		e.open = max(e.open, 1) - 1 // 0 only if the request was forgotten and seen anew meanwhile
		if failed {
			if t := now.UnixNano(); e.failed > 0 && t-e.failedAt > int64(s.window) {
				e.failed = 0
			}
			e.failed = min(e.failed+1, math.MaxUint16)
			e.failedAt = now.UnixNano()
		}
	}
	s.mu.free = append(s.mu.free, h)
	s.mu.Unlock()
}

// len is how many requests are remembered.
func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.index)
}

// seenHold is one copy of a remembered request, told how it ended. It is
// reused once it has been (Hold: exactly one of Cancel and Settle, once).
type seenHold struct {
	s   *seen
	key uint64
}

// Cancel: the copy never reached the provider — refused, or withdrawn
// because its caller left or its deadline passed. A failure, unless the
// retry budgets refused it: it was refused for having been recognised as
// a retry, and that must not make the next copy one too.
func (h *seenHold) Cancel(now time.Time, cause error) {
	var rej *admission.Rejection
	refusedAsRetry := errors.As(cause, &rej) && rej.Reason == admission.ReasonRetryBudget
	h.s.end(now, h, !refusedAsRetry)
}

// Settle: anything but a success (or a slot given back unused) is a
// failure.
func (h *seenHold) Settle(now time.Time, o Outcome) error {
	h.s.end(now, h, o.Result != admission.Success && o.Result != admission.Unused)
	return nil
}
