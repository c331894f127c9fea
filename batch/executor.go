package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Doer runs one item the way a live call runs: through the admission
// chain at the batch class, then to the provider.
type Doer interface {
	// Do runs c's request and returns what came of it. It must return when
	// ctx ends.
	Do(ctx context.Context, c Claim) Response
	// Waiting is how many items wait in the gate for a slot.
	Waiting() int
}

// Response is what came of one run of an item.
type Response struct {
	// Status, RequestID and Body are the provider's answer (or the
	// gateway's, for a failure of the provider).
	Status    int
	RequestID string
	Body      []byte
	// Usage is the answer's usage (UsageOf its body), summed into the
	// batch's.
	Usage Usage
	// Deferred says sluice refused to run it now (overload, the spend
	// ceiling, draining): the item goes back to the queue, not counted as
	// an attempt, and the executor waits RetryAfter before starting more.
	Deferred   bool
	RetryAfter time.Duration
	// Err says there was no answer: the run's context ended.
	Err error
}

// Stats are an executor's counters since it started.
type Stats struct {
	Completed, Failed, Expired, Deferred, Retried uint64
}

// Executor runs the store's items. It starts an item only while fewer
// than MaxWaiting wait in the gate, so that items take the slots live work
// leaves idle instead of filling the queue, and pauses when sluice defers
// one.
type Executor struct {
	cfg    ExecutorConfig
	kick   chan struct{}
	stats  struct{ completed, failed, expired, deferred, retried atomic.Uint64 }
	paused atomic.Int64 // unix nanos until which no item starts
	ended  Throughput   // when items ended, for the rate the backlog drains at
}

// Throughput remembers when the last items ended (ran to a result) and
// gives the rate they ended at. Safe for concurrent use.
type Throughput struct {
	mu   sync.Mutex
	ring [throughputRing]time.Time
	n    int // items recorded, ever
}

const throughputRing = 512

// Add records an item that ended at t.
func (r *Throughput) Add(t time.Time) {
	r.mu.Lock()
	r.ring[r.n%throughputRing] = t
	r.n++
	r.mu.Unlock()
}

// Rate is the items per second that ended within window before now,
// measured from the first of them; ok is false with fewer than min of
// them, or when they span less than a second.
func (r *Throughput) Rate(now time.Time, window time.Duration, min int) (perSecond float64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	count, first := 0, now
	for i := 1; i <= r.n && i <= throughputRing; i++ {
		t := r.ring[(r.n-i)%throughputRing]
		if now.Sub(t) > window {
			break
		}
		count, first = count+1, t
	}
	span := now.Sub(first)
	if count < min || span < time.Second {
		return 0, false
	}
	return float64(count) / span.Seconds(), true
}

// ExecutorConfig configures an Executor. Store and Doer are required.
type ExecutorConfig struct {
	Store JobStore
	Doer  Doer
	// Owner names this executor's claims. Empty means "local".
	Owner string
	// MaxWaiting bounds the items waiting in the gate. Zero means 2.
	MaxWaiting int
	// MaxRunning bounds the items started and not finished. Zero means 64.
	MaxRunning int
	// MaxRunningFunc, when set, is the bound instead, read each time the
	// executor looks for work: the gateway's slots, which a reload or the
	// cluster's lease may move, plus MaxWaiting.
	MaxRunningFunc func() int
	// MaxAttempts is how many runs an item gets when the provider fails
	// (5xx, 429, no answer) before it is failed. Zero means 5.
	MaxAttempts int
	// Lease is how long a claim lasts before another runner may take the
	// item. Zero means 1h: longer than any one call.
	Lease time.Duration
	// Poll is how often it looks for work when nothing wakes it. Zero
	// means 50ms.
	Poll time.Duration
	// Grace is how long running items may finish after Run's context ends
	// before they are cancelled (and released, to run after a restart).
	Grace time.Duration
	// Log receives failures of the store. Nil means slog.Default().
	Log *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// OnResult, when set, is called after results were written (a batch
	// may have settled, for Finalize). Nil means nothing is called.
	OnResult func()
}

