package config

import (
	"fmt"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/spend"
)

// Chain is the admission chain the config describes, for a config with its
// defaults (WithDefaults): the gate, the tenants, the retries (budgets and
// recognition), the routing (a pool per deployment and model, or the one
// upstream's), and the spend limiter l the shell built from SpendConfig —
// where its books live is the shell's choice — nil without a spend
// section. The config's Validate has checked it (chain.Config.Validate).
func (c Config) Chain(l *spend.Limiter) (chain.Config, error) {
	acfg, err := c.admissionConfig()
	if err != nil {
		return chain.Config{}, err
	}
	cc := chain.Config{Admission: acfg, Tenants: c.Tenants, Retries: c.Retries, Spend: l, RefusalSpread: c.Admission.refusalSpread().D(), Mode: c.Mode}
	if cc.RefusalSpread == 0 {
		cc.RefusalSpread = -1 // configured off
	}
	if cc.Routing, err = c.routingConfig(acfg); err != nil {
		return chain.Config{}, err
	}
	return cc, nil
}

// validateChain checks what only the chain can: its stages built from the
// config (tenants' classes against the gate's ranks, recognition, retry
// budgets, pools and routes), by the chain's own rule.
func (c Config) validateChain() error {
	cc, err := c.Chain(nil)
	if err != nil {
		return err
	}
	if err := cc.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
