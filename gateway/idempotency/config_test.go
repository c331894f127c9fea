package idempotency

import (
	"testing"
	"time"
)

// TestConfigValidate pins the errors, which name the YAML path in the
// gateway's config as its own checks do.
func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: Duration(-time.Second)}, "config: idempotency.window: -1s is out of range, want 0s..24h0m0s"},
		{Config{Window: Duration(25 * time.Hour)}, "config: idempotency.window: 25h0m0s is out of range, want 0s..24h0m0s"},
		{Config{MaxEntries: -1}, "config: idempotency.max_entries: -1 is out of range, want 0..1000000"},
		{Config{MaxEntries: 1_000_001}, "config: idempotency.max_entries: 1000001 is out of range, want 0..1000000"},
		{Config{MaxBytes: 1 << 40}, "config: idempotency.max_bytes: 1099511627776 is out of range, want 0..17179869184"},
		{Config{MaxBytes: -1}, "config: idempotency.max_bytes: -1 is out of range, want 0..17179869184"},
		{Config{MaxBytes: 1 << 20, MaxEntryBytes: 2 << 20}, "config: idempotency.max_entry_bytes: 2097152 is out of range, want 0..1048576 (idempotency.max_bytes)"},
		// max_bytes left at its default bounds max_entry_bytes too.
		{Config{MaxEntryBytes: 65 << 20}, "config: idempotency.max_entry_bytes: 68157440 is out of range, want 0..67108864 (idempotency.max_bytes)"},
		{Config{MaxEntryBytes: -1}, "config: idempotency.max_entry_bytes: -1 is out of range, want 0..67108864 (idempotency.max_bytes)"},
	} {
		if err := tt.cfg.Validate(); err == nil || err.Error() != tt.want {
			t.Errorf("%+v: error %v, want %q", tt.cfg, err, tt.want)
		}
	}
	for _, cfg := range []Config{
		{},
		{Window: Duration(24 * time.Hour), MaxEntries: 1_000_000, MaxBytes: 16 << 30, MaxEntryBytes: 16 << 30},
		{Window: Duration(time.Hour), MaxEntries: 5, MaxBytes: 1 << 20, MaxEntryBytes: 1024},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// TestConfigDefaults: the zeros mean what Config documents, and
// max_entry_bytes never defaults above max_bytes.
func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{Window: Duration(10 * time.Minute), MaxEntries: 10_000, MaxBytes: 64 << 20, MaxEntryBytes: 1 << 20}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if got := (Config{MaxBytes: 1000}).withDefaults().MaxEntryBytes; got != 1000 {
		t.Errorf("max_entry_bytes with max_bytes 1000: %d, want 1000", got)
	}
}
