package idempotency

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/yamltime"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("30s", "5m"); a bare number is refused, since its unit would be a guess.
// D returns the time.Duration. The same type as the other configs'
// Duration (gateway and spend), so a value moves between them as it is.
type Duration = yamltime.Duration

// The defaults: see Config.
const (
	defaultWindow        = 10 * time.Minute
	defaultMaxEntries    = 10_000
	defaultMaxBytes      = 64 << 20
	defaultMaxEntryBytes = 1 << 20

	maxWindow  = 24 * time.Hour
	maxEntries = 1_000_000
	maxBytes   = 16 << 30
	maxKey     = 255

	// overhead approximates an entry's bookkeeping beyond its bytes (map
	// slot, list element, structs), so that max_bytes bounds memory even
	// when the answers are tiny.
	overhead = 256
)

// Config bounds the answers kept for Idempotency-Key. It is the gateway
// config's `idempotency:` section.
type Config struct {
	// Window is how long an answer is kept after it completes. Zero means
	// 10m: longer than a client's whole retry schedule (SDKs back off for
	// at most a minute or so between a handful of attempts) for a call of
	// up to limits.max_timeout's default, and short enough that the
	// answers, which can be large, do not pile up in memory. At most 24h.
	Window Duration `yaml:"window"`
	// MaxEntries bounds the answers kept. Zero means 10000; at most
	// 1000000.
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes bounds the memory of the answers kept (bodies, headers and
	// an overhead per entry). Zero means 64 MiB; at most 16 GiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxEntryBytes is the largest answer kept. Zero means 1 MiB (a long
	// completion is tens of KiB); at most max_bytes. A larger answer is
	// delivered to its caller but not kept: a duplicate gets 409.
	MaxEntryBytes int64 `yaml:"max_entry_bytes"`
}

func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = Duration(defaultWindow)
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = defaultMaxEntries
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = defaultMaxBytes
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = min(defaultMaxEntryBytes, c.MaxBytes)
	}
	return c
}

// Validate checks the section; it names the field at fault by its YAML
// path in the gateway's config (idempotency.…).
func (c Config) Validate() error {
	if d := c.Window.D(); d < 0 || d > maxWindow {
		return fmt.Errorf("config: idempotency.window: %v is out of range, want %v..%v", d, time.Duration(0), maxWindow)
	}
	if err := intIn("idempotency.max_entries", c.MaxEntries, 0, maxEntries); err != nil {
		return err
	}
	if err := intIn("idempotency.max_bytes", c.MaxBytes, 0, maxBytes); err != nil {
		return err
	}
	d := c.withDefaults()
	if err := intIn("idempotency.max_entry_bytes", c.MaxEntryBytes, 0, d.MaxBytes); err != nil {
		return fmt.Errorf("%w (idempotency.max_bytes)", err)
	}
	return nil
}

// intIn checks lo ≤ v ≤ hi and names the field and the range otherwise,
// as the gateway's config does.
func intIn[T int | int64](field string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("config: %s: %d is out of range, want %d..%d", field, v, lo, hi)
	}
	return nil
}
