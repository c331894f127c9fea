package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/batch"
)

// gate is a Doer with a fixed number of slots: a run waits for one, holds
// it for service, then answers with what answer says for the item.
type gate struct {
	mu       sync.Mutex
	slots    int
	waiting  int
	maxWait  int
	calls    map[string]int
	service  time.Duration
	answer   func(customID string, call int) batch.Response
	freeSlot chan struct{}
}

func newGate(slots int, service time.Duration, answer func(string, int) batch.Response) *gate {
	g := &gate{slots: slots, calls: map[string]int{}, service: service, answer: answer, freeSlot: make(chan struct{}, 1000)}
	for range slots {
		g.freeSlot <- struct{}{}
	}
	return g
}

func (g *gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *gate) Do(ctx context.Context, c batch.Claim) batch.Response {
	g.mu.Lock()
	g.waiting++
	g.maxWait = max(g.maxWait, g.waiting)
	g.mu.Unlock()
	select {
	case <-g.freeSlot:
	case <-ctx.Done():
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
		return batch.Response{Err: ctx.Err()}
	}
	if !time.Now().Before(c.Deadline) { // the gate expires what it dequeues too late
		g.freeSlot <- struct{}{}
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
		return batch.Response{Deferred: true}
	}
	g.mu.Lock()
	g.waiting--
	g.calls[c.Request.CustomID]++
	n := g.calls[c.Request.CustomID]
	g.mu.Unlock()
	defer func() { g.freeSlot <- struct{}{} }()
	select {
	case <-time.After(g.service):
	case <-ctx.Done():
		return batch.Response{Err: ctx.Err()}
	}
	return g.answer(c.Request.CustomID, n)
}

func input(n int) []batch.Request {
	var out []batch.Request
	for i := range n {
		out = append(out, batch.Request{CustomID: fmt.Sprint(i), Method: "POST", URL: "/v1/embeddings", Body: json.RawMessage(`{}`)})
	}
	return out
}

func waitFor(t *testing.T, s batch.JobStore, id string, done func(batch.Batch) bool) batch.Batch {
	t.Helper()
	for {
		b, err := s.Batch(context.Background(), "t", id)
		if err != nil {
			t.Fatal(err)
		}
		if done(b) {
			return b
		}
		time.Sleep(100 * time.Millisecond) // virtual time
	}
}

// Every kind of answer ends the way it should: a success in the output, a
// refusal by sluice deferred and run again, a provider failure retried up
// to MaxAttempts and then failed, a 400 failed at once; and no more than
// MaxWaiting items ever wait for a slot.
func TestExecutorOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := openBolt(t, filepath.Join(t.TempDir(), "jobs.db"))
		defer s.Close()
		g := newGate(2, 100*time.Millisecond, func(id string, call int) batch.Response {
			switch {
			case id == "1" && call == 1:
				return batch.Response{Deferred: true, RetryAfter: time.Second}
			case id == "2":
				return batch.Response{Status: 500, Body: []byte(`{"error":"boom"}`)}
			case id == "3":
				return batch.Response{Status: 400, Body: []byte(`{"error":"bad"}`)}
			}
			return batch.Response{Status: 200, RequestID: "req-" + id, Body: []byte(`{"ok":true}`)}
		})
		now := time.Now()
		if err := s.CreateBatch(ctx, batch.Batch{ID: "b", Tenant: "t", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, input(20)); err != nil {
			t.Fatal(err)
		}
		e := batch.NewExecutor(batch.ExecutorConfig{Store: s, Doer: g, MaxWaiting: 2, MaxAttempts: 3})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { e.Run(runCtx); close(done) }()
		waitFor(t, s, "b", func(b batch.Batch) bool { return b.Status == batch.StatusFinalizing })
		stop()
		<-done
		b, err := s.Finalize(ctx, "t", "b", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if b.Status != batch.StatusCompleted || b.Counts != (batch.Counts{Total: 20, Completed: 18, Failed: 2}) {
			t.Fatalf("ended %+v", b)
		}
		if g.calls["1"] != 2 || g.calls["2"] != 3 || g.calls["3"] != 1 || g.calls["0"] != 1 {
			t.Errorf("calls %v: want 1 twice (deferred once), 2 three times (MaxAttempts), 3 once", g.calls)
		}
		if g.maxWait > 2 {
			t.Errorf("%d items waited for a slot at once, want ≤ MaxWaiting 2", g.maxWait)
		}
		st := e.Stats()
		if st.Completed != 18 || st.Failed != 2 || st.Deferred != 1 || st.Retried != 2 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A batch whose window passes with items left expires them; the executor
// never starts an item past its deadline.
func TestExecutorExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := openBolt(t, filepath.Join(t.TempDir(), "jobs.db"))
		defer s.Close()
		g := newGate(1, time.Second, func(id string, call int) batch.Response {
			return batch.Response{Status: 200, Body: []byte(`{}`)}
		})
		now := time.Now()
		if err := s.CreateBatch(ctx, batch.Batch{ID: "b", Tenant: "t", CreatedAt: now, ExpiresAt: now.Add(5500 * time.Millisecond)}, input(10)); err != nil {
			t.Fatal(err)
		}
		e := batch.NewExecutor(batch.ExecutorConfig{Store: s, Doer: g, MaxWaiting: 1})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { e.Run(runCtx); close(done) }()
		waitFor(t, s, "b", func(b batch.Batch) bool { return b.Status == batch.StatusFinalizing })
		stop()
		<-done
		b, err := s.Finalize(ctx, "t", "b", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if b.Status != batch.StatusExpired || b.Counts.Total != 10 || b.Counts.Completed+b.Counts.Failed != 10 || b.Counts.Completed < 4 || b.Counts.Completed > 6 {
			t.Fatalf("ended %+v", b)
		}
		g.mu.Lock()
		calls := len(g.calls)
		g.mu.Unlock()
		if calls > b.Counts.Completed+1 {
			t.Errorf("%d items ran for %d completed", calls, b.Counts.Completed)
		}
	})
}

