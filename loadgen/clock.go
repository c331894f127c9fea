package loadgen

import (
	"context"
	"time"
)

// clock is the runner's only source of time. Run uses the wall clock; tests
// inject a virtual one so that waits such as Retry-After are asserted, not
// slept through.
type clock interface {
	Now() time.Time
	// Sleep waits for d, or returns ctx's error as soon as ctx is done. A
	// non-positive d returns at once (with ctx's error, if any).
	Sleep(ctx context.Context, d time.Duration) error
	// WithTimeout derives a context that is cancelled d from now.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (wallClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
