package gateway

import (
	"hash/maphash"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
)

// AnonymousTenant is the tenant of every request when no tenants are
// configured.
const AnonymousTenant = chain.AnonymousTenant

// HashKey returns the hex SHA-256 digest of an API key, as the config wants.
func HashKey(key string) string { return chain.HashKey(key) }

// identify returns the caller's tenant, or false for a missing or unknown
// key (a 401). With no tenants configured everyone is the anonymous tenant.
// The key is compared by the chain's identify stage (digests only, in
// constant time); this reads it from the request.
func (g *Gateway) identify(r *http.Request) (string, admission.Tier, bool) {
	key := bearer(r.Header.Get("Authorization"))
	if key == "" {
		key = r.Header.Get("X-Api-Key") // Anthropic-style clients
	}
	return g.chain.Identify(key)
}

// caller tells apart the callers of the anonymous tenant — when no
// tenants are configured, every service behind the gateway — by a hash of
// the key each presents (chain.Request.Caller): their calls' service
// times are kept apart (a service of long chats from one of short
// completions). A keyed tenant is told by its name, and needs none. The
// hash is keyed by a seed of the process, and nothing of the key is kept.
func (g *Gateway) caller(r *http.Request, tenant string) uint64 {
	if tenant != AnonymousTenant {
		return 0
	}
	key := bearer(r.Header.Get("Authorization"))
	if key == "" {
		key = r.Header.Get("X-Api-Key")
	}
	if key == "" {
		return 0
	}
	return maphash.String(callerSeed, key)
}

// callerSeed keys the callers' hashes (see caller).
var callerSeed = maphash.MakeSeed()

func bearer(h string) string {
	const prefix = "Bearer "
	if len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix) {
		return strings.TrimSpace(h[len(prefix):])
	}
	return ""
}

// identified says whether the request carries a valid key (always, without
// tenants).
func (g *Gateway) identified(r *http.Request) bool {
	_, _, ok := g.identify(r)
	return ok
}

// tenantInfo returns a configured tenant by name; with no tenants
// configured, the anonymous one (named or not).
func (g *Gateway) tenantInfo(name string) (chain.TenantInfo, bool) {
	all := g.chain.Tenants()
	if len(all) == 0 && (name == "" || name == AnonymousTenant) {
		return chain.TenantInfo{Name: AnonymousTenant}, true
	}
	for _, t := range all {
		if t.Name == name {
			return t, true
		}
	}
	return chain.TenantInfo{}, false
}
