package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/internal/testkit"
)

// tenantsYAML is a config of n tenants with keys digests each, in flow
// style.
func tenantsYAML(n, keys int) []byte {
	var b strings.Builder
	b.WriteString("upstream: {url: http://127.0.0.1:1, api_key_env: K}\nadmission: {concurrency: 4}\ntenants:\n")
	k := 0
	for i := range n {
		fmt.Fprintf(&b, "  - {name: t%d, api_keys_sha256: [", i)
		for j := range keys {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(chain.HashKey(fmt.Sprint(k)))
			k++
		}
		b.WriteString("]}\n")
	}
	return []byte(b.String())
}

// TestConfigBounds: past MaxTenants or MaxTenantKeys the config is refused
// with the field named, before the tenants are checked one by one; a file
// past MaxConfigBytes is refused before it is read (its bytes would be a
// YAML error otherwise).
func TestConfigBounds(t *testing.T) {
	base, err := Parse(tenantsYAML(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	tenants := func(n, keys int) Config {
		c := base
		c.Tenants = make([]chain.TenantConfig, n)
		for i := range c.Tenants {
			c.Tenants[i] = chain.TenantConfig{Name: fmt.Sprint("t", i), APIKeysSHA256: make([]string, keys)} // empty digests: the bounds come first
		}
		return c
	}
	for _, tc := range []struct {
		name       string
		cfg        Config
		field, msg string
	}{
		{"tenants", tenants(MaxTenants+1, 1), "config: tenants:", "more than 10000"},
		{"keys", tenants(5001, 20), "config: tenants[5000].api_keys_sha256:", "pass 100000"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %s … %s", tc.name, err, tc.field, tc.msg)
		}
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("\x00", MaxConfigBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Load(big)
	if err == nil || !strings.Contains(err.Error(), "larger than 8388608 (config.MaxConfigBytes)") {
		t.Fatalf("a file over the bound: %v", err)
	}
	t.Logf("refused in %v", time.Since(start))
	if _, err := Parse(make([]byte, MaxConfigBytes+1)); err == nil || !strings.Contains(err.Error(), "config.MaxConfigBytes") {
		t.Fatalf("input over the bound: %v", err)
	}
}

// TestConfigAtTheBoundsLoads: a config of MaxTenants tenants with
// MaxTenantKeys keys between them fits MaxConfigBytes and loads.
func TestConfigAtTheBoundsLoads(t *testing.T) {
	// The parse takes 2 s, and 15 s under the race detector.
	if testkit.Race {
		t.Skip("parses a 6.7 MB config: 15 s under the race detector")
	}
	data := tenantsYAML(MaxTenants, MaxTenantKeys/MaxTenants)
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := Load(path); err != nil {
		t.Fatalf("a config at both bounds (%d bytes): %v", len(data), err)
	}
	t.Logf("%d bytes loaded in %v", len(data), time.Since(start))
}
