package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/spend"
)

// Defaults of LedgerOptions.
const (
	DefaultSyncInterval = 200 * time.Millisecond
	DefaultMaxQueued    = 100_000
	// defaultRecent is how many minutes every sync pulls: the current one,
	// the next (clock skew) and the ones reconciliations of calls still in
	// flight land in.
	defaultRecent = 10
	// defaultFullEvery is how often a scope's whole retention is pulled
	// again, for late reconciliations of long calls on other replicas.
	defaultFullEvery = time.Minute
	// fullPerSync bounds the scopes pulled in full by one sync (about 1,500
	// keys each), so that a start with many scopes spreads its reads.
	fullPerSync = 4
	// maxBatch bounds the buckets one flush script writes, so that one
	// script never holds Redis for long.
	maxBatch = 2048
	// bucketTTL is each bucket key's lifetime from its last write: at
	// least spend.MinRetention, as every Ledger must keep.
	bucketTTL = spend.MinRetention + time.Hour
	// markerTTL is how long a flushed batch's marker stays: a retried
	// batch whose first attempt was applied but not acknowledged is
	// recognised for that long.
	markerTTL = time.Hour
)

var retentionMinutes = int64(spend.MinRetention / time.Minute)

// LedgerOptions configure a Ledger.
type LedgerOptions struct {
	// SyncInterval is the period of Run's flush-and-pull. Zero means
	// DefaultSyncInterval.
	SyncInterval time.Duration
	// MaxQueued bounds the buckets (scope and minute) whose spend waits to
	// be written while Redis is unreachable. Past it the oldest minute's
	// waiting spend is dropped and counted (DroppedEntries): it stays in
	// this replica's view but never reaches the shared books. Zero means
	// DefaultMaxQueued.
	MaxQueued int
	// Replica names this process in the batch markers. Empty means random.
	Replica string
	// Now is the loop's clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives sync failures (once per outage) and recoveries. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// Ledger is a spend.Ledger whose books are shared by the replicas using
// the same Redis and cluster name, without a Redis round trip on any
// request: a MemoryLedger is the local view that answers every read; Add
// applies to it at once and queues; Sync (Run calls it every SyncInterval)
// writes the queue in one atomic script and pulls the recent buckets of the
// scopes in use, which brings the other replicas' spend into the view.
// While Redis is unreachable the view keeps serving (this replica's own
// spend only), the queue grows up to MaxQueued, and it is written when
// Redis answers again. Safe for concurrent use.
type Ledger struct {
	r       *Redis
	local   *spend.MemoryLedger
	every   time.Duration
	bound   int
	replica string
	now     func() time.Time
	log     *slog.Logger
	seq     atomic.Uint64
	syncMu  sync.Mutex // one Sync at a time: a batch is written by one
	scopes  sync.Map   // scope → *atomic.Int64, the minute it was last used
	// minute is the current minute as of the last Add or Sync: reads mark
	// their scope in use at it rather than read the clock each time.
	minute atomic.Int64

	mu struct {
		sync.Mutex
		pending  map[int64]map[string]int64 // minute → scope → amount
		npending int
		inflight *writeBatch // written but not acknowledged; retried as is
		dropped  int64
		failing  bool
		fullAt   map[string]time.Time
	}
	queued  prometheus.GaugeFunc
	dropped prometheus.CounterFunc
}

// writeBatch is one flush: its id makes a retry after an ambiguous failure (a
// timeout after Redis applied it) a no-op instead of a double count.
type writeBatch struct {
	id      string
	keys    []string
	amounts []any
	minutes []int64
	scopes  []string
}

var _ spend.Ledger = (*Ledger)(nil)

// NewLedger returns a Ledger on r with an empty local view.
func NewLedger(r *Redis, o LedgerOptions) (*Ledger, error) {
	if r == nil {
		return nil, errors.New("store: NewLedger: nil Redis")
	}
	if o.SyncInterval < 0 || o.MaxQueued < 0 {
		return nil, errors.New("store: LedgerOptions.SyncInterval and MaxQueued must not be negative")
	}
	l := &Ledger{r: r, local: spend.NewMemoryLedger(), every: o.SyncInterval, bound: o.MaxQueued, replica: o.Replica, now: o.Now, log: o.Logger}
	if l.every == 0 {
		l.every = DefaultSyncInterval
	}
	if l.bound == 0 {
		l.bound = DefaultMaxQueued
	}
	if l.replica == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		l.replica = hex.EncodeToString(b[:])
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.minute.Store(minuteOf(l.now()))
	l.mu.pending = make(map[int64]map[string]int64)
	l.mu.fullAt = make(map[string]time.Time)
	l.queued = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_queued_entries",
		Help: "Spend buckets (scope and minute) booked locally and not yet written to Redis.",
	}, func() float64 { return float64(l.Queued()) })
	l.dropped = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_dropped_entries_total",
		Help: "Spend buckets dropped from a full write queue since start: spend the shared books never saw.",
	}, func() float64 { return float64(l.Dropped()) })
	return l, nil
}

