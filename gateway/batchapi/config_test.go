package batchapi

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/yamltime"
)

// TestConfigValidate: each bound's fault names the field by its YAML
// path, in the words of the gateway's config errors; the zero Config is
// valid, with the defaults its fields document.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"rank", func(c *Config) { c.Rank = new(99) }, "config: batch.rank: 99 is out of range, want 0..15"},
		{"max_waiting", func(c *Config) { c.MaxWaiting = -1 }, "config: batch.max_waiting: -1 is out of range, want 1..1024"},
		{"max_file_bytes", func(c *Config) { c.MaxFileBytes = 2 << 30 }, "config: batch.max_file_bytes: 2147483648 is out of range, want 1..1073741824"},
		{"max_requests", func(c *Config) { c.MaxRequests = -1 }, "config: batch.max_requests: -1 is out of range, want 1..10000000"},
		{"max_backlog", func(c *Config) { c.MaxBacklog = -1 }, "config: batch.max_backlog: -1 is out of range, want 1..100000000"},
		{"max_backlog_bytes", func(c *Config) { c.MaxBacklogBytes = -1 }, "config: batch.max_backlog_bytes: -1 is out of range, want 1..1099511627776"},
		{"max_tenant_backlog", func(c *Config) { c.MaxTenantBacklog = -1 }, "config: batch.max_tenant_backlog: -1 is out of range, want 1..100000000"},
		{"max_tenant_backlog_bytes", func(c *Config) { c.MaxTenantBacklogBytes = -1 }, "config: batch.max_tenant_backlog_bytes: -1 is out of range, want 1..1099511627776"},
		{"max_window", func(c *Config) { c.MaxWindow = yamltime.Duration(time.Millisecond) }, "config: batch.max_window: 1ms is out of range, want 1s..8760h0m0s"},
		{"max_tenant_files", func(c *Config) { c.MaxTenantFiles = -1 }, "config: batch.max_tenant_files: -1 is out of range, want 1..1000000"},
		{"max_tenant_file_bytes", func(c *Config) { c.MaxTenantFileBytes = -1 }, "config: batch.max_tenant_file_bytes: -1 is out of range, want 1..1099511627776"},
		{"retention", func(c *Config) { c.Retention = yamltime.Duration(time.Minute) }, "config: batch.retention: 1m0s is out of range, want 1h0m0s..87600h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			tc.edit(&c)
			if err := c.Validate(); err == nil || err.Error() != tc.want {
				t.Fatalf("Validate: %v, want %s", err, tc.want)
			}
		})
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	d := Config{}.WithDefaults()
	if d.Class != "pipeline" || *d.Rank != 0 || d.MaxFileBytes != 100<<20 || d.MaxRequests != 50000 || d.MaxBacklog != 1000000 ||
		d.MaxBacklogBytes != 1<<30 || d.MaxTenantBacklog != 250000 || d.MaxTenantBacklogBytes != 256<<20 ||
		d.MaxWindow.D() != 168*time.Hour || d.MaxWaiting != 2 || d.MaxTenantFiles != 1000 || d.MaxTenantFileBytes != 2<<30 || d.Retention.D() != 720*time.Hour {
		t.Fatalf("defaults %+v", d)
	}
	if d.Path != "" || d.Disabled {
		t.Fatalf("defaults turn the API on or off: %+v", d)
	}
}
