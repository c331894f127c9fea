package config

import (
	"fmt"
	"io"
	"os"
)

// The config's stated bounds: what one gateway is built for. A config past
// them is refused before anything is built from it — the size of the file
// before it is parsed, the tenants and their keys before they are checked
// one by one — with the field named. A config at both bounds (10,000
// tenants of 10 key digests each, in YAML's block style: 7.7 MB) loads in
// under a second.
const (
	// MaxConfigBytes bounds a config file: Load refuses a larger one
	// before reading it, Parse a larger input.
	MaxConfigBytes = 8 << 20
	// MaxTenants bounds tenants.
	MaxTenants = 10000
	// MaxTenantKeys bounds the key digests of every tenant together
	// (tenants[*].api_keys_sha256).
	MaxTenantKeys = 100000
)

// readBounded reads the file at path, refusing one over MaxConfigBytes
// before reading it (or once it has read that much, for a file whose
// size the system does not tell, such as a pipe).
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > MaxConfigBytes {
		return nil, tooLarge(st.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigBytes {
		return nil, tooLarge(-1)
	}
	return data, nil
}

func tooLarge(size int64) error {
	if size < 0 {
		return fmt.Errorf("config: the file is larger than %d bytes (config.MaxConfigBytes): a config is at most %d tenants with %d keys", MaxConfigBytes, MaxTenants, MaxTenantKeys)
	}
	return fmt.Errorf("config: the file is %d bytes, larger than %d (config.MaxConfigBytes): a config is at most %d tenants with %d keys", size, MaxConfigBytes, MaxTenants, MaxTenantKeys)
}

// validateBounds checks the counts of tenants and keys, first of all.
func (c Config) validateBounds() error {
	if len(c.Tenants) > MaxTenants {
		return fmt.Errorf("config: tenants: %d tenants, more than %d (config.MaxTenants)", len(c.Tenants), MaxTenants)
	}
	keys := 0
	for i, t := range c.Tenants {
		if keys += len(t.APIKeysSHA256); keys > MaxTenantKeys {
			return fmt.Errorf("config: tenants[%d].api_keys_sha256: the tenants' key digests pass %d (config.MaxTenantKeys) here", i, MaxTenantKeys)
		}
	}
	return nil
}
