package batchapi

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/yamltime"
)

// Config configures the Batch API: the `batch:` section of the gateway's
// config. Its errors name the YAML path (batch.max_window, …).
type Config struct {
	// Path is the store's file (bbolt), unused with store.redis (which
	// keeps the batches for every replica). Empty without store.redis means the Batch API is off
	// in a Gateway built by New (/v1/files and /v1/batches answer 404
	// naming this field); `sluice serve` fills in DefaultPath().
	Path string `yaml:"path"`
	// Disabled turns the Batch API off, even in `sluice serve`.
	Disabled bool `yaml:"disabled"`
	// Class is the priority class items are admitted at. Empty means
	// "pipeline", which is added to classes (at Rank) when it is not
	// there, and to every tenant's classes when they are restricted.
	Class string `yaml:"class"`
	// Rank is the rank of the class when batch adds it. Nil means 0: with
	// speculative work, below every live class.
	Rank *int `yaml:"rank"`
	// MaxFileBytes bounds an uploaded file. Zero means 100 MiB; at most
	// 1 GiB. A file is streamed to the store a chunk at a time.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxRequests bounds the requests of one file. Zero means 50000.
	MaxRequests int `yaml:"max_requests"`
	// MaxBacklog bounds the items not yet run, all batches together: a
	// batch that would pass it is refused with 429. Zero means 1000000.
	MaxBacklog int `yaml:"max_backlog"`
	// MaxBacklogBytes bounds their request bodies. Zero means 1 GiB.
	MaxBacklogBytes int64 `yaml:"max_backlog_bytes"`
	// MaxTenantBacklog and MaxTenantBacklogBytes bound one tenant's share.
	// Zero means 250000 items and 256 MiB.
	MaxTenantBacklog      int   `yaml:"max_tenant_backlog"`
	MaxTenantBacklogBytes int64 `yaml:"max_tenant_backlog_bytes"`
	// MaxWindow is the longest completion_window a batch may ask for.
	// Zero means 168h.
	MaxWindow yamltime.Duration `yaml:"max_window"`
	// MaxWaiting is how many items may wait in the gate for a slot at
	// once. Zero means 2: enough that an idle slot is filled without
	// delay, few enough that items never crowd the queue.
	MaxWaiting int `yaml:"max_waiting"`
	// MaxUploads bounds the uploads (POST /v1/files) read at once, all
	// tenants together; the next is refused with 429 and Retry-After
	// before its body is read. Each is streamed to the store a chunk at a
	// time (about 6 MB of memory): the bound is for the store's write
	// load. Zero means 4.
	MaxUploads int `yaml:"max_uploads"`
	// MaxTenantUploads bounds one tenant's uploads read at once. Zero
	// means 2.
	MaxTenantUploads int `yaml:"max_tenant_uploads"`
	// MaxTenantFiles bounds the files one tenant keeps uploaded: the next
	// upload is refused with 429 too_many_files until one is deleted or
	// expires. Zero means 1000.
	MaxTenantFiles int `yaml:"max_tenant_files"`
	// MaxTenantFileBytes bounds their bytes: an upload that would pass it
	// is refused with 413 file_storage_exceeded. Zero means 2 GiB.
	MaxTenantFileBytes int64 `yaml:"max_tenant_file_bytes"`
	// Retention is how long an uploaded file without expires_after is
	// kept (its expires_at, as OpenAI's batch files), and a batch after it
	// ends, with its output and error files (theirs, without
	// output_expires_after). Past it their bytes are deleted. Zero means
	// 720h (30 days).
	Retention yamltime.Duration `yaml:"retention"`
}

const (
	defaultClass        = "pipeline"
	defaultMaxFileBytes = 100 << 20
	maxMaxFileBytes     = 1 << 30
	defaultMaxRequests  = 50000
	defaultMaxBacklog   = 1000000
	defaultMaxWindow    = 168 * time.Hour
	defaultRetention    = 30 * 24 * time.Hour
)

