package chain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/retrybudget"
)

// reloadConfig is a chain of two keyed tenants, a spend limiter and retry
// budgets; a test changes a copy of it.
func reloadConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		Admission: admission.Config{Concurrency: 2, MaxQueue: 8, InitialServiceTime: time.Second},
		Tenants: []TenantConfig{
			{Name: "a", APIKeysSHA256: []string{HashKey("key-a")}, Classes: []string{admission.ClassBatch}},
			{Name: "b", Tier: "low", APIKeysSHA256: []string{HashKey("key-b")}},
		},
		Retries: RetryConfig{
			Budget:    retrybudget.Config{Ratio: 0.5, MinPerSecond: 1e-9, MaxTokens: 100},
			PerTenant: retrybudget.Config{Ratio: 0.5, MinPerSecond: 1e-9, MaxTokens: 100},
		},
		Spend: limiter(t, prices),
	}
}

func identified(c *Chain, key string) string {
	name, tier, ok := c.Identify(key)
	if !ok {
		return "refused"
	}
	return name + "/" + tier.String()
}

// TestReconfigureTenants adds, removes and changes tenants of a running
// chain: keys, tiers and class rules apply to the next call, a call
// admitted before the change settles as it was, and the retry budget and
// the books carry on.
func TestReconfigureTenants(t *testing.T) {
	cfg := reloadConfig(t)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Twenty first attempts: ten retry tokens in the global budget.
	for range 20 {
		p, err := c.Acquire(ctx, Request{APIKey: "key-b", Model: "small", InputTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Done(Outcome{Result: admission.Success, UsageKnown: true, Usage: contract.Usage{Input: 10, Output: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	// a's call in flight across the reload, demoted to its only class.
	inflight, err := c.Acquire(ctx, Request{APIKey: "key-a", Class: admission.ClassInteractive, Model: "small", InputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r := inflight.Request(); r.Class != admission.ClassBatch {
		t.Fatalf("a's call in class %s, want batch", r.Class)
	}
	now := time.Now()
	balance, _ := c.RetryBalance(now)
	spent := cfg.Spend.Snapshot(now)

	next := cfg
	next.Tenants = []TenantConfig{
		{Name: "a", Tier: "high", APIKeysSHA256: []string{HashKey("key-a2")}}, // new key, new tier, any class
		{Name: "c", APIKeysSHA256: []string{HashKey("key-c")}, Classes: []string{admission.ClassSpeculative}, DisallowedClass: "refuse"},
	} // b removed
	next.Retries.Budget.Ratio = 0.1
	if err := c.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"key-a": "refused", "key-a2": "a/high", "key-b": "refused", "key-c": "c/standard"} {
		if got := identified(c, key); got != want {
			t.Errorf("key %s after the reload: %s, want %s", key, got, want)
		}
	}
	if got := c.Tenants(); len(got) != 2 || got[0].Name != "a" || got[1].Name != "c" || got[0].Keys != 1 {
		t.Errorf("tenants after the reload: %+v", got)
	}
	if err := inflight.Done(Outcome{Result: admission.Success, UsageKnown: true, Usage: contract.Usage{Input: 10, Output: 5}}); err != nil {
		t.Fatalf("a call admitted before the reload settled with %v", err)
	}
	if b, _ := c.RetryBalance(time.Now()); b < balance || b > balance+1e-3 {
		t.Fatalf("retry budget %v after the reload, want %v kept", b, balance)
	}
	after := cfg.Spend.Snapshot(time.Now())
	if after.Global.KnownCalls != spent.Global.KnownCalls+1 || after.Global.SpentUSD < spent.Global.SpentUSD {
		t.Fatalf("books across the reload: before %+v after %+v", spent.Global, after.Global)
	}
	// a may now use any class; c only speculative, and is refused above it.
	p, err := c.Acquire(ctx, Request{APIKey: "key-a2", Class: admission.ClassInteractive, Model: "small"})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Request(); r.Class != admission.ClassInteractive || r.Tier != admission.TierHigh {
		t.Fatalf("a after the reload: class %s tier %v, want interactive and high", r.Class, r.Tier)
	}
	p.Drop()
	var ce *ClassError
	if _, err := c.Acquire(ctx, Request{APIKey: "key-c", Class: admission.ClassBatch, Model: "small"}); !errors.As(err, &ce) {
		t.Fatalf("c above its class: %v, want a ClassError", err)
	}
	if _, err := c.Acquire(ctx, Request{APIKey: "key-b", Model: "small"}); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("b's key after its removal: %v, want ErrUnknownKey", err)
	}
	// The new ratio: ten first attempts earn one token, not five.
	b0, _ := c.RetryBalance(time.Now())
	for range 10 {
		p, err := c.Acquire(ctx, Request{APIKey: "key-a2", Model: "small"})
		if err != nil {
			t.Fatal(err)
		}
		p.Drop()
	}
	if b1, _ := c.RetryBalance(time.Now()); b1-b0 < 0.999 || b1-b0 > 1.001 {
		t.Fatalf("ten first attempts after the reload earned %v tokens, want 1 at the new ratio", b1-b0)
	}
}

// TestReconfigureRefusedChangesNothing: a config that does not validate,
// or changes what a running chain keeps, is refused naming the field, and
// the old keys, slots and bound still hold.
func TestReconfigureRefusedChangesNothing(t *testing.T) {
	cfg := reloadConfig(t)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut   func(*Config)
		field string
	}{
		{func(c *Config) { c.Tenants[1].Tier = "platinum" }, "tenants[1].tier"},
		{func(c *Config) { c.Tenants[0].APIKeysSHA256 = []string{"zz"} }, "tenants[0].api_keys_sha256[0]"},
		{func(c *Config) { c.Tenants[0].Classes = []string{"urgent"} }, "tenants[0].classes[0]"},
		{func(c *Config) { c.Tenants[1].Name = "a" }, "tenants[1].name"},
		{func(c *Config) { c.Retries.PerTenant.Ratio = 3 }, "Ratio"},
		{func(c *Config) { c.Retries.Disabled = true }, "Retries.Disabled"},
		{func(c *Config) { c.Spend = limiter(t, prices) }, "Config.Spend"},
		{func(c *Config) { c.Spend = nil }, "Config.Spend"},
		{func(c *Config) { c.Admission.Concurrency = -1 }, "Concurrency"},
		{func(c *Config) { c.Admission.FIFOOnly = true }, "FIFOOnly"},
	} {
		next := reloadConfig(t)
		next.Spend = cfg.Spend
		next.Admission.Concurrency, next.Admission.MaxQueue = 5, 3
		next.Tenants = []TenantConfig{{Name: "a", APIKeysSHA256: []string{HashKey("key-new")}}, {Name: "b", APIKeysSHA256: []string{HashKey("key-b")}}}
		tc.mut(&next)
		err := c.Reconfigure(next)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming it", tc.field, err)
		}
		if identified(c, "key-a") != "a/standard" || identified(c, "key-new") != "refused" {
			t.Fatalf("%s: refused, yet the keys changed", tc.field)
		}
		if st := c.Gate().Stats(); st.Concurrency != 2 || c.Gate().MaxQueue() != 8 {
			t.Fatalf("%s: refused, yet concurrency %d bound %d", tc.field, st.Concurrency, c.Gate().MaxQueue())
		}
	}
}

// TestReconfigureSlotsAndQueue changes the slots and the waiting room's
// bound while calls wait: lowering the bound below the depth keeps them
// waiting and refuses the next; raising the slots grants them.
func TestReconfigureSlotsAndQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := reloadConfig(t)
		cfg.Admission.Concurrency = 1
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		held, err := c.Acquire(ctx, Request{APIKey: "key-a", Model: "small"})
		if err != nil {
			t.Fatal(err)
		}
		results := make(chan error, 3)
		for range 3 {
			go func() {
				p, err := c.Acquire(ctx, Request{APIKey: "key-a", Model: "small"})
				if err == nil {
					p.Drop()
				}
				results <- err
			}()
		}
		synctest.Wait()
		if q := c.Gate().Stats().Queued; q != 3 {
			t.Fatalf("%d queued, want 3", q)
		}
		next := cfg
		next.Admission.MaxQueue = 1
		if err := c.Reconfigure(next); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if q := c.Gate().Stats().Queued; q != 3 || len(results) != 0 {
			t.Fatalf("after lowering the bound to 1: %d queued, %d answered; want 3 kept waiting", q, len(results))
		}
		var rej *admission.Rejection
		if _, err := c.Acquire(ctx, Request{APIKey: "key-a", Model: "small"}); !errors.As(err, &rej) || rej.Reason != admission.ReasonQueueFull {
			t.Fatalf("a newcomer over the new bound: %v, want queue_full", err)
		}
		next.Admission.Concurrency = 4
		if err := c.Reconfigure(next); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := <-results; err != nil {
				t.Fatalf("a waiting call after the slots were raised: %v", err)
			}
		}
		if st := c.Gate().Stats(); st.Concurrency != 4 || st.Queued != 0 || st.InFlight != 1 {
			t.Fatalf("after raising the slots: %+v", st)
		}
		next.Admission.Concurrency = 1
		if err := c.Reconfigure(next); err != nil {
			t.Fatal(err)
		}
		if err := held.Done(Outcome{Result: admission.Success}); err != nil {
			t.Fatal(err)
		}
		if st := c.Gate().Stats(); st.Concurrency != 1 || st.InFlight != 0 {
			t.Fatalf("after lowering the slots: %+v", st)
		}
	})
}

// TestCoreReconfigure: the chain in virtual time takes the same changes.
func TestCoreReconfigure(t *testing.T) {
	cfg := reloadConfig(t)
	c, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	next := cfg
	next.Tenants = []TenantConfig{{Name: "a", Tier: "low", APIKeysSHA256: []string{HashKey("key-a")}}}
	next.Admission.Concurrency = 3
	if err := c.Reconfigure(t0, next); err != nil {
		t.Fatal(err)
	}
	tk := new(Ticket)
	if _, err := c.Arrive(t0, Request{APIKey: "key-a", Model: "small"}, tk, true); err != nil {
		t.Fatal(err)
	}
	if tk.Request().Tier != admission.TierLow || c.Gate().Concurrency() != 3 {
		t.Fatalf("tier %v concurrency %d", tk.Request().Tier, c.Gate().Concurrency())
	}
}
