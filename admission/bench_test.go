package admission

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// BenchmarkAcquireDone is the uncontended hot path: a free slot, a deadline
// far away, the permit released at once with a measured service time.
func BenchmarkAcquireDone(b *testing.B) {
	g, err := New(Config{Concurrency: 8, MaxQueue: 1024})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := Request{Class: ClassInteractive, Tenant: "t", Key: "gpt", Deadline: time.Now().Add(time.Hour)}
	b.ReportAllocs()
	for b.Loop() {
		p, err := g.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		p.Done(Outcome{ServiceTime: time.Millisecond})
	}
}

// BenchmarkTryAcquireReject is a refusal with its honest estimate: every slot
// busy, a queue ahead, the request told its wait and when to retry.
func BenchmarkTryAcquireReject(b *testing.B) {
	g, err := New(Config{Concurrency: 1, MaxQueue: 1024, InitialServiceTime: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	hold, err := g.TryAcquire(Request{})
	if err != nil {
		b.Fatal(err)
	}
	defer hold.Drop()
	req := Request{Class: ClassBatch, Tenant: "t", Deadline: time.Now().Add(time.Hour)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.TryAcquire(req); err == nil {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkAcquireDoneParallel is contended throughput: GOMAXPROCS
// goroutines sharing a gate with fewer slots than callers, so some wait.
func BenchmarkAcquireDoneParallel(b *testing.B) {
	for _, slots := range []int{1, 64} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) {
			g, err := New(Config{Concurrency: slots, MaxQueue: 1 << 16})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				req := Request{Tenant: "t"}
				for pb.Next() {
					p, err := g.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					p.Done(Outcome{ServiceTime: time.Microsecond})
				}
			})
		})
	}
}

// BenchmarkQueuedWaiterMemory measures the memory one queued request costs:
// the Core's queue entry alone (what a simulator or an asynchronous caller
// pays), and a blocked Acquire (its waiter, plus the caller's goroutine,
// which is reported apart by subtracting goroutines parked on a channel).
func BenchmarkQueuedWaiterMemory(b *testing.B) {
	const n = 100_000
	b.Run("core", func(b *testing.B) {
		for b.Loop() {
			core, err := NewCore(Config{Concurrency: 1, MaxQueue: n})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(0, 0)
			if _, err := core.Arrive(now, Request{}, nil, false); err != nil {
				b.Fatal(err)
			}
			before := heapInUse()
			for i := range n {
				t := new(Ticket) // one allocation per ticket, as a caller would
				if d, err := core.Arrive(now, Request{Tenant: tenantName(i % 16)}, t, true); err != nil || d.Verdict != Queued {
					b.Fatalf("arrive %d: %v %v", i, d.Verdict, err)
				}
			}
			after := heapInUse()
			b.ReportMetric(float64(after-before)/n, "B/waiter")
			runtime.KeepAlive(core)
		}
	})
	b.Run("acquire", func(b *testing.B) {
		for b.Loop() {
			parked := goroutineCost(b, n, func(release <-chan struct{}) { <-release })
			g, err := New(Config{Concurrency: 1, MaxQueue: n})
			if err != nil {
				b.Fatal(err)
			}
			hold, _ := g.TryAcquire(Request{})
			ctx, cancel := context.WithCancel(context.Background())
			blocked := goroutineCost(b, n, func(release <-chan struct{}) {
				_, _ = g.Acquire(ctx, Request{})
			}, func() bool { return g.Stats().Queued == n }, cancel)
			hold.Drop()
			b.ReportMetric(blocked/n, "B/blocked-goroutine")
			b.ReportMetric((blocked-parked)/n, "B/waiter")
		}
	})
}

func tenantName(i int) string { return string(rune('a' + i)) }

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// goroutineCost starts n goroutines running f, waits until ready() (or, by
// default, until they all started), measures heap+stack, then releases them
// and waits for them to end. It returns the bytes they held in total.
func goroutineCost(b *testing.B, n int, f func(release <-chan struct{}), hooks ...any) float64 {
	release := make(chan struct{})
	var started, ended sync.WaitGroup
	base := heapInUse()
	started.Add(n)
	ended.Add(n)
	for range n {
		go func() {
			defer ended.Done()
			started.Done()
			f(release)
		}()
	}
	started.Wait()
	if len(hooks) > 0 {
		ready := hooks[0].(func() bool)
		for !ready() {
			runtime.Gosched()
		}
	}
	used := float64(heapInUse() - base)
	close(release)
	if len(hooks) > 1 {
		hooks[1].(context.CancelFunc)()
	}
	ended.Wait()
	return used
}

// BenchmarkBaselineSemaphore is the floor to compare against, run in the
// same session: golang.org/x/sync/semaphore acquire+release, which neither
// orders, estimates nor measures anything.
func BenchmarkBaselineSemaphore(b *testing.B) {
	s := semaphore.NewWeighted(8)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Acquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
		s.Release(1)
	}
}

// BenchmarkBaselineClock is the cost of one time.Now on this machine: the
// gate reads the clock twice per Acquire+Done (once per TryAcquire), so this
// bounds how fast it can be.
func BenchmarkBaselineClock(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}
