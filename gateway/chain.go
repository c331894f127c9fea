package gateway

import (
	"fmt"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/spend"
)

// chainConfig is the admission chain the config describes: the gate, the
// tenants, the recognition of retries, the retry budgets, and the spend
// limiter l (nil without a spend section).
func (c Config) chainConfig(l *spend.Limiter) (chain.Config, error) {
	acfg, err := c.admissionConfig()
	if err != nil {
		return chain.Config{}, err
	}
	cc := chain.Config{Admission: acfg, Retries: c.Retries.chainRetries(), Recognise: c.Retries.Recognise, Spend: l, RefusalSpread: c.Admission.refusalSpread().D()}
	if cc.RefusalSpread == 0 {
		cc.RefusalSpread = -1 // configured off
	}
	cc.Tenants = c.Tenants
	if _, err := chain.NewCore(cc); err != nil {
		return chain.Config{}, fmt.Errorf("config: %w", err)
	}
	return cc, nil
}
