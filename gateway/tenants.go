package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// tenant is one configured tenant.
type tenant struct {
	name string
	tier admission.Tier
}

// tenantKey is one accepted key, as its SHA-256 digest.
type tenantKey struct {
	digest [sha256.Size]byte
	tenant *tenant
}

// tenants identifies callers. Keys are stored only as SHA-256 digests, and a
// presented key is compared against every digest in constant time, so
// neither the stored keys nor the timing of a lookup tell anything about them.
type tenants struct {
	keys []tenantKey
	all  []*tenant
}

func newTenants(cfgs []TenantConfig) (*tenants, error) {
	ts := &tenants{}
	for i, c := range cfgs {
		tier, err := admission.ParseTier(c.Tier)
		if err != nil {
			return nil, fmt.Errorf("tenants[%d].tier: %w", i, err)
		}
		t := &tenant{name: c.Name, tier: tier}
		ts.all = append(ts.all, t)
		for j, h := range c.APIKeysSHA256 {
			d, err := parseDigest(h)
			if err != nil {
				return nil, fmt.Errorf("tenants[%d].api_keys_sha256[%d]: %w", i, j, err)
			}
			ts.keys = append(ts.keys, tenantKey{digest: d, tenant: t})
		}
	}
	return ts, nil
}

func parseDigest(h string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(h))
	if err != nil || len(b) != sha256.Size {
		return d, fmt.Errorf("%q is not a hex SHA-256 digest (64 hex digits)", h)
	}
	copy(d[:], b)
	return d, nil
}

// HashKey returns the hex SHA-256 digest of an API key, as the config wants.
func HashKey(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

var anonymous = &tenant{name: contract.AnonymousTenant}

// identify returns the caller's tenant, or nil for a missing or unknown key
// (a 401). With no tenants configured everyone is the anonymous tenant.
func (ts *tenants) identify(r *http.Request) *tenant {
	if len(ts.keys) == 0 {
		return anonymous
	}
	key := bearer(r.Header.Get("Authorization"))
	if key == "" {
		key = r.Header.Get("X-Api-Key") // Anthropic-style clients
	}
	if key == "" {
		return nil
	}
	d := sha256.Sum256([]byte(key))
	var found *tenant
	for i := range ts.keys {
		// Every digest is compared, match or not.
		if subtle.ConstantTimeCompare(d[:], ts.keys[i].digest[:]) == 1 {
			found = ts.keys[i].tenant
		}
	}
	return found
}

func bearer(h string) string {
	const prefix = "Bearer "
	if len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix) {
		return strings.TrimSpace(h[len(prefix):])
	}
	return ""
}
