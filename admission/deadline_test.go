package admission

import (
	"context"
	"testing"
	"time"
)

// TestCallDeadlineIsTheEarlier pins the one rule for a call's deadline:
// the earlier of the request's and the context's, either alone when the
// other is absent.
func TestCallDeadlineIsTheEarlier(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	early, late := base.Add(time.Second), base.Add(time.Minute)
	ctxAt := func(d time.Time) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		own  time.Time
		want time.Time
	}{
		{"neither", context.Background(), time.Time{}, time.Time{}},
		{"nil context", nil, early, early},
		{"own only", context.Background(), early, early},
		{"context only", ctxAt(late), time.Time{}, late},
		{"own earlier", ctxAt(late), early, early},
		{"context earlier", ctxAt(early), late, early},
	} {
		if got := CallDeadline(tc.ctx, tc.own); !got.Equal(tc.want) {
			t.Errorf("%s: CallDeadline = %v, want %v", tc.name, got, tc.want)
		}
	}
}