func minuteOf(t time.Time) int64 {
	s := t.Unix()
	m := s / 60
	if s%60 < 0 {
		m--
	}
	return m
}

func minuteTime(m int64) time.Time { return time.Unix(m*60, 0) }

// use marks scope as in use at minute m, so that Sync pulls it.
func (l *Ledger) use(scope string, m int64) {
	if v, ok := l.scopes.Load(scope); ok {
		if u := v.(*atomic.Int64); u.Load() != m {
			u.Store(m)
		}
		return
	}
	u := new(atomic.Int64)
	u.Store(m)
	l.scopes.LoadOrStore(scope, u)
}

// Add implements spend.Ledger: the entries apply to the local view at once
// and are queued for Redis. Entries older than now − MinRetention are not
// queued: no window reads them any more.
func (l *Ledger) Add(ctx context.Context, now time.Time, entries []spend.Entry) error {
	for i := range entries {
		if entries[i].Scope == "" {
			return fmt.Errorf("%w (entry %d)", spend.ErrEmptyScope, i)
		}
	}
	oldest := minuteOf(now) - retentionMinutes
	l.mu.Lock()
	defer l.mu.Unlock()
	// Under l.mu, so that the view and the queue change together: Sync
	// sets the view to Redis's value plus what is queued.
	if err := l.local.Add(ctx, now, entries); err != nil {
		return err
	}
	inUse := minuteOf(l.now())
	l.minute.Store(inUse)
	for _, e := range entries {
		l.use(e.Scope, inUse)
		m := minuteOf(e.At)
		if m < oldest || e.Amount == 0 {
			continue
		}
		byScope := l.mu.pending[m]
		if byScope == nil {
			byScope = make(map[string]int64)
			l.mu.pending[m] = byScope
		}
		if _, ok := byScope[e.Scope]; !ok {
			l.mu.npending++
		}
		byScope[e.Scope] += e.Amount
	}
	for l.mu.npending > l.bound {
		l.dropOldestLocked()
	}
	return nil
}

// dropOldestLocked drops the queue's oldest minute: the least likely to
// matter to any window, and the first to expire anyway.
func (l *Ledger) dropOldestLocked() {
	oldest := int64(0)
	first := true
	for m := range l.mu.pending {
		if first || m < oldest {
			oldest, first = m, false
		}
	}
	n := len(l.mu.pending[oldest])
	delete(l.mu.pending, oldest)
	l.mu.npending -= n
	l.mu.dropped += int64(n)
	l.log.Warn("spend write queue full: the oldest minute's spend dropped from the shared books", "buckets", n, "minute", minuteTime(oldest).UTC())
}

// Buckets implements spend.Ledger from the local view.
func (l *Ledger) Buckets(ctx context.Context, scope string, last time.Time, dst []int64) error {
	if scope != "" {
		l.use(scope, l.minute.Load())
	}
	return l.local.Buckets(ctx, scope, last, dst)
}

// Sum implements spend.Ledger from the local view.
func (l *Ledger) Sum(ctx context.Context, scope string, first, last time.Time) (int64, error) {
	if scope != "" {
		l.use(scope, l.minute.Load())
	}
	return l.local.Sum(ctx, scope, first, last)
}

// Queued is the number of buckets waiting to be written to Redis.
func (l *Ledger) Queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.mu.npending
	if l.mu.inflight != nil {
		n += len(l.mu.inflight.keys)
	}
	return n
}

