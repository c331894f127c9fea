package spend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// The memory ledger keeps each scope in two rings indexed by time: minutes
// (enough for MinRetention) and hours (a little longer). Each slot carries
// a tag naming the minute or hour it holds, so a slot reused for a later
// time can never be mistaken for the earlier one. The hour ring makes a
// day's Sum about 24 + 2×59 additions instead of 1440. Ring sizes are powers
// of two, so a slot is found with a mask rather than a division.
const (
	memMinutes = 2048 // 34 h ≥ MinRetention
	memHours   = 64   // > memMinutes/60, so a live minute's hour is live too
)

// slot is one bucket. tag is the index held with its top bit flipped, so
// that the zero slot is unused whatever index it would alias.
type slot struct {
	tag    uint64
	amount int64
}

func tagOf(i int64) uint64 { return uint64(i) ^ 1<<63 }

type memScope struct {
	minutes [memMinutes]slot
	hours   [memHours]slot
}

// MemoryLedger is the in-process Ledger: one process's books, or several
// Limiters in one process sharing a budget. Safe for concurrent use.
type MemoryLedger struct {
	mu     sync.Mutex
	scopes map[string]*memScope
}

var _ Ledger = (*MemoryLedger)(nil)

// NewMemoryLedger returns an empty ledger.
func NewMemoryLedger() *MemoryLedger {
	return &MemoryLedger{scopes: make(map[string]*memScope)}
}

// ring is the slot of index i in a ring of n slots (n a power of two);
// two's complement makes it right for negative indexes too.
func ring(i, n int64) int64 { return int64(uint64(i) & uint64(n-1)) }

// floorDiv divides rounding toward minus infinity.
func floorDiv(a, n int64) int64 {
	q := a / n
	if a%n != 0 && (a < 0) != (n < 0) {
		q--
	}
	return q
}

// addSlot adds v to the slot for index i, unless the slot already holds a
// later index (then i is older than the ring and is dropped). It reports
// whether v was added.
func addSlot(s *slot, i, v int64) bool {
	switch t := tagOf(i); {
	case s.tag == 0 || s.tag < t:
		*s = slot{tag: t, amount: v}
	case s.tag == t:
		s.amount += v
	default:
		return false
	}
	return true
}

func readSlot(s *slot, i int64) int64 {
	if s.tag == tagOf(i) {
		return s.amount
	}
	return 0
}

// Add implements Ledger. Entries older than the ledger's rings are dropped.
func (l *MemoryLedger) Add(_ context.Context, _ time.Time, entries []Entry) error {
	for i := range entries {
		if entries[i].Scope == "" {
			return fmt.Errorf("%w (entry %d)", ErrEmptyScope, i)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range entries {
		s := l.scopes[e.Scope]
		if s == nil {
			s = new(memScope)
			l.scopes[e.Scope] = s
		}
		m := minuteOf(e.At)
		h := floorDiv(m, 60)
		// The hour total holds exactly the minutes the minute ring holds.
		if addSlot(&s.minutes[ring(m, memMinutes)], m, e.Amount) {
			addSlot(&s.hours[ring(h, memHours)], h, e.Amount)
		}
	}
	return nil
}

// Buckets implements Ledger.
func (l *MemoryLedger) Buckets(_ context.Context, scope string, last time.Time, dst []int64) error {
	if scope == "" {
		return ErrEmptyScope
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.scopes[scope]
	m := minuteOf(last) - int64(len(dst)) + 1
	for i := range dst {
		if s == nil {
			dst[i] = 0
			continue
		}
		dst[i] = readSlot(&s.minutes[ring(m+int64(i), memMinutes)], m+int64(i))
	}
	return nil
}

// Sum implements Ledger. Minutes older than the ledger's rings read as zero.
func (l *MemoryLedger) Sum(_ context.Context, scope string, first, last time.Time) (int64, error) {
	if scope == "" {
		return 0, ErrEmptyScope
	}
	a, b := minuteOf(first), minuteOf(last)
	if a > b {
		return 0, fmt.Errorf("spend: Sum: first %v is in a minute after last %v", first, last)
	}
	a = max(a, b-memMinutes+1) // older minutes are gone from the minute ring
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.scopes[scope]
	if s == nil {
		return 0, nil
	}
	var sum int64
	for ; a <= b && a-floorDiv(a, 60)*60 != 0; a++ {
		sum += readSlot(&s.minutes[ring(a, memMinutes)], a)
	}
	for ; a+59 <= b; a += 60 {
		h := floorDiv(a, 60)
		sum += readSlot(&s.hours[ring(h, memHours)], h)
	}
	for ; a <= b; a++ {
		sum += readSlot(&s.minutes[ring(a, memMinutes)], a)
	}
	return sum, nil
}

// snapshotFormat names the snapshot's layout; ReadSnapshot refuses others.
const snapshotFormat = "sluice-spend-ledger/1"

// ledgerSnapshot is the file: each scope's non-empty minute buckets as
// [minute since the epoch, nano-dollars] pairs. The hour ring is rebuilt
// from them.
type ledgerSnapshot struct {
	Format string                `json:"format"`
	Scopes map[string][][2]int64 `json:"scopes"`
}

// WriteSnapshot writes the ledger's minute buckets to w as JSON, for
// ReadSnapshot in a later process: one process's books surviving a restart.
func (l *MemoryLedger) WriteSnapshot(w io.Writer) error {
	snap := ledgerSnapshot{Format: snapshotFormat, Scopes: map[string][][2]int64{}}
	l.mu.Lock()
	for name, s := range l.scopes {
		var b [][2]int64
		for i := range s.minutes {
			if sl := s.minutes[i]; sl.tag != 0 && sl.amount != 0 {
				b = append(b, [2]int64{int64(sl.tag ^ 1<<63), sl.amount})
			}
		}
		if len(b) > 0 {
			snap.Scopes[name] = b
		}
	}
	l.mu.Unlock()
	return json.NewEncoder(w).Encode(snap)
}

// ReadSnapshot adds the buckets of a snapshot written by WriteSnapshot to
// the ledger. A snapshot that is not one (another format, bad JSON,
// trailing data, an empty scope) is an error and adds nothing.
func (l *MemoryLedger) ReadSnapshot(r io.Reader) error {
	var snap ledgerSnapshot
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return fmt.Errorf("spend: ledger snapshot: %w", err)
	}
	if dec.More() {
		return errors.New("spend: ledger snapshot: data after the snapshot")
	}
	if snap.Format != snapshotFormat {
		return fmt.Errorf("spend: ledger snapshot: format %q, want %q", snap.Format, snapshotFormat)
	}
	var entries []Entry
	for scope, b := range snap.Scopes {
		if scope == "" {
			return fmt.Errorf("spend: ledger snapshot: %w", ErrEmptyScope)
		}
		for _, p := range b {
			entries = append(entries, Entry{Scope: scope, At: time.Unix(p[0]*60, 0), Amount: p[1]})
		}
	}
	return l.Add(context.Background(), time.Time{}, entries)
}
