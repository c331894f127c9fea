package guard

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// The listener refuses connections before any request is read, so no
// access-log line is written for them by the gateway; the refusal log
// writes them instead, so that the log and what clients saw agree. One
// line per refusal would let a flood write the log as fast as it
// connects, so they are summed: every refusal is in a line written within
// refusalWindow of it, one line per reason and client address with its
// count, at most refusalAddrs addresses per reason and window (the
// busiest), the rest summed in one line with addr "other". The counts of
// the lines add up to sluice_connections_refused_total.

const (
	// refusalWindow is how long refusals are summed before their lines
	// are written.
	refusalWindow = time.Second
	// refusalAddrs bounds the lines of one reason in one window.
	refusalAddrs = 16
)

// refusalStatus is the status each reason's canned refusal carries: 0
// for an accept that failed, a connection closed for its PROXY header or
// evicted at max_connections (pending.go), which answered nobody.
var refusalStatus = map[string]int{"max_connections": 503, "unauthenticated_per_ip": 429, "out_of_descriptors": 0, "proxy_header": 0, "evicted": 0}

type refusalKey struct {
	reason string
	addr   netip.Addr // the zero Addr: no connection (out_of_descriptors)
}

// refusalLog sums refusals by reason and address and writes them to log.
// Safe for concurrent use.
type refusalLog struct {
	log    *slog.Logger
	window time.Duration

	mu     sync.Mutex
	counts map[refusalKey]int
	timer  *time.Timer // pending flush; nil when nothing is pending
	closed bool
}

func newRefusalLog(log *slog.Logger, window time.Duration) *refusalLog {
	return &refusalLog{log: log, window: window, counts: map[refusalKey]int{}}
}

// add counts a refusal; its line is written at the end of the window that
// the first refusal since the last lines opened, or at close.
func (r *refusalLog) add(reason string, addr netip.Addr) {
	r.mu.Lock()
	r.counts[refusalKey{reason, addr}]++
	closed := r.closed
	if r.timer == nil && !closed {
		r.timer = time.AfterFunc(r.window, r.flush)
	}
	r.mu.Unlock()
	if closed { // a refusal racing the listener's close: written at once
		r.flush()
	}
}

// close writes what is pending at once: the listener is closing. No timer
// is started after it.
func (r *refusalLog) close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.flush()
}

type refusalCount struct {
	refusalKey
	n int
}

// flush writes the pending counts as lines.
func (r *refusalLog) flush() {
	r.mu.Lock()
	counts := r.counts
	r.counts, r.timer = map[refusalKey]int{}, nil
	r.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	byReason := map[string][]refusalCount{}
	for k, n := range counts {
		byReason[k.reason] = append(byReason[k.reason], refusalCount{k, n})
	}
	ctx := context.Background()
	for _, reason := range slices.Sorted(maps.Keys(byReason)) {
		cs := byReason[reason]
		slices.SortFunc(cs, func(a, b refusalCount) int {
			return cmp.Or(cmp.Compare(b.n, a.n), a.addr.Compare(b.addr))
		})
		other, addrs := 0, 0
		for i, c := range cs {
			if i >= refusalAddrs {
				other += c.n
				addrs++
				continue
			}
			addr := ""
			if c.addr.IsValid() {
				addr = c.addr.String()
			}
			r.log.LogAttrs(ctx, slog.LevelInfo, "connections refused", slog.String("reason", reason),
				slog.Int("status", refusalStatus[reason]), slog.String("addr", addr), slog.Int("count", c.n),
				slog.Int64("window_ms", r.window.Milliseconds()))
		}
		if other > 0 {
			r.log.LogAttrs(ctx, slog.LevelInfo, "connections refused", slog.String("reason", reason),
				slog.Int("status", refusalStatus[reason]), slog.String("addr", "other"), slog.Int("addresses", addrs),
				slog.Int("count", other), slog.Int64("window_ms", r.window.Milliseconds()))
		}
	}
}