// Dropped is the number of buckets dropped from a full queue since start.
func (l *Ledger) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.dropped
}

// Redis is the connection the ledger uses.
func (l *Ledger) Redis() *Redis { return l.r }

// Collector exposes sluice_store_queued_entries and
// sluice_store_dropped_entries_total.
func (l *Ledger) Collector() prometheus.Collector { return collectors{l.queued, l.dropped} }

// Run syncs every SyncInterval until ctx ends, then writes what is queued
// once more (bounded by the Redis timeout) and returns nil.
func (l *Ledger) Run(ctx context.Context) error {
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// The final write must not inherit the cancelled context.
			final := context.WithoutCancel(ctx)
			l.syncMu.Lock()
			err := l.flushAll(final)
			l.syncMu.Unlock()
			if n := l.Queued(); err != nil || n > 0 {
				l.log.Warn("stopping with spend not written to redis: the shared books will miss it", "buckets", n, "err", err)
			}
			return nil
		case <-tick.C:
		}
		_ = l.Sync(ctx)
	}
}

// flushAll writes batches until the queue is empty or a write fails.
func (l *Ledger) flushAll(ctx context.Context) error {
	for l.Queued() > 0 {
		if err := l.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Sync writes what is queued, then pulls the scopes in use. It is Run's
// step, for a caller with a loop of its own; calls are serialised. An error means Redis was not
// reached (or not fully); the local view is intact either way.
func (l *Ledger) Sync(ctx context.Context) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	err := l.flushAll(ctx)
	if err == nil {
		err = l.pull(ctx)
	}
	l.mu.Lock()
	was := l.mu.failing
	l.mu.failing = err != nil
	l.mu.Unlock()
	switch {
	case err != nil && !was && !errors.Is(err, ErrOpen):
		l.log.Warn("spend books: redis unreachable, serving from local books and queueing", "err", err)
	case err == nil && was:
		l.log.Info("spend books: redis reachable again, queued spend written")
	}
	return err
}

// flushScript applies one batch atomically, once: KEYS[1] is the batch's
// marker, set only if absent; a batch already marked is not applied again.
var flushScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 0 end
for i = 2, #KEYS do
  redis.call('INCRBY', KEYS[i], ARGV[i+1])
  redis.call('EXPIRE', KEYS[i], ARGV[2])
end
return 1`)

// flush writes one batch: the one in flight if a write of it failed, or
// up to maxBatch of the oldest queued buckets.
func (l *Ledger) flush(ctx context.Context) error {
	l.mu.Lock()
	b := l.mu.inflight
	if b == nil {
		b = l.takeLocked()
		l.mu.inflight = b
	}
	l.mu.Unlock()
	if b == nil {
		return nil
	}
	keys := append([]string{l.r.Key("batch", l.replica, b.id)}, b.keys...)
	args := append([]any{markerTTL.Milliseconds(), int64(bucketTTL / time.Second)}, b.amounts...)
	err := l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		return flushScript.Run(ctx, c, keys, args...).Err()
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.mu.inflight == b {
		l.mu.inflight = nil
	}
	l.mu.Unlock()
	return nil
}

func (l *Ledger) takeLocked() *writeBatch {
	if l.mu.npending == 0 {
		return nil
	}
	minutes := make([]int64, 0, len(l.mu.pending))
	for m := range l.mu.pending {
		minutes = append(minutes, m)
	}
	slices.Sort(minutes)
	b := &writeBatch{id: strconv.FormatUint(l.seq.Add(1), 10)}
	for _, m := range minutes {
		byScope := l.mu.pending[m]
		for scope, v := range byScope {
			if len(b.keys) == maxBatch {
				return b
			}
			b.keys = append(b.keys, l.bucketKey(scope, m))
			b.amounts = append(b.amounts, v)
			b.minutes = append(b.minutes, m)
			b.scopes = append(b.scopes, scope)
			delete(byScope, scope)
			l.mu.npending--
		}
		delete(l.mu.pending, m)
	}
	return b
}

func (l *Ledger) bucketKey(scope string, minute int64) string {
	return l.r.Key("spend", scope, strconv.FormatInt(minute, 10))
}

// pendingLocked is what is queued (or in flight) for one bucket: the part
// of the view Redis does not have yet.
func (l *Ledger) pendingLocked(scope string, m int64) int64 {
	v := l.mu.pending[m][scope]
	if b := l.mu.inflight; b != nil {
		for i := range b.keys {
			if b.minutes[i] == m && b.scopes[i] == scope {
				v += b.amounts[i].(int64)
			}
		}
	}
	return v
}

// pull reads the recent buckets of every scope in use (a few scopes'
// whole retention) and sets the view of each to Redis's value plus what
// this replica has queued for it.
func (l *Ledger) pull(ctx context.Context) error {
	now := l.now()
	cur := minuteOf(now)
	l.minute.Store(cur)
	var spans []span
	fulls := 0
	l.mu.Lock()
	l.scopes.Range(func(k, v any) bool {
		scope := k.(string)
		if v.(*atomic.Int64).Load() < cur-retentionMinutes {
			// Unused for a day: nothing any window reads.
			l.scopes.Delete(k)
			delete(l.mu.fullAt, scope)
			return true
		}
		s := span{scope: scope, first: cur - defaultRecent + 1, last: cur + 1}
		if at, ok := l.mu.fullAt[scope]; (!ok || now.Sub(at) >= defaultFullEvery) && fulls < fullPerSync {
			s.first, s.full = cur-retentionMinutes, true
			fulls++
		}
		spans = append(spans, s)
		return true
	})
	l.mu.Unlock()
	if len(spans) == 0 {
		return nil
	}
	vals := make([][]any, len(spans))
	if err := l.read(ctx, spans, vals); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var fix []spend.Entry
	for i, s := range spans {
		view := make([]int64, len(vals[i]))
		if err := l.local.Buckets(ctx, s.scope, minuteTime(s.last), view); err != nil {
			return err
		}
		for j, v := range vals[i] {
			var remote int64
			if str, ok := v.(string); ok {
				var err error
				if remote, err = strconv.ParseInt(str, 10, 64); err != nil {
					return fmt.Errorf("store: bucket %s: %w", l.bucketKey(s.scope, s.first+int64(j)), err)
				}
			}
			m := s.first + int64(j)
			if d := remote + l.pendingLocked(s.scope, m) - view[j]; d != 0 {
				fix = append(fix, spend.Entry{Scope: s.scope, At: minuteTime(m), Amount: d})
			}
		}
		if s.full {
			l.mu.fullAt[s.scope] = now
		}
	}
	return l.local.Add(ctx, now, fix)
}

// Mode is "redis" while Redis answers and "degraded" while the ledger
// serves from its local view alone: the breaker is open, or the last sync
// failed.
func (l *Ledger) Mode() string {
	l.mu.Lock()
	failing := l.mu.failing
	l.mu.Unlock()
	if l.r.Up() && !failing {
		return "redis"
	}
	return "degraded"
}

// span is a range of one scope's minutes to pull.
type span struct {
	scope       string
	first, last int64
	full        bool
}

// readChunk bounds the keys one call to Redis reads, so that a scope's
// whole retention (about 1,500 keys) is read in a few calls that each fit
// the timeout, rather than one that may not.
const readChunk = 512

// read fills vals[i] with the values of spans[i]'s keys, oldest first,
// pipelining them into calls of at most about readChunk keys.
func (l *Ledger) read(ctx context.Context, spans []span, vals [][]any) error {
	type chunk struct {
		span int
		keys []string
		cmd  *redis.SliceCmd
	}
	var call []chunk
	n := 0
	flush := func() error {
		if len(call) == 0 {
			return nil
		}
		err := l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := range call {
					call[i].cmd = p.MGet(ctx, call[i].keys...)
				}
				return nil
			})
			return err
		})
		if err != nil {
			return err
		}
		for _, c := range call {
			vals[c.span] = append(vals[c.span], c.cmd.Val()...)
		}
		call, n = call[:0], 0
		return nil
	}
	for i, s := range spans {
		for first := s.first; first <= s.last; first += readChunk {
			last := min(first+readChunk-1, s.last)
			keys := make([]string, 0, last-first+1)
			for m := first; m <= last; m++ {
				keys = append(keys, l.bucketKey(s.scope, m))
			}
			call = append(call, chunk{span: i, keys: keys})
			if n += len(keys); n >= readChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}