// NewExecutor returns an executor; Run runs it.
func NewExecutor(cfg ExecutorConfig) *Executor {
	if cfg.Owner == "" {
		cfg.Owner = "local"
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = 2
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 64
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Hour
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnResult == nil {
		cfg.OnResult = func() {}
	}
	return &Executor{cfg: cfg, kick: make(chan struct{}, 1)}
}

// Notify wakes the executor: a batch was created.
func (e *Executor) Notify() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Rate is the items per second that ended over the last 30 seconds; ok
// is false until 10 have.
func (e *Executor) Rate() (perSecond float64, ok bool) {
	return e.ended.Rate(e.cfg.Now(), 30*time.Second, 10)
}

// Stats returns the counters.
func (e *Executor) Stats() Stats {
	return Stats{Completed: e.stats.completed.Load(), Failed: e.stats.failed.Load(), Expired: e.stats.expired.Load(),
		Deferred: e.stats.deferred.Load(), Retried: e.stats.retried.Load()}
}

// Run runs items until ctx ends, then lets the running ones finish for
// cfg.Grace, cancels the rest (their items go back to the queue) and
// returns.
func (e *Executor) Run(ctx context.Context) {
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	var wg sync.WaitGroup
	var running atomic.Int64
	tick := time.NewTicker(e.cfg.Poll)
	defer tick.Stop()
	var lastExpiry time.Time
	for ctx.Err() == nil {
		now := e.cfg.Now()
		if now.Sub(lastExpiry) >= time.Second {
			lastExpiry = now
			if n, err := e.cfg.Store.ExpireDue(ctx, now); err != nil {
				e.cfg.Log.Error("batch: expiring batches failed", "err", err)
			} else if n > 0 {
				e.stats.expired.Add(uint64(n))
				e.cfg.OnResult()
			}
		}
		if free := e.room(now, int(running.Load())); free > 0 {
			claims, err := e.cfg.Store.Claim(ctx, now, e.cfg.Owner, e.cfg.Lease, free)
			if err != nil && ctx.Err() == nil {
				e.cfg.Log.Error("batch: claiming items failed", "err", err)
				e.pause(5 * time.Second) // a failing store is not polled every tick
			}
			for _, c := range claims {
				running.Add(1)
				wg.Go(func() {
					defer func() { running.Add(-1); e.Notify() }()
					e.run(runCtx, c)
				})
			}
			if len(claims) == free {
				// There may be more to start at once: look again right
				// after the new ones reached the gate.
				select {
				case <-ctx.Done():
				case <-time.After(e.cfg.Poll / 10):
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-e.kick:
		case <-tick.C:
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.cfg.Grace):
		cancelRuns()
		<-done
	}
}

// room is how many items may start now.
func (e *Executor) room(now time.Time, running int) int {
	if now.UnixNano() < e.paused.Load() {
		return 0
	}
	limit := e.cfg.MaxRunning
	if e.cfg.MaxRunningFunc != nil {
		limit = e.cfg.MaxRunningFunc()
	}
	return min(limit-running, e.cfg.MaxWaiting-e.cfg.Doer.Waiting())
}

func (e *Executor) pause(d time.Duration) {
	d = min(max(d, 100*time.Millisecond), 5*time.Second)
	until := e.cfg.Now().Add(d).UnixNano()
	for {
		cur := e.paused.Load()
		if cur >= until || e.paused.CompareAndSwap(cur, until) {
			return
		}
	}
}

// run runs one item and records what came of it.
func (e *Executor) run(ctx context.Context, c Claim) {
	bg := context.WithoutCancel(ctx) // the store's writes outlive a cancelled run
	if !e.cfg.Now().Before(c.Deadline) {
		e.complete(bg, c, Result{Kind: Expired, Line: ErrorLine(c.Batch, c.Index, c.Request.CustomID, "batch_expired",
			"this request could not be executed before the completion window expired")})
		return
	}
	resp := e.cfg.Doer.Do(ctx, c)
	switch {
	case resp.Err != nil || (ctx.Err() != nil && resp.Status == 0):
		e.release(bg, c, false)
	case resp.Deferred:
		e.stats.deferred.Add(1)
		e.pause(resp.RetryAfter)
		e.release(bg, c, false)
	case resp.Status >= 200 && resp.Status < 300:
		e.complete(bg, c, Result{Kind: Succeeded, Line: Line(c, resp.Status, resp.RequestID, resp.Body), Usage: resp.Usage})
	case resp.Status == 0 || resp.Status == 429 || resp.Status >= 500:
		if c.Attempts+1 < e.cfg.MaxAttempts && e.cfg.Now().Before(c.Deadline) {
			e.stats.retried.Add(1)
			e.pause(resp.RetryAfter)
			e.release(bg, c, true)
			return
		}
		e.complete(bg, c, Result{Kind: Failed, Line: Line(c, resp.Status, resp.RequestID, resp.Body), Usage: resp.Usage})
	default:
		e.complete(bg, c, Result{Kind: Failed, Line: Line(c, resp.Status, resp.RequestID, resp.Body), Usage: resp.Usage})
	}
}

func (e *Executor) complete(ctx context.Context, c Claim, r Result) {
	written, err := e.cfg.Store.Complete(ctx, c, r, e.cfg.Now())
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		e.cfg.Log.Error("batch: writing a result failed", "batch", c.Batch, "index", c.Index, "err", err)
	case !written:
	case r.Kind == Expired:
		e.cfg.OnResult()
		e.stats.expired.Add(1)
	default: // ran to an answer: counts in the rate
		e.cfg.OnResult()
		e.ended.Add(e.cfg.Now())
		if r.Kind == Succeeded {
			e.stats.completed.Add(1)
		} else {
			e.stats.failed.Add(1)
		}
	}
}

func (e *Executor) release(ctx context.Context, c Claim, attempted bool) {
	if err := e.cfg.Store.Release(ctx, c, attempted, e.cfg.Now()); err != nil {
		e.cfg.Log.Error("batch: releasing an item failed", "batch", c.Batch, "index", c.Index, "err", err)
	}
	e.cfg.OnResult() // an item of a cancelled batch is cancelled instead
}
