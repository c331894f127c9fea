package chain

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// AnonymousTenant is the tenant of every call when no tenants are
// configured, and of a call the shell names no tenant for.
const AnonymousTenant = contract.AnonymousTenant

// ErrUnknownKey is the identify stage's answer to a missing or unknown API
// key when tenants have keys: the gateway's 401.
var ErrUnknownKey = errors.New("chain: missing or unknown API key")

// TenantConfig is one tenant.
type TenantConfig struct {
	// Name identifies the tenant in metrics, budgets and books.
	Name string
	// Tier is the tenant's tier: low, standard or high ("" is standard).
	Tier string
	// KeysSHA256 are the hex SHA-256 digests of the tenant's API keys.
	KeysSHA256 []string
}

type tenant struct {
	name string
	tier admission.Tier
}

type tenantKey struct {
	digest [sha256.Size]byte
	tenant *tenant
}

// identify is the first stage: it finds the call's tenant. Keys are stored
// only as SHA-256 digests, and a presented key is compared against every
// digest in constant time, so neither the stored keys nor the timing of a
// lookup tell anything about them. Immutable after construction.
type identify struct {
	keys   []tenantKey
	byName map[string]*tenant
	order  []*tenant
}

func newIdentify(cfgs []TenantConfig) (*identify, error) {
	id := &identify{byName: map[string]*tenant{}}
	for i, c := range cfgs {
		tier, err := admission.ParseTier(c.Tier)
		if err != nil {
			return nil, fmt.Errorf("tenants[%d].tier: %w", i, err)
		}
		t := &tenant{name: c.Name, tier: tier}
		if id.byName[c.Name] != nil {
			return nil, fmt.Errorf("tenants[%d].name: %q is a second tenant of that name", i, c.Name)
		}
		id.byName[c.Name] = t
		id.order = append(id.order, t)
		for j, h := range c.KeysSHA256 {
			d, err := ParseDigest(h)
			if err != nil {
				return nil, fmt.Errorf("tenants[%d].api_keys_sha256[%d]: %w", i, j, err)
			}
			id.keys = append(id.keys, tenantKey{digest: d, tenant: t})
		}
	}
	return id, nil
}

// ParseDigest parses a hex SHA-256 digest.
func ParseDigest(h string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(h))
	if err != nil || len(b) != sha256.Size {
		return d, fmt.Errorf("%q is not a hex SHA-256 digest (64 hex digits)", h)
	}
	copy(d[:], b)
	return d, nil
}

// HashKey returns the hex SHA-256 digest of an API key, as TenantConfig
// wants it.
func HashKey(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// Admit sets the call's tenant and tier. It takes nothing, so it holds
// nothing.
func (id *identify) Admit(_ time.Time, r *Request) (Hold, error) {
	if r.Tenant != "" {
		if t := id.byName[r.Tenant]; t != nil {
			r.Tier = t.tier
		}
		return nil, nil
	}
	t := id.byKey(r.APIKey)
	if t == nil {
		return nil, ErrUnknownKey
	}
	r.Tenant, r.Tier = t.name, t.tier
	return nil, nil
}

var anonymous = &tenant{name: AnonymousTenant}

// byKey returns the tenant of key, the anonymous tenant when no tenant has
// keys, or nil.
func (id *identify) byKey(key string) *tenant {
	if len(id.keys) == 0 {
		return anonymous
	}
	if key == "" {
		return nil
	}
	d := sha256.Sum256([]byte(key))
	var found *tenant
	for i := range id.keys {
		// Every digest is compared, match or not.
		if subtle.ConstantTimeCompare(d[:], id.keys[i].digest[:]) == 1 {
			found = id.keys[i].tenant
		}
	}
	return found
}
