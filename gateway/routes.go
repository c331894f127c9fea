package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// What the gateway forwards is what its policy saw. Every path is one of:
//
//   - gated: the APIs whose calls the gate admits, the spend limiter prices
//     and the drain refuses (POST only);
//   - passed through: a path the config allows explicitly (passthrough),
//     with its methods, admitted through the same chain at a class, and
//     priced only if it is billed;
//   - refused: everything else, a 404 in the caller's API shape, or a 405
//     for a method the path does not take. TRACE and CONNECT are never
//     forwarded: a provider that echoes TRACE would hand the caller the
//     provider's key.
//
// Tenant-scoped resources of the provider (files, batches, stored
// responses, assistants…) all belong to the one provider key, so they
// cannot be passed through while the gateway has tenants: one tenant could
// read or delete another's. /v1/files and /v1/batches are the gateway's own
// Batch API instead (package batchapi), each tenant's own.

// PassthroughConfig is one path forwarded beside the gated APIs.
type PassthroughConfig struct {
	// Path is an exact path ("/v1/models") or, ending in "/", a prefix
	// ("/v1/models/" matches "/v1/models/gpt-4o"). Required.
	Path string `yaml:"path"`
	// Methods are the methods allowed on it, such as [GET]. Required.
	// TRACE and CONNECT are refused.
	Methods []string `yaml:"methods"`
	// Class is the priority class its calls are admitted at, whatever the
	// caller's X-Sluice-Priority says. Empty means the caller's, as for the
	// gated APIs.
	Class string `yaml:"class"`
	// Billed says the provider bills the call: its body is a JSON request
	// naming a model, which the spend limiter prices and books like the
	// gated APIs', and its service time feeds the wait estimates. False
	// means not priced, and the call holds a slot without feeding the
	// estimates (a metadata call would make the provider look fast).
	Billed bool `yaml:"billed"`
}

// tenantScoped are the provider's per-key resources: under one provider
// key they are shared by every tenant.
var tenantScoped = []string{
	"/v1/files", "/v1/batches", "/v1/uploads", "/v1/fine_tuning", "/v1/vector_stores",
	"/v1/assistants", "/v1/threads", "/v1/containers", "/v1/responses/", "/v1/chat/completions/",
	"/v1/conversations", "/v1/evals", "/v1/messages/batches", "/v1/realtime",
}

// route is what the gateway does with one path.
type route struct {
	path     string
	prefix   bool
	methods  []string
	class    string // forced class; empty: the caller's
	billed   bool
	gated    bool // one of the built-in APIs
	batchAPI bool // the Batch API, served by the gateway (package batchapi)
}

// gatedRoutes are the built-in APIs.
var gatedRoutes = []route{
	{path: "/v1/chat/completions", methods: []string{http.MethodPost}, billed: true, gated: true},
	{path: "/v1/completions", methods: []string{http.MethodPost}, billed: true, gated: true},
	{path: "/v1/embeddings", methods: []string{http.MethodPost}, billed: true, gated: true},
	{path: "/v1/responses", methods: []string{http.MethodPost}, billed: true, gated: true},
	{path: "/v1/messages", methods: []string{http.MethodPost}, billed: true, gated: true},
}

// batchRoutes are the Batch API's paths, served by the gateway itself
// (package batchapi) unless passthrough forwards them (allowed only without
// tenants, and with the Batch API off).
var batchRoutes = []route{
	{path: "/v1/files", methods: batchMethods, batchAPI: true},
	{path: "/v1/files/", prefix: true, methods: batchMethods, batchAPI: true},
	{path: "/v1/batches", methods: batchMethods, batchAPI: true},
	{path: "/v1/batches/", prefix: true, methods: batchMethods, batchAPI: true},
}

// batchMethods reach the Batch API's handler, which answers a method it
// does not take on another tenant's id with 404, like any other.
var batchMethods = []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch}

// routes classifies paths. Immutable after construction.
type routes struct {
	exact    map[string]*route
	prefixes []*route // longest first
}

