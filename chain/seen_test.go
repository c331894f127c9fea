package chain

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// seenCore is a Core with one slot, a queue, generous retry budgets and
// the recognise stage as cfg says.
func seenCore(t testing.TB, rc RecogniseConfig) *Core {
	t.Helper()
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 1, MaxQueue: 8, InitialServiceTime: time.Second},
		Retries:   RetryConfig{Recognise: rc},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// copyOf is one copy of the request "prompt" of tenant a.
func copyOf(prompt uint64) Request {
	return Request{Tenant: "a", Class: admission.ClassInteractive, Model: "m", Fingerprint: prompt, Deadline: t0.Add(time.Hour)}
}

// The rule, step by step: a copy of a request one of whose copies failed —
// refused, withdrawn, settled with a failure or cut short — is a retry
// within the window, one more attempt than the copies before it, one retry
// per failure; a copy of one that succeeded, or of one still in flight, is
// not; another tenant, class, model or fingerprint is another request; a
// declared attempt is believed and left alone, a first one as much as a
// retry; and a copy refused for its retry budget leaves no failure, so
// that the next copy is a first attempt again.
func TestSeenRecognisesRetries(t *testing.T) {
	type step struct {
		at   time.Duration
		req  Request
		end  string // how the copy ends: refused (by the gate), budget (refused by the retry budgets), left (withdrawn from the queue), success, failure, canceled, "" (stays)
		want int    // Attempt after the stages
		seen bool   // RetrySeen
	}
	other := copyOf(1)
	other.Tenant = "b"
	otherModel := copyOf(1)
	otherModel.Model = "n"
	declared := copyOf(1)
	declared.Attempt, declared.AttemptDeclared = 2, true
	declaredFirst := copyOf(1)
	declaredFirst.AttemptDeclared = true
	none := copyOf(0)
	batch := copyOf(1)
	batch.Class = admission.ClassBatch
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"refused, then retried", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(1), "", 1, true}}},
		{"withdrawn, then retried", []step{{0, copyOf(1), "left", 0, false}, {time.Second, copyOf(1), "", 1, true}}},
		{"provider failed, then retried", []step{{0, copyOf(1), "failure", 0, false}, {time.Second, copyOf(1), "", 1, true}}},
		{"caller hung up, then retried", []step{{0, copyOf(1), "canceled", 0, false}, {time.Second, copyOf(1), "", 1, true}}},
		{"a retry of a retry is the next attempt", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(1), "refused", 1, true}, {2 * time.Second, copyOf(1), "", 2, true}}},
		{"succeeded: sampled again", []step{{0, copyOf(1), "success", 0, false}, {time.Second, copyOf(1), "success", 0, false}, {2 * time.Second, copyOf(1), "", 0, false}}},
		{"a success after a failure ends it", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(1), "success", 1, true}, {2 * time.Second, copyOf(1), "", 0, false}}},
		{"still in flight: a parallel sample", []step{{0, copyOf(1), "", 0, false}, {time.Second, copyOf(1), "", 0, false}}},
		{"window passed", []step{{0, copyOf(1), "refused", 0, false}, {DefaultRecogniseWindow + time.Millisecond, copyOf(1), "", 0, false}}},
		{"the window counts from the failure", []step{{0, copyOf(1), "", 0, false}, {0, copyOf(2), "failure:40s", 0, false}, {40*time.Second + DefaultRecogniseWindow, copyOf(2), "", 1, true}}},
		{"another prompt", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(2), "", 0, false}}},
		{"another tenant", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, other, "", 0, false}}},
		{"another model", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, otherModel, "", 0, false}}},
		{"a declared retry stands, and takes nothing", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, declared, "refused", 2, false}, {2 * time.Second, copyOf(1), "", 1, true}}},
		{"a declared first attempt is a first attempt", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, declaredFirst, "refused", 0, false}, {2 * time.Second, declaredFirst, "", 0, false}, {3 * time.Second, copyOf(1), "", 1, true}}},
		{"refused for its retry budget, it leaves no failure", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(1), "budget", 1, true}, {2 * time.Second, copyOf(1), "", 0, false}}},
		{"refused by the gate as a retry, it leaves one", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(1), "refused", 1, true}, {2 * time.Second, copyOf(1), "", 2, true}}},
		{"one failure, one retry", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, copyOf(1), "", 1, true}, {2 * time.Second, copyOf(1), "", 0, false}}},
		{"another class", []step{{0, copyOf(1), "refused", 0, false}, {time.Second, batch, "", 0, false}}},
		{"no fingerprint, no comparison", []step{{0, none, "refused", 0, false}, {time.Second, none, "", 0, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Many slots, so that nothing but the script refuses.
			c, err := NewCore(Config{Admission: admission.Config{Concurrency: 100, MaxQueue: 8, InitialServiceTime: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			var recognised uint64
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				tk := new(Ticket)
				d, err := c.Arrive(now, s.req, tk, true)
				if err != nil || d.Verdict != admission.Granted {
					t.Fatalf("step %d: %+v, %v; want granted", i, d, err)
				}
				if r := tk.Request(); r.Attempt != s.want || r.RetrySeen != s.seen {
					t.Fatalf("step %d: attempt %d, seen %v; want %d, %v", i, r.Attempt, r.RetrySeen, s.want, s.seen)
				}
				if s.seen {
					recognised++
				}
				end, after, _ := strings.Cut(s.end, ":")
				if after != "" {
					d, _ := time.ParseDuration(after)
					now = now.Add(d)
				}
				switch end {
				case "refused", "budget", "left":
					// What a refusal by a later stage or the gate, and
					// Core.Cancel of a queued ticket, do to the holds.
					cause := map[string]error{
						"refused": &admission.Rejection{Reason: admission.ReasonQueueWait},
						"budget":  &admission.Rejection{Reason: admission.ReasonRetryBudget},
						"left":    context.Canceled,
					}[end]
					tk.holds.cancel(now, cause)
					c.Release(now, tk, Outcome{Result: admission.Unused})
				case "success":
					err = c.Release(now, tk, Outcome{Result: admission.Success, ServiceTime: time.Second})
				case "failure":
					err = c.Release(now, tk, Outcome{Result: admission.Failure, ServiceTime: time.Second})
				case "canceled":
					err = c.Release(now, tk, Outcome{Result: admission.Canceled, ServiceTime: time.Second})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if got := c.RetriesRecognised(); got != recognised {
				t.Fatalf("RetriesRecognised %d, want %d", got, recognised)
			}
		})
	}
}

// Copies in parallel: two fail while a third is in flight, which then
// succeeds; the callers' retries of the two failed copies, arriving after
// that success, are retries — two, one per failure, and no third.
func TestSeenRetryAfterAParallelSuccess(t *testing.T) {
	c, err := NewCore(Config{Admission: admission.Config{Concurrency: 100, MaxQueue: 8, InitialServiceTime: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	copies := []*Ticket{new(Ticket), new(Ticket), new(Ticket)}
	for _, tk := range copies {
		if d, err := c.Arrive(t0, copyOf(1), tk, true); err != nil || d.Verdict != admission.Granted {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	c.Release(t0.Add(time.Second), copies[0], Outcome{Result: admission.Failure, ServiceTime: time.Second})
	c.Release(t0.Add(time.Second), copies[1], Outcome{Result: admission.Canceled, ServiceTime: time.Second})
	c.Release(t0.Add(2*time.Second), copies[2], Outcome{Result: admission.Success, ServiceTime: 2 * time.Second})
	for i, want := range []bool{true, true, false} {
		tk := new(Ticket)
		c.Arrive(t0.Add(3*time.Second), copyOf(1), tk, true)
		if r := tk.Request(); r.RetrySeen != want || (r.Attempt >= 1) != want {
			t.Fatalf("copy %d after the failures: attempt %d, seen %v; want a retry: %v", i, r.Attempt, r.RetrySeen, want)
		}
	}
}

// Recognised retries are the retry budgets' and the gate's retries: a
// headerless retry of a refused call is refused by an empty retry budget
// (without the stage it would have been a first attempt, and deposited),
// and one that passes waits at the retry rank, not its class's.
func TestSeenRetriesAreChargedAndRanked(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		c, err := NewCore(Config{
			Admission: admission.Config{Concurrency: 1, MaxQueue: 8, InitialServiceTime: time.Second},
			Retries:   recognising(tightRetries, RecogniseConfig{Disabled: disabled}),
		})
		if err != nil {
			t.Fatal(err)
		}
		// The slot is taken; a copy that cannot wait is refused by the gate.
		if d, _ := c.Arrive(t0, copyOf(9), new(Ticket), false); d.Verdict != admission.Granted {
			t.Fatalf("first call: %+v", d)
		}
		if d, _ := c.Arrive(t0, copyOf(1), new(Ticket), false); d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueWait {
			t.Fatalf("a call that cannot wait: %+v, want queue_wait", d)
		}
		d, _ := c.Arrive(t0.Add(time.Millisecond), copyOf(1), new(Ticket), true)
		if disabled {
			if d.Verdict != admission.Queued {
				t.Fatalf("without the stage, the copy is a first attempt: %+v, want queued", d)
			}
			continue
		}
		if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonRetryBudget {
			t.Fatalf("a headerless retry with an empty retry budget: %+v, want retry_budget", d)
		}
	}

	// With budgets to spare, it queues at the retry rank.
	c := seenCore(t, RecogniseConfig{})
	if d, _ := c.Arrive(t0, copyOf(9), new(Ticket), false); d.Verdict != admission.Granted {
		t.Fatalf("first call: %+v", d)
	}
	c.Arrive(t0, copyOf(1), new(Ticket), false) // refused: the gate is busy
	// A second later, the budget has accrued tokens.
	if d, _ := c.Arrive(t0.Add(time.Second), copyOf(1), new(Ticket), true); d.Verdict != admission.Queued {
		t.Fatalf("retry: %+v, want queued", d)
	}
	if d, _ := c.Arrive(t0.Add(time.Second), copyOf(2), new(Ticket), true); d.Verdict != admission.Queued {
		t.Fatalf("first attempt: %+v, want queued", d)
	}
	retryRank, _ := c.Gate().Rank(admission.Request{Class: admission.ClassInteractive, Attempt: 1})
	firstRank, _ := c.Gate().Rank(admission.Request{Class: admission.ClassInteractive})
	if retryRank == firstRank {
		t.Fatalf("ranks: retry %d = first %d; the test cannot tell them apart", retryRank, firstRank)
	}
	depth := c.Gate().Stats(t0.Add(time.Second)).Depth
	if depth[retryRank] != 1 || depth[firstRank] != 1 {
		t.Fatalf("queue depth by rank %v: want one call at the retry rank %d and one at %d", depth, retryRank, firstRank)
	}
}

// At most MaxEntries requests are remembered, and the oldest is forgotten
// first: its next copy is a first attempt again.
func TestSeenForgetsTheOldestFirst(t *testing.T) {
	c := seenCore(t, RecogniseConfig{MaxEntries: new(3)})
	fail := func(prompt uint64, at time.Duration) {
		tk := new(Ticket)
		c.Arrive(t0.Add(at), copyOf(prompt), tk, false)
		tk.holds.cancel(t0.Add(at), &admission.Rejection{Reason: admission.ReasonQueueWait})
		c.Release(t0.Add(at), tk, Outcome{Result: admission.Unused})
	}
	for p := uint64(1); p <= 5; p++ {
		fail(p, time.Duration(p)*time.Millisecond)
	}
	if n := c.stages.seen.len(); n != 3 {
		t.Fatalf("%d requests remembered, want the cap, 3", n)
	}
	// The remembered first: a forgotten one's copy is remembered anew,
	// which forgets another.
	for _, x := range []struct {
		p    uint64
		want bool
	}{{3, true}, {4, true}, {5, true}, {1, false}, {2, false}} {
		p, want := x.p, x.want
		tk := new(Ticket)
		c.Arrive(t0.Add(time.Second), copyOf(p), tk, false)
		if got := tk.Request().RetrySeen; got != want {
			t.Errorf("prompt %d: recognised %v, want %v", p, got, want)
		}
		tk.holds.cancel(t0.Add(time.Second), &admission.Rejection{Reason: admission.ReasonQueueWait})
		c.Release(t0.Add(time.Second), tk, Outcome{Result: admission.Unused})
	}
}

// Requests that can no longer matter — no copy open, no failure left
// within the window — are forgotten as new ones come, so the ring holds
// about a window's requests, not max's; one that may still matter stays,
// and one open for longer than a window (renewed) does not hold the others
// back.
func TestSeenForgetsWhatCannotMatter(t *testing.T) {
	s, _ := newSeen(RecogniseConfig{MaxEntries: new(1000)})
	admit := func(prompt uint64, at time.Duration) Hold {
		r := copyOf(prompt)
		h, _ := s.Admit(t0.Add(at), &r)
		return h
	}
	long := admit(1, 0)                      // open throughout
	admit(2, 0).Cancel(t0, context.Canceled) // a failure, within the window until 30s
	for p := uint64(10); p < 110; p++ {
		admit(p, 0).Settle(t0, Outcome{Result: admission.Success})
	}
	if n := s.len(); n != 102 {
		t.Fatalf("%d remembered, want 102", n)
	}
	r := copyOf(2)
	h, _ := s.Admit(t0.Add(time.Second), &r)
	if !r.RetrySeen {
		t.Fatal("the failed request was forgotten within its window")
	}
	h.Settle(t0.Add(2*time.Second), Outcome{Result: admission.Success})
	// A minute on: the long-lived request is renewed, not a wall, and the
	// requests of a minute ago are forgotten: what is left is the last
	// window's (the long-lived one, renewed, and the hundred new ones).
	for p := uint64(2000); p < 2100; p++ {
		admit(p, time.Minute).Settle(t0.Add(time.Minute), Outcome{Result: admission.Success})
	}
	if n := s.len(); n != 101 {
		t.Fatalf("%d remembered a minute on, want 101: the open request held the dead back", n)
	}
	long.Settle(t0.Add(time.Minute), Outcome{Result: admission.Failure})
	r = copyOf(1)
	if s.Admit(t0.Add(time.Minute), &r); !r.RetrySeen {
		t.Fatal("the long-lived request's failure was lost")
	}
}

func TestSeenConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg   RecogniseConfig
		field string
	}{
		{RecogniseConfig{Window: -time.Second}, "recognise: window"},
		{RecogniseConfig{MaxEntries: new(-1)}, "recognise: max_entries"},
		{RecogniseConfig{MaxEntries: new(MaxRecogniseEntries + 1)}, "recognise: max_entries"},
		{RecogniseConfig{MaxEntries: new(0)}, "recognise: max_entries: 0 remembers nothing"},
		{RecogniseConfig{Window: MaxRecogniseWindow + time.Second}, "recognise: window"},
	} {
		_, err := NewCore(Config{Admission: admission.Config{Concurrency: 1}, Retries: RetryConfig{Recognise: tc.cfg}})
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	// Disabled: out of the list, and a bad value under it does not matter.
	c, err := NewCore(Config{Admission: admission.Config{Concurrency: 1}, Retries: RetryConfig{Recognise: RecogniseConfig{Disabled: true, Window: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range c.stages.list() {
		if _, ok := st.(*seen); ok {
			t.Fatal("the recognise stage is in the list while disabled")
		}
	}
	// On by default, before the retry budgets.
	c = seenCore(t, RecogniseConfig{})
	l := c.stages.list()
	if len(l) < 3 || l[1] != Stage(c.stages.seen) || l[2] != Stage(c.stages.retries) {
		t.Fatalf("stages %T, want identify, recognise, retries, …", l)
	}
}

// The memory a remembered request costs, at the default cap: the entry
// and its index slot, measured on the heap. The figure is the one the
// documentation states (docs/retries.md).
func TestSeenMemoryPerEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 65536 entries")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, _ := newSeen(RecogniseConfig{})
	r := copyOf(0)
	for i := range DefaultRecogniseMaxEntries {
		r.Fingerprint = uint64(i) + 1
		s.Admit(t0, &r)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / DefaultRecogniseMaxEntries
	t.Logf("%.1f bytes per remembered request (%d entries: %.1f MiB)", per, s.len(), per*DefaultRecogniseMaxEntries/(1<<20))
	if s.len() != DefaultRecogniseMaxEntries || per > 80 {
		t.Fatalf("%d entries at %.1f bytes each; want %d at most 80 bytes", s.len(), per, DefaultRecogniseMaxEntries)
	}
	runtime.KeepAlive(s)
}

// Many goroutines on one stage, through the blocking Chain: the race
// detector's test of the stage's locking, and every copy's end booked.
func TestSeenConcurrent(t *testing.T) {
	c, err := New(Config{
		Admission: admission.Config{Concurrency: 64, MaxQueue: 64},
		Retries:   RetryConfig{Disabled: true, Recognise: RecogniseConfig{MaxEntries: new(16)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				r := copyOf(uint64(i%8) + 1)
				r.Tenant = fmt.Sprint("t", g%2)
				r.Deadline = time.Time{} // the context's
				p, err := c.Acquire(t.Context(), r)
				if err != nil {
					t.Error(err)
					return
				}
				res := admission.Success
				if i%3 == 0 {
					res = admission.Failure
				}
				p.Done(Outcome{Result: res, ServiceTime: time.Millisecond})
			}
		})
	}
	wg.Wait()
	if c.RetriesRecognised() == 0 {
		t.Fatal("no retry recognised among copies of failed calls")
	}
	if n := c.stages.seen.len(); n > 16 {
		t.Fatalf("%d requests remembered, cap 16", n)
	}
}

// BenchmarkSeen is the stage's cost per call — Admit, then Settle — from
// parallel goroutines: every call a new request (the ring turning over at
// its cap), or copies of a few.
func BenchmarkSeen(b *testing.B) {
	for _, bc := range []struct {
		name    string
		prompts uint64
	}{{"distinct", 1 << 40}, {"repeated", 64}} {
		b.Run(bc.name, func(b *testing.B) {
			s, _ := newSeen(RecogniseConfig{})
			var n atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := copyOf(0)
				for pb.Next() {
					i := n.Add(1)
					r.Fingerprint, r.Attempt, r.RetrySeen = i%bc.prompts+1, 0, false
					h, _ := s.Admit(t0, &r)
					res := admission.Success
					if i%4 == 0 {
						res = admission.Failure
					}
					h.Settle(t0, Outcome{Result: res})
				}
			})
		})
	}
}

// A recognised retry past its budgets is refused for them only when it
// would have to wait: a slot free with nobody waiting is taken, so that
// what recognition decides never leaves the provider idle. Both shells.
func TestSeenRetryPastItsBudgetTakesOnlyAFreeSlot(t *testing.T) {
	cfg := Config{
		Admission: admission.Config{Concurrency: 2, MaxQueue: 8, InitialServiceTime: time.Second},
		Retries:   tightRetries,
	}
	t.Run("Core", func(t *testing.T) {
		c, err := NewCore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		busy := new(Ticket)
		for _, tk := range []*Ticket{busy, new(Ticket)} {
			if d, _ := c.Arrive(t0, copyOf(9), tk, true); d.Verdict != admission.Granted {
				t.Fatalf("filling the slots: %+v", d)
			}
		}
		// A copy refused by the gate leaves a failure; a slot frees.
		if d, _ := c.Arrive(t0, copyOf(1), new(Ticket), false); d.Verdict != admission.Rejected {
			t.Fatalf("a copy that cannot wait: %+v", d)
		}
		c.Release(t0, busy, Outcome{Result: admission.Success, ServiceTime: time.Second})
		tk := new(Ticket)
		if d, _ := c.Arrive(t0, copyOf(1), tk, true); d.Verdict != admission.Granted || !tk.Request().RetrySeen {
			t.Fatalf("a recognised retry past its budget, a slot free: %+v (seen %v), want granted", d, tk.Request().RetrySeen)
		}
		// Every slot busy: the next recognised retry is refused for its
		// budget rather than queued.
		c.Arrive(t0, copyOf(1), new(Ticket), false)
		d, _ := c.Arrive(t0, copyOf(1), new(Ticket), true)
		if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonRetryBudget {
			t.Fatalf("a recognised retry past its budget, no slot free: %+v, want retry_budget", d)
		}
		if q := c.Gate().Queued(); q != 0 {
			t.Fatalf("%d queued, want none", q)
		}
	})
	t.Run("Chain", func(t *testing.T) {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		copyOf := func(prompt uint64) Request {
			r := copyOf(prompt)
			r.Deadline = time.Now().Add(time.Hour)
			return r
		}
		var held []*Permit
		for range 2 {
			p, err := c.Acquire(ctx, copyOf(9))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, p)
		}
		short, cancel := context.WithCancel(ctx)
		cancel() // a copy whose caller left at once: a failure
		if _, err := c.Acquire(short, copyOf(1)); err == nil {
			t.Fatal("a cancelled copy was admitted")
		}
		held[0].Done(Outcome{Result: admission.Success})
		p, err := c.Acquire(ctx, copyOf(1))
		if err != nil || !p.Request().RetrySeen {
			t.Fatalf("a recognised retry past its budget, a slot free: %v, want granted as a retry", err)
		}
		if _, err := c.Acquire(short, copyOf(1)); err == nil {
			t.Fatal("a cancelled copy was admitted")
		}
		var rej *admission.Rejection
		if _, err := c.Acquire(ctx, copyOf(1)); !errors.As(err, &rej) || rej.Reason != admission.ReasonRetryBudget {
			t.Fatalf("a recognised retry past its budget, no slot free: %v, want retry_budget", err)
		}
		p.Done(Outcome{Result: admission.Success})
		held[1].Done(Outcome{Result: admission.Success})
	})
}

// recognising is r with recognition configured as rc.
func recognising(r RetryConfig, rc RecogniseConfig) RetryConfig {
	r.Recognise = rc
	return r
}
