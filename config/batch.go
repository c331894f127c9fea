package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/chain"
)

// batchOn says whether the Batch API is on: batch.path is set, or
// store.redis is (which then keeps the batches) and passthrough does not
// forward the Batch API's paths; and batch.disabled is not.
func (c Config) BatchOn() bool {
	return !c.Batch.Disabled && (c.Batch.Path != "" || c.Store != nil && c.Store.Redis != nil && !c.PassesBatchThrough())
}

// batchClassDefaults adds the batch class to classes, and to every
// tenant restricted to some classes, when the Batch API is on. It copies
// what it changes: c shares its maps and slices with the caller's.
func (c Config) batchClassDefaults() Config {
	if !c.BatchOn() {
		return c
	}
	class := c.Batch.Class
	if _, ok := c.Classes[class]; !ok {
		classes := make(map[string]ClassConfig, len(c.Classes)+1)
		for k, v := range c.Classes {
			classes[k] = v
		}
		classes[class] = ClassConfig{Rank: c.Batch.Rank}
		c.Classes = classes
	}
	if slices.ContainsFunc(c.Tenants, func(t chain.TenantConfig) bool { return len(t.Classes) > 0 && !slices.Contains(t.Classes, class) }) {
		tenants := slices.Clone(c.Tenants)
		for i := range tenants {
			if len(tenants[i].Classes) > 0 && !slices.Contains(tenants[i].Classes, class) {
				tenants[i].Classes = append(slices.Clone(tenants[i].Classes), class)
			}
		}
		c.Tenants = tenants
	}
	return c
}

// validateBatch checks the batch section when the Batch API is on, and
// that passthrough does not forward the paths it serves.
func (c Config) validateBatch() error {
	if !c.BatchOn() {
		return nil
	}
	if err := c.Batch.Validate(); err != nil {
		return err
	}
	if i, path := c.batchPassthrough(); i >= 0 {
		return fmt.Errorf("config: passthrough[%d].path: %q covers %s, which the gateway's Batch API serves (set batch.disabled to forward it instead)", i, c.Passthrough[i].Path, path)
	}
	return nil
}

// batchPassthrough returns the first passthrough entry that forwards a
// Batch API path, and the path; -1 when none does. A broader prefix
// ("/v1/") does not count: the Batch API's routes are longer, and win.
func (c Config) batchPassthrough() (int, string) {
	for i, p := range c.Passthrough {
		for _, path := range BatchPaths {
			if strings.HasPrefix(p.Path, path) {
				return i, path
			}
		}
	}
	return -1, ""
}

// PassesBatchThrough says whether passthrough forwards /v1/files or
// /v1/batches to the provider: `sluice serve` then leaves the Batch API
// off unless batch.path is set.
func (c Config) PassesBatchThrough() bool {
	i, _ := c.batchPassthrough()
	return i >= 0
}
