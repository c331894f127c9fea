package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// The connection guard's own tests, end to end through a Server included,
// are in package guard; this is the Server's part.

// TestServeLogsTheEffectiveLimits: the startup line says what the
// connection policy is, defaults resolved.
func TestServeLogsTheEffectiveLimits(t *testing.T) {
	var log syncBuffer
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Server.MaxConnections = 100
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	stop()
	if err := srv.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"read_header_timeout=10s", "read_body_timeout=20s", "idle_timeout=1m0s", "write_timeout=1m0s",
		"max_connections=100", "max_unauthenticated_per_ip=12", "fd_limit="} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("startup log lacks %s:\n%s", want, log.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
