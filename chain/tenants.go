package chain

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
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
	// Classes are the priority classes the tenant may use. Empty means
	// any. A call in another class is demoted to the allowed class of the
	// highest rank not above it (a call ranked below every allowed class
	// asks for less than the tenant may have, and keeps its class), or
	// refused with *ClassError when RefuseOtherClasses is set.
	Classes            []string
	RefuseOtherClasses bool
}

type tenant struct {
	name    string
	tier    admission.Tier
	classes []string // allowed; nil: any
	refuse  bool
}

// ClassError refuses a call in a class its tenant may not use (the
// gateway's 403).
type ClassError struct {
	Tenant, Class string
	Allowed       []string
}

func (e *ClassError) Error() string {
	return fmt.Sprintf("tenant %s may not use class %q (allowed: %s)", e.Tenant, e.Class, strings.Join(e.Allowed, ", "))
}

type tenantKey struct {
	digest [sha256.Size]byte
	tenant *tenant
}

// identify is the first stage: it finds the call's tenant. Keys are stored
// only as SHA-256 digests, and a presented key is compared against every
// digest in constant time, so neither the stored keys nor the timing of a
// lookup tell anything about them. Its table of tenants is immutable and
// swapped whole by a reconfiguration: a call reads it once.
type identify struct {
	table atomic.Pointer[tenantTable]
	rank  func(class string) (int, bool)
}

// tenantTable is the tenants of one configuration.
type tenantTable struct {
	keys   []tenantKey
	byName map[string]*tenant
	order  []*tenant
}

func newIdentify(cfgs []TenantConfig, gate GateView) (*identify, error) {
	id := &identify{rank: func(class string) (int, bool) {
		r, err := gate.Rank(admission.Request{Class: class})
		return r, err == nil
	}}
	tb, err := id.newTable(cfgs)
	if err != nil {
		return nil, err
	}
	id.table.Store(tb)
	return id, nil
}

// newTable builds the table of cfgs, or an error naming the invalid field.
func (id *identify) newTable(cfgs []TenantConfig) (*tenantTable, error) {
	tb := &tenantTable{byName: map[string]*tenant{}}
	for i, c := range cfgs {
		tier, err := admission.ParseTier(c.Tier)
		if err != nil {
			return nil, fmt.Errorf("tenants[%d].tier: %w", i, err)
		}
		t := &tenant{name: c.Name, tier: tier, refuse: c.RefuseOtherClasses}
		for j, class := range c.Classes {
			if _, ok := id.rank(class); !ok {
				return nil, fmt.Errorf("tenants[%d].classes[%d]: %q is not a class of the gate", i, j, class)
			}
			if slices.Contains(t.classes, class) {
				return nil, fmt.Errorf("tenants[%d].classes[%d]: %q appears twice", i, j, class)
			}
			t.classes = append(t.classes, class)
		}
		if tb.byName[c.Name] != nil {
			return nil, fmt.Errorf("tenants[%d].name: %q is a second tenant of that name", i, c.Name)
		}
		tb.byName[c.Name] = t
		tb.order = append(tb.order, t)
		for j, h := range c.KeysSHA256 {
			d, err := ParseDigest(h)
			if err != nil {
				return nil, fmt.Errorf("tenants[%d].api_keys_sha256[%d]: %w", i, j, err)
			}
			tb.keys = append(tb.keys, tenantKey{digest: d, tenant: t})
		}
	}
	return tb, nil
}

// ParseDigest parses a hex SHA-256 digest.
func ParseDigest(h string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(h))
	if err != nil || len(b) != sha256.Size {
		// The value is not echoed: a key pasted where its digest belongs
		// must not reach the logs or a reload's answer.
		return d, fmt.Errorf("not a hex SHA-256 digest (want 64 hex digits, got %d characters; see sluice hash-key)", len(strings.TrimSpace(h)))
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
	var t *tenant
	if r.Tenant != "" {
		if t = id.table.Load().byName[r.Tenant]; t == nil {
			return nil, nil // a tenant the shell vouches for, as it is
		}
	} else if t = id.byKey(r.APIKey); t == nil {
		return nil, ErrUnknownKey
	}
	r.Tenant, r.Tier = t.name, t.tier
	return nil, id.holdToClass(t, r)
}

// holdToClass keeps the call within its tenant's classes: the class the
// caller asked for is the caller's word, and a tenant allowed only batch
// work must not compete with other tenants' users by calling it
// interactive.
func (id *identify) holdToClass(t *tenant, r *Request) error {
	if r.AskedClass == "" {
		r.AskedClass = r.Class
	}
	if t.classes == nil || slices.Contains(t.classes, r.Class) {
		return nil
	}
	if t.refuse {
		return &ClassError{Tenant: t.name, Class: r.Class, Allowed: t.classes}
	}
	asked, ok := id.rank(r.Class)
	if !ok {
		return nil // the gate names the unknown class
	}
	best, bestRank := "", -1
	for _, c := range t.classes {
		if rk, _ := id.rank(c); rk <= asked && rk > bestRank {
			best, bestRank = c, rk
		}
	}
	if best != "" { // else it asks for less than any class it may use
		r.Class = best
	}
	return nil
}

var anonymous = &tenant{name: AnonymousTenant}

// byKey returns the tenant of key, the anonymous tenant when no tenant has
// keys, or nil.
func (id *identify) byKey(key string) *tenant {
	return id.table.Load().byKey(key)
}

func (tb *tenantTable) byKey(key string) *tenant {
	if len(tb.keys) == 0 {
		return anonymous
	}
	if key == "" {
		return nil
	}
	d := sha256.Sum256([]byte(key))
	var found *tenant
	for i := range tb.keys {
		// Every digest is compared, match or not.
		if subtle.ConstantTimeCompare(d[:], tb.keys[i].digest[:]) == 1 {
			found = tb.keys[i].tenant
		}
	}
	return found
}
