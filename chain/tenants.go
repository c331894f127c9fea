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
	"github.com/sluicehq/sluice/internal/yamlpath"
)

// AnonymousTenant is the tenant of every call when no tenants are
// configured, and of a call the shell names no tenant for.
const AnonymousTenant = contract.AnonymousTenant

// ErrUnknownKey is the identify stage's answer to a missing or unknown API
// key when tenants have keys: the gateway's 401.
var ErrUnknownKey = errors.New("chain: missing or unknown API key")

// TenantConfig is one tenant: who it is (its name, tier and API keys),
// what it may ask (its classes) and its share of the gate. In a
// configuration file it is an item of tenants.
type TenantConfig struct {
	// Name identifies the tenant in metrics, budgets, books and logs.
	// Required, unique.
	Name string `yaml:"name"`
	// Tier is the tenant's tier: low, standard or high. Empty means
	// standard.
	Tier string `yaml:"tier"`
	// APIKeysSHA256 are the hex SHA-256 digests of the tenant's API keys
	// (see HashKey, `sluice hash-key`); the keys themselves are never
	// stored. A tenant without keys is one the shell names itself (the
	// simulator's); the gateway requires at least one.
	APIKeysSHA256 []string `yaml:"api_keys_sha256"`
	// Classes are the priority classes the tenant may use. Empty means
	// any. A call in another class is demoted to the allowed class of the
	// highest rank not above it (a call ranked below every allowed class
	// asks for less than the tenant may have, and keeps its class) — the
	// gateway returns the class applied in X-Sluice-Class — or refused
	// with *ClassError when DisallowedClass is "refuse".
	Classes []string `yaml:"classes"`
	// DisallowedClass is what a call in a class not in Classes gets:
	// "demote" (empty means demote) or "refuse" (the gateway's 403,
	// class_not_allowed).
	DisallowedClass string `yaml:"disallowed_class"`
	// Share is the tenant's part of each pool's gate: its weight in the
	// fair share, its cap on slots, its part of the waiting room (see
	// admission.TenantShare). Written inline: weight, max_concurrency,
	// queue_share.
	Share admission.TenantShare `yaml:",inline"`
	// Mode is the tenant's mode: "enforce" or "observe" (see Mode). Empty
	// means the chain's (Config.Mode).
	Mode string `yaml:"mode"`
}

// The modes of a chain and of its tenants (Config.Mode, TenantConfig.Mode).
// In observe mode every stage and the gate decide about a call as they
// would in enforce mode, and nothing is enforced: the call is sent at
// once, unchanged, what it would have had (a refusal, a cheaper model, a
// wait) is recorded on it (Request.Would…) for the shell to count and log,
// and what it takes — its slot, its spend, its requests and tokens — is
// taken as it would be, so that the decisions about the calls after it
// are the ones an enforcing chain would make.
const (
	ModeEnforce = "enforce"
	ModeObserve = "observe"
)

// validMode checks a mode's spelling; empty is valid (the default).
func validMode(m string) error {
	switch m {
	case "", ModeEnforce, ModeObserve:
		return nil
	}
	return fmt.Errorf("%q, want enforce or observe", m)
}

// Validate checks t on its own, naming the first bad field by its YAML key
// (a *yamlpath.FieldError relative to the tenant). What needs the rest of
// the configuration — names and keys unique, classes that exist — is the
// chain's to check when it is built (New, Reconfigure).
func (t TenantConfig) Validate() error {
	if t.Name == "" {
		return yamlpath.Errorf("name", "required")
	}
	if _, err := admission.ParseTier(t.Tier); err != nil {
		return yamlpath.Errorf("tier", "%v", err)
	}
	for j, h := range t.APIKeysSHA256 {
		if _, err := ParseDigest(h); err != nil {
			return yamlpath.Errorf(fmt.Sprintf("api_keys_sha256[%d]", j), "%v", err)
		}
	}
	switch t.DisallowedClass {
	case "", "demote", "refuse":
	default:
		return yamlpath.Errorf("disallowed_class", "%q, want demote or refuse", t.DisallowedClass)
	}
	if err := validMode(t.Mode); err != nil {
		return yamlpath.Errorf("mode", "%v", err)
	}
	return t.Share.Validate()
}

