package store

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/store/redistest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRedis connects to srv under a cluster name of the test's own, so that
// tests sharing a server never share books.
func newRedis(t *testing.T, srv *redistest.Server, cluster string, o Options) *Redis {
	t.Helper()
	// The tests share two cores with other builds, under -race: a second
	// for each call, the connection's reads and writes as the wrapper's,
	// so that only a test that stops Redis sees a timeout.
	c, err := NewClient(ClientOptions{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o.Client = c
	if o.Cluster == "" {
		o.Cluster = cluster
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	if o.Timeout == 0 {
		// The tests share two cores with other builds, under -race: a
		// second, so that only a test that stops Redis sees a timeout.
		o.Timeout = time.Second
	}
	r, err := NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var clusterSeq atomic.Int64

func clusterName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + time.Now().Format("150405.000000") + "-" + string(rune('a'+clusterSeq.Add(1)%26))
}

// clock is a settable time source for the ledger's loop.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
}

// logCounter is a slog.Handler counting records by message.
type logCounter struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msgs == nil {
		c.msgs = map[string]int{}
	}
	c.msgs[r.Message]++
	return nil
}

func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

func (c *logCounter) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs[msg]
}

func testutilValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
