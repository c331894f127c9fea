package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// DefaultSnapshotInterval is how often Snapshots.Run writes the books: a
// crash loses at most this much of the spend it booked.
const DefaultSnapshotInterval = 10 * time.Second

// Snapshots keep one process's books across restarts: a MemoryLedger
// written to a file every Interval and at shutdown, read at start.
type Snapshots struct {
	// Path is the file. Its directory must exist and be writable: each
	// write goes to a temporary file there, renamed over Path, so that a
	// crash mid-write leaves the previous snapshot whole.
	Path string
	// Interval is the period of Run. Zero means DefaultSnapshotInterval.
	Interval time.Duration
	Ledger   *spend.MemoryLedger
	// Logger receives failed periodic writes. Nil means slog.Default().
	Logger *slog.Logger
}

// Load reads Path into the ledger. A missing file is a fresh start (nil);
// an unreadable or corrupt one is an error naming the path: refusing to
// start is better than forgetting a day's spend.
func (s *Snapshots) Load() error {
	f, err := os.Open(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: spend snapshot %s: %w", s.Path, err)
	}
	defer f.Close()
	if err := s.Ledger.ReadSnapshot(f); err != nil {
		return fmt.Errorf("store: spend snapshot %s: %w", s.Path, err)
	}
	return nil
}

// Save writes the ledger to a temporary file beside Path, syncs it and
// renames it over Path.
func (s *Snapshots) Save() error {
	dir, base := filepath.Split(s.Path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("store: spend snapshot %s: %w", s.Path, err)
	}
	tmp := f.Name()
	err = s.Ledger.WriteSnapshot(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.Path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store: spend snapshot %s: %w", s.Path, err)
	}
	return nil
}

// Run saves every Interval until ctx ends, then once more, and returns the
// last save's error.
func (s *Snapshots) Run(ctx context.Context) error {
	every := s.Interval
	if every == 0 {
		every = DefaultSnapshotInterval
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.Save()
		case <-tick.C:
		}
		if err := s.Save(); err != nil {
			log.Warn("spend snapshot not written; the previous one stays", "err", err)
		}
	}
}