type tenant struct {
	name    string
	tier    admission.Tier
	classes []string // allowed; nil: any
	refuse  bool
	observe bool // its mode, or the chain's when it names none
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
	// anonymous is the tenant of calls no configured tenant claims, in
	// the chain's mode.
	anonymous *tenant
}

func newIdentify(cfgs []TenantConfig, mode string, gate GateView) (*identify, error) {
	id := &identify{rank: func(class string) (int, bool) {
		r, err := gate.Rank(admission.Request{Class: class})
		return r, err == nil
	}}
	tb, err := id.newTable(cfgs, mode)
	if err != nil {
		return nil, err
	}
	id.table.Store(tb)
	return id, nil
}

// newTable builds the table of cfgs in the chain's mode, or an error
// naming the invalid field.
func (id *identify) newTable(cfgs []TenantConfig, mode string) (*tenantTable, error) {
	if err := validMode(mode); err != nil {
		return nil, yamlpath.Errorf("mode", "%v", err)
	}
	if err := ValidateTenants(cfgs); err != nil {
		return nil, err
	}
	observe := mode == ModeObserve
	tb := &tenantTable{byName: map[string]*tenant{}, anonymous: &tenant{name: AnonymousTenant, observe: observe}}
	for i, c := range cfgs {
		tier, _ := admission.ParseTier(c.Tier)
		t := &tenant{name: c.Name, tier: tier, refuse: c.DisallowedClass == "refuse",
			observe: c.Mode == ModeObserve || (c.Mode == "" && observe)}
		for j, class := range c.Classes {
			if _, ok := id.rank(class); !ok {
				return nil, yamlpath.Errorf(fmt.Sprintf("tenants[%d].classes[%d]", i, j), "%q is not a class of the gate", class)
			}
			if slices.Contains(t.classes, class) {
				return nil, yamlpath.Errorf(fmt.Sprintf("tenants[%d].classes[%d]", i, j), "%q appears twice", class)
			}
			t.classes = append(t.classes, class)
		}
		tb.byName[c.Name] = t
		tb.order = append(tb.order, t)
		for _, h := range c.APIKeysSHA256 {
			d, _ := ParseDigest(h) // valid: ValidateTenants parsed it
			tb.keys = append(tb.keys, tenantKey{digest: d, tenant: t})
		}
	}
	return tb, nil
}

// ValidateTenants checks the tenants of one configuration: each on its own
// (TenantConfig.Validate), their names unique, and no key any two share.
// Errors name the field by its YAML path (tenants[i].…). The classes each
// may use are checked against the gate's when the chain is built.
func ValidateTenants(cfgs []TenantConfig) error {
	names := map[string]bool{}
	owner := map[[sha256.Size]byte]string{}
	for i, c := range cfgs {
		at := fmt.Sprintf("tenants[%d]", i)
		if err := c.Validate(); err != nil {
			return yamlpath.At(at, err)
		}
		if names[c.Name] {
			return yamlpath.Errorf(at+".name", "%q is a second tenant of that name", c.Name)
		}
		names[c.Name] = true
		for j, h := range c.APIKeysSHA256 {
			d, _ := ParseDigest(h) // valid: Validate parsed it
			if other, dup := owner[d]; dup {
				return yamlpath.Errorf(fmt.Sprintf("%s.api_keys_sha256[%d]", at, j), "the same key is also %s's", other)
			}
			owner[d] = c.Name
		}
	}
	return nil
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
	tb := id.table.Load()
	if r.Tenant != "" {
		if t = tb.byName[r.Tenant]; t == nil {
			// A tenant the shell vouches for, as it is, in the
			// chain's mode.
			r.Observe = tb.anonymous.observe
			return nil, nil
		}
	} else if t = tb.byKey(r.APIKey); t == nil {
		return nil, ErrUnknownKey
	}
	r.Tenant, r.Tier, r.Observe = t.name, t.tier, t.observe
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

// byKey returns the tenant of key, the anonymous tenant when no tenant has
// keys, or nil.
func (id *identify) byKey(key string) *tenant {
	return id.table.Load().byKey(key)
}

func (tb *tenantTable) byKey(key string) *tenant {
	if len(tb.keys) == 0 {
		return tb.anonymous
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
