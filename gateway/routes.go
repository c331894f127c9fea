package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/config"
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
var gatedRoutes = func() []route {
	var rs []route
	for _, path := range config.GatedPaths {
		rs = append(rs, route{path: path, methods: []string{http.MethodPost}, billed: true, gated: true})
	}
	return rs
}()

// batchRoutes are the Batch API's paths, served by the gateway itself
// (package batchapi) unless passthrough forwards them (allowed only without
// tenants, and with the Batch API off).
var batchRoutes = func() []route {
	var rs []route
	for _, path := range config.BatchPaths {
		rs = append(rs, route{path: path, methods: batchMethods, batchAPI: true},
			route{path: path + "/", prefix: true, methods: batchMethods, batchAPI: true})
	}
	return rs
}()

// batchMethods reach the Batch API's handler, which answers a method it
// does not take on another tenant's id with 404, like any other.
var batchMethods = []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch}

// routes classifies paths. Immutable after construction.
type routes struct {
	exact    map[string]*route
	prefixes []*route // longest first
}

func newRoutes(pass []config.PassthroughConfig) *routes {
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
// read every error of the gateway's own in Anthropic's shape (wire.Exchange):
// refusals, bad input, unknown paths, upstream failures.
func isAnthropicPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") || path == "/v1/complete"
}

// neverForwarded are methods no route may take.
func neverForwarded(method string) bool {
	return method == http.MethodTrace || method == http.MethodConnect
}
