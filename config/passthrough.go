package config

import (
	"fmt"
	"net/http"
	"strings"
)

// GatedPaths are the APIs the gateway always admits through the chain
// (POST only): passthrough may not cover them.
var GatedPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"}

// BatchPaths are the Batch API's, which the gateway serves itself (with
// their subpaths) unless passthrough forwards them.
var BatchPaths = []string{"/v1/files", "/v1/batches"}

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
		for _, gated := range GatedPaths {
			if p.Path == gated || strings.HasPrefix(gated, p.Path) && strings.HasSuffix(p.Path, "/") {
				return fmt.Errorf("config: %s.path: %q covers the gated API %s, which is always admitted as such", f, p.Path, gated)
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
