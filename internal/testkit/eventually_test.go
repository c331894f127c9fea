package testkit

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records its message and ends
// the goroutine, as testing.T's does, without failing the test around it.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestEventuallyWithinReturnsOnceCondHolds: the wait ends at the look that
// finds cond true and returns the time it took, two polls for the third
// look (in a synctest bubble, where time is virtual and exact).
func TestEventuallyWithinReturnsOnceCondHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		looks := 0
		took := EventuallyWithin(t, time.Second, "the third look", func() bool { looks++; return looks == 3 })
		if looks != 3 || took != 2*pollEvery {
			t.Errorf("%d looks in %v, want 3 in %v", looks, took, 2*pollEvery)
		}
	})
}

// TestEventuallyFailsAfterItsLimit: a cond that never holds fails the test
// once the limit has passed, not before, with a message naming what.
func TestEventuallyFailsAfterItsLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit time.Duration
		wait  func(testing.TB, func() bool)
	}{
		{"Eventually", eventuallyLimit, func(tb testing.TB, cond func() bool) { Eventually(tb, "the answer", cond) }},
		{"EventuallyWithin", 5 * time.Second, func(tb testing.TB, cond func() bool) {
			EventuallyWithin(tb, 5*time.Second, "the answer", cond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &fatalRecorder{TB: t}
				start := time.Now()
				done := make(chan struct{})
				go func() {
					defer close(done)
					tc.wait(rec, func() bool { return false })
				}()
				<-done
				if took := time.Since(start); took <= tc.limit || took > tc.limit+pollEvery {
					t.Errorf("failed after %v, want just after %v", took, tc.limit)
				}
				if !strings.Contains(rec.msg, "the answer") {
					t.Errorf("message %q does not name what was waited for", rec.msg)
				}
			})
		})
	}
}
