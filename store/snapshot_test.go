package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// TestSnapshots: a missing file is a fresh start, a corrupt or unreadable
// one an error naming the path; Run writes at the end, through a renamed
// temporary file, and a new process reads the books back.
func TestSnapshots(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "books.json")
	ctx := context.Background()
	s := &Snapshots{Path: path, Ledger: spend.NewMemoryLedger(), Logger: quiet}
	if err := s.Load(); err != nil {
		t.Fatalf("a missing snapshot: %v, want a fresh start", err)
	}
	now := time.Now()
	if err := s.Ledger.Add(ctx, now, []spend.Entry{{Scope: spend.TenantScope("a"), At: now, Amount: 42}}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 || files[0].Name() != "books.json" {
		t.Errorf("directory after a write: %v, want only books.json", files)
	}
	next := &Snapshots{Path: path, Ledger: spend.NewMemoryLedger()}
	if err := next.Load(); err != nil {
		t.Fatal(err)
	}
	if got, _ := next.Ledger.Sum(ctx, spend.TenantScope("a"), now, now); got != 42 {
		t.Errorf("books read back: %d, want 42", got)
	}

	if err := os.WriteFile(path, []byte(`{"format":"sluice-spend-ledger/1","scopes":{"a":[[1,`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (&Snapshots{Path: path, Ledger: spend.NewMemoryLedger()}).Load(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a truncated snapshot: %v, want an error naming %s", err, path)
	}
	if err := (&Snapshots{Path: dir, Ledger: spend.NewMemoryLedger()}).Load(); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("an unreadable snapshot (a directory): %v, want an error naming it", err)
	}
	bad := &Snapshots{Path: filepath.Join(dir, "missing-dir", "books.json"), Ledger: spend.NewMemoryLedger()}
	if err := bad.Save(); err == nil || !strings.Contains(err.Error(), "missing-dir") {
		t.Errorf("a save into a missing directory: %v, want an error naming the path", err)
	}
}