// DefaultPath is where `sluice serve` keeps batches when batch.path is
// unset: $XDG_STATE_HOME/sluice/batch.db, or
// ~/.local/state/sluice/batch.db.
func DefaultPath() (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("batch.path: no home directory to default it under: %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "sluice", "batch.db"), nil
}

// WithDefaults returns c with every zero field set to what its zero
// means. Path and Disabled have no default: whether the Batch API is on
// is the gateway's to say (it reads other sections too).
func (c Config) WithDefaults() Config {
	if c.Class == "" {
		c.Class = defaultClass
	}
	if c.Rank == nil {
		c.Rank = new(0)
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = defaultMaxFileBytes
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = defaultMaxRequests
	}
	if c.MaxBacklog == 0 {
		c.MaxBacklog = defaultMaxBacklog
	}
	if c.MaxBacklogBytes == 0 {
		c.MaxBacklogBytes = 1 << 30
	}
	if c.MaxTenantBacklog == 0 {
		c.MaxTenantBacklog = 250000
	}
	if c.MaxTenantBacklogBytes == 0 {
		c.MaxTenantBacklogBytes = 256 << 20
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = yamltime.Duration(defaultMaxWindow)
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = 2
	}
	if c.MaxUploads == 0 {
		c.MaxUploads = 4
	}
	if c.MaxTenantUploads == 0 {
		c.MaxTenantUploads = 2
	}
	if c.MaxTenantFiles == 0 {
		c.MaxTenantFiles = 1000
	}
	if c.MaxTenantFileBytes == 0 {
		c.MaxTenantFileBytes = 2 << 30
	}
	if c.Retention == 0 {
		c.Retention = yamltime.Duration(defaultRetention)
	}
	return c
}

// Validate checks the bounds of c with its defaults, and names the first
// field out of range by its YAML path ("config: batch.rank: …").
func (c Config) Validate() error {
	c = c.WithDefaults()
	for _, err := range []error{
		intIn("batch.max_file_bytes", c.MaxFileBytes, 1, maxMaxFileBytes),
		intIn("batch.max_requests", c.MaxRequests, 1, 10000000),
		intIn("batch.max_backlog", c.MaxBacklog, 1, 100000000),
		intIn("batch.max_backlog_bytes", c.MaxBacklogBytes, 1, 1<<40),
		intIn("batch.max_tenant_backlog", c.MaxTenantBacklog, 1, 100000000),
		intIn("batch.max_tenant_backlog_bytes", c.MaxTenantBacklogBytes, 1, 1<<40),
		intIn("batch.max_waiting", c.MaxWaiting, 1, 1024),
		intIn("batch.max_uploads", c.MaxUploads, 1, 1024),
		intIn("batch.max_tenant_uploads", c.MaxTenantUploads, 1, 1024),
		intIn("batch.max_tenant_files", c.MaxTenantFiles, 1, 1000000),
		intIn("batch.max_tenant_file_bytes", c.MaxTenantFileBytes, 1, 1<<40),
		durationIn("batch.retention", c.Retention, time.Hour, 3650*24*time.Hour),
		intIn("batch.rank", *c.Rank, 0, admission.MaxRanks-1),
		durationIn("batch.max_window", c.MaxWindow, time.Second, 365*24*time.Hour),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// intIn checks lo ≤ v ≤ hi and names the field and the range otherwise,
// in the words of the gateway's own config errors.
func intIn[T int | int64](field string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("config: %s: %d is out of range, want %d..%d", field, v, lo, hi)
	}
	return nil
}

// durationIn checks lo ≤ v ≤ hi and names the field and the range otherwise.
func durationIn(field string, v yamltime.Duration, lo, hi time.Duration) error {
	if v.D() < lo || v.D() > hi {
		return fmt.Errorf("config: %s: %v is out of range, want %v..%v", field, v.D(), lo, hi)
	}
	return nil
}
