package chain

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// benchConfig is a chain with every stage: tenants, recognition, retry
// budgets, spend (no ceiling: the books only grow) and two pools, big (one
// slot) and small (many), with big degrading to small for batch calls when
// ladder says so.
func benchConfig(b *testing.B, ladder bool) Config {
	b.Helper()
	sc, err := spend.ParseConfig([]byte(`
prices:
  big:   {input_per_mtok: 2.5, output_per_mtok: 10}
  small: {input_per_mtok: 0.15, output_per_mtok: 0.6}
`))
	if err != nil {
		b.Fatal(err)
	}
	l, err := spend.New(sc, spend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rc := &RoutingConfig{
		Pools:  []PoolConfig{poolCfg("d/big", "d", "big", 1, time.Second), poolCfg("d/small", "d", "small", 1<<14, time.Second)},
		Routes: map[string][]string{"big": {"d/big"}, "small": {"d/small"}},
	}
	if ladder {
		rc.Ladder = map[string]string{"big": "small"}
		rc.DegradeClasses = []string{admission.ClassBatch}
	}
	return Config{Tenants: []TenantConfig{{Name: "acme"}}, Retries: tightRetries, Spend: l, Routing: rc}
}

// BenchmarkAdmit is the admission path — every stage, the gate, then the
// settlement — of one call: Core.Arrive and Release in virtual time, and
// Chain.Acquire and Done from parallel goroutines. plain has no ladder (no
// degrade stage); degradable is a batch call the degrade stage estimates
// and leaves at its model; degraded one it sends down a rung, big's one
// slot being taken.
func BenchmarkAdmit(b *testing.B) {
	done := Outcome{Result: admission.Success, ServiceTime: time.Second, UsageKnown: true, Usage: contract.Usage{Input: 100, Output: 100}}
	for _, bc := range []struct {
		name   string
		ladder bool
		req    Request
	}{
		{"plain", false, Request{Tenant: "acme", Model: "small", InputTokens: 100, MaxOutputTokens: 100}},
		{"degradable", true, Request{Tenant: "acme", Class: admission.ClassBatch, Model: "big", InputTokens: 100, MaxOutputTokens: 100}},
		{"degraded", true, Request{Tenant: "acme", Class: admission.ClassBatch, Model: "big", InputTokens: 100, MaxOutputTokens: 100}},
	} {
		b.Run("Core/"+bc.name, func(b *testing.B) {
			c, err := NewCore(benchConfig(b, bc.ladder))
			if err != nil {
				b.Fatal(err)
			}
			req := bc.req
			req.Deadline = t0.Add(time.Hour)
			if bc.name == "degraded" {
				if d, _ := c.Arrive(t0, Request{Tenant: "acme", Model: "big", Unpriced: true}, new(Ticket), false); d.Verdict != admission.Granted {
					b.Fatalf("filling big: %+v", d)
				}
				req.Deadline = t0.Add(1500 * time.Millisecond)
			}
			tk := new(Ticket)
			b.ReportAllocs()
			for b.Loop() {
				d, err := c.Arrive(t0, req, tk, false)
				if err != nil || d.Verdict != admission.Granted {
					b.Fatalf("%+v, %v", d, err)
				}
				if bc.name != "plain" && tk.Request().Degraded != (bc.name == "degraded") {
					b.Fatalf("degraded %v", tk.Request().Degraded)
				}
				if err := c.Release(t0, tk, done); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Chain/plain", func(b *testing.B) {
		c, err := New(benchConfig(b, false))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := Request{Tenant: "acme", Model: "small", InputTokens: 100, MaxOutputTokens: 100}
			for pb.Next() {
				p, err := c.Acquire(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				p.Done(done)
			}
		})
	})
}