func newRoutes(pass []PassthroughConfig) *routes {
	rs := &routes{exact: map[string]*route{}}
	for i := range gatedRoutes {
		rs.exact[gatedRoutes[i].path] = &gatedRoutes[i]
	}
	for _, p := range pass {
		rt := &route{path: p.Path, prefix: strings.HasSuffix(p.Path, "/"), class: p.Class, billed: p.Billed}
		for _, m := range p.Methods {
			rt.methods = append(rt.methods, strings.ToUpper(m))
		}
		if rt.prefix {
			rs.prefixes = append(rs.prefixes, rt)
		} else {
			rs.exact[p.Path] = rt
		}
	}
	for i := range batchRoutes {
		rt := &batchRoutes[i]
		switch {
		case !rt.prefix && rs.exact[rt.path] == nil:
			rs.exact[rt.path] = rt
		case rt.prefix && !slices.ContainsFunc(rs.prefixes, func(p *route) bool { return p.path == rt.path }):
			rs.prefixes = append(rs.prefixes, rt)
		}
	}
	slices.SortFunc(rs.prefixes, func(a, b *route) int { return len(b.path) - len(a.path) })
	return rs
}

// match returns the path's route, or nil.
func (rs *routes) match(path string) *route {
	if rt := rs.exact[path]; rt != nil {
		return rt
	}
	for _, rt := range rs.prefixes {
		if strings.HasPrefix(path, rt.path) {
			return rt
		}
	}
	return nil
}

func (rt *route) allows(method string) bool { return slices.Contains(rt.methods, method) }

// isAnthropicPath says whether a path is Anthropic's API, whose callers
// read every error of the gateway's own in Anthropic's shape (errors.go):
// refusals, bad input, unknown paths, upstream failures.
func isAnthropicPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") || path == "/v1/complete"
}

// neverForwarded are methods no route may take.
func neverForwarded(method string) bool {
	return method == http.MethodTrace || method == http.MethodConnect
}

// validatePassthrough checks the allow-list; tenants says whether the
// gateway has tenants.
func validatePassthrough(pass []PassthroughConfig, classes map[string]ClassConfig, tenants bool) error {
	seen := map[string]bool{}
	for i, p := range pass {
		f := fmt.Sprintf("passthrough[%d]", i)
		switch {
		case p.Path == "" || p.Path[0] != '/':
			return fmt.Errorf("config: %s.path: %q, want a path starting with /", f, p.Path)
		case strings.ContainsAny(p.Path, "?#*") || strings.Contains(p.Path, ".."):
			return fmt.Errorf("config: %s.path: %q: no query, fragment, wildcard or '..'", f, p.Path)
		case seen[p.Path]:
			return fmt.Errorf("config: %s.path: %q appears twice", f, p.Path)
		case len(p.Methods) == 0:
			return fmt.Errorf("config: %s.methods: required (for example [GET])", f)
		}
		seen[p.Path] = true
		for _, rt := range gatedRoutes {
			if p.Path == rt.path || strings.HasPrefix(rt.path, p.Path) && strings.HasSuffix(p.Path, "/") {
				return fmt.Errorf("config: %s.path: %q covers the gated API %s, which is always admitted as such", f, p.Path, rt.path)
			}
		}
		for j, m := range p.Methods {
			switch up := strings.ToUpper(m); up {
			case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
			case http.MethodTrace, http.MethodConnect:
				return fmt.Errorf("config: %s.methods[%d]: %s is never forwarded", f, j, up)
			default:
				return fmt.Errorf("config: %s.methods[%d]: %q is not an HTTP method", f, j, m)
			}
		}
		if p.Class != "" {
			if _, ok := classes[p.Class]; !ok {
				return fmt.Errorf("config: %s.class: %q is not a class of classes", f, p.Class)
			}
		}
		if tenants {
			for _, s := range tenantScoped {
				if strings.HasPrefix(p.Path, s) || strings.HasPrefix(s, p.Path) {
					return fmt.Errorf("config: %s.path: %q reaches the provider's per-key resources (%s), which every tenant would share under the one provider key", f, p.Path, s)
				}
			}
		}
	}
	return nil
}
