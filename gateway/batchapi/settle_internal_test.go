package batchapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/internal/yamltime"
)

// TestSettleLoopPurges: the settle loop deletes a file's bytes once it
// has expired, within purgeEvery of its expires_at (what Purge deletes,
// and when, is the stores' suite's: batchtest).
func TestSettleLoopPurges(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{Path: filepath.Join(dir, "batch.db"), Retention: yamltime.Duration(2 * time.Hour)}, Deps{
			Handler:  func(string, string) (http.Handler, error) { return nil, ErrNotGated },
			Stats:    func() admission.Stats { return admission.Stats{Concurrency: 1} },
			ReadBody: func([]byte) (string, bool, error) { return "m", false, nil },
			Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		now := time.Now()
		f := batch.File{ID: "file-x", Tenant: "t", Purpose: "batch", CreatedAt: now, ExpiresAt: now.Add(30 * time.Second)}
		if err := batch.PutFile(ctx, a.store, f, []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { a.runSettle(ctx); close(done) }()
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if _, err := a.store.File(ctx, "t", "file-x"); err != nil {
			t.Fatalf("purged before its expiry: %v", err)
		}
		time.Sleep(purgeEvery)
		synctest.Wait()
		if _, err := a.store.File(ctx, "t", "file-x"); !errors.Is(err, batch.ErrNotFound) {
			t.Fatalf("a minute past its expiry: %v, want it purged", err)
		}
		cancel()
		<-done
		a.Close()
	})
}
