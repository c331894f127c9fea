package chain

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Defaults of RecogniseConfig.
const (
	DefaultRecogniseWindow     = 30 * time.Second
	DefaultRecogniseMaxEntries = 1 << 16
	// MaxRecogniseEntries bounds MaxEntries: about 3.5 GiB of entries is
	// no longer a bounded memory anyone meant to configure.
	MaxRecogniseEntries = 1 << 26
)

// RecogniseConfig configures the stage that recognises retries sent
// without a retry header: a copy of a request its tenant sent lately (same
// class, model and body) that failed is a retry of it.
type RecogniseConfig struct {
	// Disabled leaves the stage out: only the attempt the shell read from
	// the caller (a header) marks a retry.
	Disabled bool
	// Window is how long after a copy of a request failed another copy
	// counts as its retry. Zero means DefaultRecogniseWindow (30s);
	// negative is an error.
	Window time.Duration
	// MaxEntries bounds the requests remembered, each in constant memory
	// (see the seen type); the oldest is forgotten first. Zero means
	// DefaultRecogniseMaxEntries (65536); negative or above
	// MaxRecogniseEntries is an error.
	MaxEntries int
}

func (c RecogniseConfig) withDefaults() (RecogniseConfig, error) {
	switch {
	case c.Window < 0:
		return c, fmt.Errorf("window: %v, want ≥ 0 (0 for %v)", c.Window, DefaultRecogniseWindow)
	case c.MaxEntries < 0 || c.MaxEntries > MaxRecogniseEntries:
		return c, fmt.Errorf("max_entries: %d, want 0 (for %d) to %d", c.MaxEntries, DefaultRecogniseMaxEntries, MaxRecogniseEntries)
	}
	if c.Window == 0 {
		c.Window = DefaultRecogniseWindow
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultRecogniseMaxEntries
	}
	return c, nil
}

// seen is the stage that recognises a retry by what it asks rather than by
// what its caller says. A shell loop, a framework's own retries or a
// homemade SDK send no X-Sluice-Attempt, and without this stage their
// retries would be first attempts: deposited into the retry budgets
// instead of paid from them, and ranked as new work.
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
// that the failure is not left for an innocent copy; the stage only ever
// raises Attempt, and a header's "0" does not exempt a copy of a failed
// call, since the point is callers whose word cannot be trusted.
//
// Memory is bounded: at most MaxEntries requests are remembered, in a ring
// that forgets the oldest first (by when the request was first seen), and
// each is a fixed-size entry plus its index slot — no body, no strings.
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
		ring  []seenEntry       // grows to max, then wraps
		next  int               // once full: the oldest slot, the next to reuse
	}
}

// seenEntry is one remembered request: 24 bytes, and about as much again
// for its slot in the index (see TestSeenMemoryPerEntry).
type seenEntry struct {
	key uint64
	// failedAt is when its last failure was (unix ns): the failures left
	// to retry expire together, Window after the last one.
	failedAt int64
	// failed counts the failures not yet retried.
	failed uint32
	// attempt is the highest attempt of a copy so far: a recognised retry
	// is one more.
	attempt uint32
}

func newSeen(cfg RecogniseConfig) (*seen, error) {
	if cfg.Disabled {
		return nil, nil
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &seen{window: cfg.Window, max: cfg.MaxEntries, seed: maphash.MakeSeed()}
	s.mu.index = map[uint64]uint32{}
	return s, nil
}

// key hashes what makes two calls copies of one request.
func (s *seen) key(r *Request) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(r.Tenant)
	h.WriteByte(0)
	h.WriteString(r.Class)
	h.WriteByte(0)
	h.WriteString(r.Model)
	h.WriteByte(0)
	var fp [8]byte
	binary.LittleEndian.PutUint64(fp[:], r.Fingerprint)
	h.Write(fp[:])
	return h.Sum64()
}

// Admit recognises the call, and remembers it. It never refuses.
func (s *seen) Admit(now time.Time, r *Request) (Hold, error) {
	if r.Fingerprint == 0 {
		return nil, nil
	}
	key, t := s.key(r), now.UnixNano()
	s.mu.Lock()
	e := s.entryLocked(key)
	if e.failed > 0 && t-e.failedAt > int64(s.window) {
		e.failed = 0 // too long ago: the caller has moved on
	}
	if e.failed > 0 {
		e.failed--
		if r.Attempt == 0 {
			r.Attempt = int(min(e.attempt, maxAttempt-1)) + 1
			r.RetrySeen = true
		}
	}
	e.attempt = max(e.attempt, uint32(min(r.Attempt, maxAttempt)))
	s.mu.Unlock()
	if r.RetrySeen {
		s.recognised.Add(1)
	}
	return &seenHold{s: s, key: key}, nil
}

// maxAttempt keeps attempt numbers far from overflow: no caller retries a
// million times.
const maxAttempt = 1_000_000

// entryLocked returns the entry of key, new if it was not remembered.
func (s *seen) entryLocked(key uint64) *seenEntry {
	if i, ok := s.mu.index[key]; ok {
		return &s.mu.ring[i]
	}
	var i int
	if len(s.mu.ring) < s.max {
		s.mu.ring = append(s.mu.ring, seenEntry{})
		i = len(s.mu.ring) - 1
	} else {
		i = s.mu.next
		delete(s.mu.index, s.mu.ring[i].key)
		s.mu.next = (i + 1) % s.max
	}
	s.mu.ring[i] = seenEntry{key: key}
	s.mu.index[key] = uint32(i)
	return &s.mu.ring[i]
}

// fail books a copy's failure. A request forgotten meanwhile is not
// remembered again: its next copy will be a first attempt.
func (s *seen) fail(now time.Time, key uint64) {
	s.mu.Lock()
	if i, ok := s.mu.index[key]; ok {
		e := &s.mu.ring[i]
		if t := now.UnixNano(); e.failed > 0 && t-e.failedAt > int64(s.window) {
			e.failed = 0
		}
		e.failed = min(e.failed+1, maxAttempt)
		e.failedAt = now.UnixNano()
	}
	s.mu.Unlock()
}

// len is how many requests are remembered.
func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.index)
}

// seenHold is one copy of a remembered request, told how it ended.
type seenHold struct {
	s   *seen
	key uint64
}

// Cancel: the copy never reached the provider — refused, or withdrawn
// because its caller left or its deadline passed. A failure.
func (h *seenHold) Cancel(now time.Time) { h.s.fail(now, h.key) }

// Settle: anything but a success (or a slot given back unused) is a
// failure.
func (h *seenHold) Settle(now time.Time, o Outcome) error {
	if o.Result != admission.Success && o.Result != admission.Unused {
		h.s.fail(now, h.key)
	}
	return nil
}