func TestThroughputRate(t *testing.T) {
	var r batch.Throughput
	t0 := time.Unix(1000, 0)
	if _, ok := r.Rate(t0, 30*time.Second, 1); ok {
		t.Fatal("a rate with nothing recorded")
	}
	for i := range 600 { // 10 a second for a minute: the ring keeps the last 512
		r.Add(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	now := t0.Add(60 * time.Second)
	if rate, ok := r.Rate(now, 30*time.Second, 10); !ok || rate < 9.5 || rate > 10.5 {
		t.Fatalf("rate %v %v, want 10/s", rate, ok)
	}
	if _, ok := r.Rate(now.Add(time.Minute), 30*time.Second, 10); ok {
		t.Fatal("a rate from items older than the window")
	}
	if _, ok := r.Rate(now, 30*time.Second, 400); ok {
		t.Fatal("a rate from fewer items than min")
	}
}

// running is a Doer that serves every item at once in a second, counting
// the items running together.
type running struct {
	mu       sync.Mutex
	now, top int
}

func (r *running) Waiting() int { return 0 }

func (r *running) Do(ctx context.Context, c batch.Claim) batch.Response {
	r.mu.Lock()
	r.now++
	r.top = max(r.top, r.now)
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.now--; r.mu.Unlock() }()
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return batch.Response{Err: ctx.Err()}
	}
	return batch.Response{Status: 200, Body: []byte(`{}`)}
}

func (r *running) peak() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.top
	r.top = r.now
	return p
}

// MaxRunningFunc is read as the executor goes: raising the bound (a reload
// that adds slots) lets more items run at once, lowering it lets fewer
// start — the bound is not the one the executor started with.
func TestExecutorMaxRunningMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := openBolt(t, filepath.Join(t.TempDir(), "jobs.db"))
		defer s.Close()
		now := time.Now()
		if err := s.CreateBatch(ctx, batch.Batch{ID: "b", Tenant: "t", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, input(200)); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		limit := 2
		setLimit := func(n int) { mu.Lock(); limit = n; mu.Unlock() }
		d := &running{}
		e := batch.NewExecutor(batch.ExecutorConfig{Store: s, Doer: d, MaxWaiting: 100, MaxRunning: 2,
			MaxRunningFunc: func() int { mu.Lock(); defer mu.Unlock(); return limit }})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { e.Run(runCtx); close(done) }()
		time.Sleep(3 * time.Second)
		if p := d.peak(); p != 2 {
			t.Errorf("%d ran at once under a bound of 2", p)
		}
		setLimit(6)
		time.Sleep(3 * time.Second)
		if p := d.peak(); p != 6 {
			t.Errorf("%d ran at once after the bound rose to 6", p)
		}
		setLimit(3)
		time.Sleep(1500 * time.Millisecond) // the six running end within a second
		d.peak()
		time.Sleep(2 * time.Second)
		if p := d.peak(); p != 3 {
			t.Errorf("%d ran at once after the bound fell to 3", p)
		}
		stop()
		<-done
	})
}
