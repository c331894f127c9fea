package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/spend"
)

// TestBreaker walks the breaker through its states with time as an input:
// three failures open it, it refuses until the backoff has passed, one
// probe goes through at a time, a failed probe doubles the backoff (up to
// its limit), a successful one closes it. Each transition is logged once.
func TestBreaker(t *testing.T) {
	logs := &logCounter{}
	b := breaker{threshold: 3, base: time.Second, limit: 3 * time.Second, backoff: time.Second, log: slog.New(logs)}
	t0 := time.Unix(1000, 0)
	fail := errors.New("down")
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at      time.Duration
		allow   bool
		result  error // recorded when allowed
		closed  bool  // after the step
		comment string
	}{
		{0, true, fail, true, "one failure: still closed"},
		{0, true, fail, true, "two"},
		{0, true, fail, false, "three: open for 1s"},
		{500 * time.Millisecond, false, nil, false, "refused while open"},
		{time.Second, true, fail, false, "the probe fails: open for 2s"},
		{2 * time.Second, false, nil, false, "refused"},
		{3 * time.Second, true, fail, false, "the probe fails: open for 3s (the limit)"},
		{6 * time.Second, true, nil, true, "the probe succeeds: closed"},
		{6 * time.Second, true, fail, true, "the count starts again"},
	}
	for i, s := range steps {
		if got := b.allow(at(s.at)); got != s.allow {
			t.Fatalf("step %d (%s): allow = %v", i, s.comment, got)
		}
		if s.allow {
			b.record(at(s.at), s.result)
		}
		if got := b.closed(); got != s.closed {
			t.Fatalf("step %d (%s): closed = %v", i, s.comment, got)
		}
	}
	// Half-open lets one probe through at a time.
	for range 3 {
		b.record(at(7*time.Second), fail)
	}
	if !b.allow(at(time.Minute)) || b.allow(at(time.Minute)) {
		t.Error("half-open: want exactly one probe through")
	}
	for msg, want := range map[string]int{
		"redis circuit breaker open: serving from local books": 2,
		"redis circuit breaker open again: the probe failed":   2,
		"redis circuit breaker half-open: probing":             4,
		"redis circuit breaker closed: redis answers again":    1,
	} {
		if got := logs.count(msg); got != want {
			t.Errorf("%q logged %d times, want %d", msg, got, want)
		}
	}
	if got := b.lastErrorAt(); !got.Equal(at(7 * time.Second)) {
		t.Errorf("lastErrorAt = %v", got)
	}
}

// closedPort is a loopback port nothing listens on: a Redis that is down.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestQueueBound: with Redis down, the queue keeps at most MaxQueued
// buckets; past it the oldest minute is dropped and counted, while the
// local view keeps every entry.
func TestQueueBound(t *testing.T) {
	c, err := NewClient(ClientOptions{URL: "redis://" + closedPort(t)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRedis(Options{Client: c, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l := newLedger(t, r, LedgerOptions{MaxQueued: 3})
	ctx := context.Background()
	now := time.Now()
	for m := range 5 {
		at := now.Add(time.Duration(m-5) * time.Minute)
		if err := l.Add(ctx, now, []spend.Entry{{Scope: "s", At: at, Amount: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(ctx); err == nil {
		t.Error("Sync with Redis down: no error")
	}
	if q, d := l.Queued(), l.Dropped(); q != 3 || d != 2 {
		t.Errorf("queued %d, dropped %d; want 3 and 2", q, d)
	}
	if s, _ := l.Sum(ctx, "s", now.Add(-time.Hour), now); s != 5 {
		t.Errorf("local view sums %d, want all 5 entries", s)
	}
	l.mu.Lock()
	for m := range l.mu.pending {
		if m < minuteOf(now.Add(-3*time.Minute)) {
			t.Errorf("minute %v still queued; the oldest two should have been dropped", minuteTime(m))
		}
	}
	l.mu.Unlock()
}

// TestKeys: every key carries the prefix and the cluster as a hash tag.
func TestKeys(t *testing.T) {
	r, err := NewRedis(Options{Client: redis.NewClient(&redis.Options{Addr: closedPort(t)}), KeyPrefix: "p:", Cluster: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Key("spend", "tenant:a", "-1"); got != "p:{eu}:spend:tenant:a:-1" {
		t.Errorf("Key = %q", got)
	}
	if _, err := NewRedis(Options{Client: r.client, Timeout: 2 * time.Second}); err == nil || !strings.Contains(err.Error(), "Timeout") {
		t.Errorf("a timeout over MaxTimeout: %v", err)
	}
	if _, err := NewClient(ClientOptions{URL: "redis://x", ClusterAddrs: []string{"y:1"}}); err == nil {
		t.Error("url and cluster_addrs together: no error")
	}
	if _, err := NewClient(ClientOptions{URL: "redis://:hunter2@[bad"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a bad URL with a password: %v (must not show it)", err)
	}
}
