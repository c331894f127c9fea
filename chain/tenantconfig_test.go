package chain

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission"
)

// TestTenantSharesReachEveryPool: a tenant's share is given to the gate of
// every pool (each taking a queue share of its own waiting room), without
// changing the caller's routing, and a chain of tenants without shares
// leaves the gates' own tenants as they are.
func TestTenantSharesReachEveryPool(t *testing.T) {
	own := map[string]admission.TenantShare{"x": {Weight: 5}}
	rt := &RoutingConfig{
		Pools: []PoolConfig{
			{Name: "d/a", Deployment: "d", Model: "a", Admission: admission.Config{Concurrency: 1, MaxQueue: 4, Tenants: own}},
			{Name: "d/b", Deployment: "d", Model: "b", Admission: admission.Config{Concurrency: 1, MaxQueue: 8}},
		},
		Routes: map[string][]string{"a": {"d/a"}, "b": {"d/b"}},
	}
	share := admission.TenantShare{Weight: 2, QueueShare: 0.5}
	cfg := Config{Routing: rt, Tenants: []TenantConfig{{Name: "acme", Share: share}, {Name: "plain"}}}
	got := cfg.routing()
	for i, p := range got.Pools {
		if p.Admission.Tenants["acme"] != share {
			t.Errorf("pool %s: acme's share %+v, want %+v", p.Name, p.Admission.Tenants["acme"], share)
		}
		if _, ok := p.Admission.Tenants["plain"]; ok {
			t.Errorf("pool %s: a tenant without a share got one", p.Name)
		}
		if i == 0 && p.Admission.Tenants["x"].Weight != 5 {
			t.Errorf("pool %s lost its own tenant x: %+v", p.Name, p.Admission.Tenants)
		}
	}
	if len(own) != 1 || rt.Pools[1].Admission.Tenants != nil {
		t.Errorf("the caller's routing changed: %+v, %+v", own, rt.Pools[1].Admission.Tenants)
	}
	if plain := (Config{Routing: rt, Tenants: []TenantConfig{{Name: "plain"}}}).routing(); plain != rt {
		t.Error("no shares: the routing was copied")
	}
	if _, err := NewCore(cfg); err != nil {
		t.Fatalf("a chain of shared pools: %v", err)
	}
}

func TestTenantConfigValidateNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		t   TenantConfig
		err string
	}{
		{TenantConfig{}, "name: required"},
		{TenantConfig{Name: "a", Tier: "gold"}, "tier:"},
		{TenantConfig{Name: "a", APIKeysSHA256: []string{HashKey("k"), "sk-live-123"}}, "api_keys_sha256[1]: not a hex SHA-256 digest"},
		{TenantConfig{Name: "a", DisallowedClass: "drop"}, "disallowed_class:"},
		{TenantConfig{Name: "a", Share: admission.TenantShare{QueueShare: 3}}, "queue_share:"},
	} {
		err := tc.t.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want %q", tc.t, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "sk-live") {
			t.Errorf("the error echoes what may be a key: %v", err)
		}
	}
	two := []TenantConfig{{Name: "a", APIKeysSHA256: []string{HashKey("k")}}, {Name: "b", APIKeysSHA256: []string{strings.ToUpper(HashKey("k"))}}}
	_, err := NewCore(Config{Admission: admission.Config{Concurrency: 1}, Tenants: two})
	if err == nil || !strings.Contains(err.Error(), "tenants[1].api_keys_sha256[0]: the same key is also a's") {
		t.Errorf("one key for two tenants: %v", err)
	}
}
