package spend_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// A Limiter used in-process: estimate and reserve, call, reconcile; then a
// tenant past its budget is refused with an honest RetryAfter.
func Example() {
	cfg, err := spend.ParseConfig([]byte(`
prices:
  gpt-4o:      {input_per_mtok: 2.5, output_per_mtok: 10}
  gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}
ladder: {gpt-4o: gpt-4o-mini}
ceiling_per_hour: 100
tenants:
  acme: {per_hour: 1.2}
`))
	if err != nil {
		panic(err)
	}
	l, err := spend.New(cfg, spend.Options{})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Summarise the attached report in three bullet points."}],"max_tokens":300}`)
	req := spend.Request{Tenant: "acme", Model: "gpt-4o", Rank: 4,
		EstimatedInputTokens: spend.EstimateInputTokens(body), MaxOutputTokens: 300}

	d, _ := l.Admit(now, req)
	fmt.Printf("allow=%v model=%s reserved=$%.6f\n", d.Allow, d.Model, d.EstimatedUSD)
	// ... the call, which reports its usage ...
	cost, _ := l.Reconcile(now.Add(3*time.Second), d.Reservation, contract.Usage{Input: 21, Output: 64}, true)
	fmt.Printf("actual=$%.6f\n", cost)

	// A loop sends the same request over and over.
	for i := 0; ; i++ {
		d, _ = l.Admit(now.Add(4*time.Second), req)
		if !d.Allow {
			fmt.Printf("after %d more: %v, degraded before that: %v\n", i, d.Rejection.Reason, l.Snapshot(now).Global.Degraded > 0)
			fmt.Printf("retry after %v\n", d.Rejection.RetryAfter.Round(time.Second))
			break
		}
		l.Reconcile(now.Add(4*time.Second), d.Reservation, contract.Usage{Input: 21, Output: 300}, true)
	}
	// Output:
	// allow=true model=gpt-4o reserved=$0.003037
	// actual=$0.000692
	// after 66 more: tenant_budget, degraded before that: true
	// retry after 4m56s
}
