package config

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/internal/yamlpath"
)

// Several deployments: `upstreams:` lists the providers (or regions, or
// accounts) the gateway forwards to, each with the models it serves; every
// (deployment, model) is a pool with its own gate (chain.RoutingConfig).
// `routes:` orders the deployments of a model for failover, and `degrade:`
// says when a call may go one rung down the ladder under load. The single
// `upstream:` stays the one-deployment case: one pool for every model.

// DeploymentConfig is one deployment in upstreams.
type DeploymentConfig struct {
	// Name identifies the deployment in routes, metrics, logs and
	// X-Sluice-Upstream. Required, unique; letters, digits, '.', '_', '-'.
	Name string `yaml:"name"`
	// URL is the deployment's base URL, e.g. https://api.openai.com.
	// Required: http or https, as upstream.url.
	URL string `yaml:"url"`
	// APIKeyEnv names the environment variable holding the deployment's
	// API key, read when the gateway starts (empty or unset is an error
	// naming this field). Empty means none: the caller's Authorization is
	// forwarded as is — allowed only without tenants, as for upstream. The
	// key is never logged nor returned.
	APIKeyEnv string `yaml:"api_key_env"`
	// Flavour is the API the deployment speaks: "openai" (the key sent as
	// Authorization: Bearer) or "anthropic" (the key sent as x-api-key). A
	// call is routed only to deployments of its API's flavour. Empty means
	// openai.
	Flavour string `yaml:"flavour"`
	// Concurrency is how many calls may be in flight to each of its
	// models' pools, unless the model sets its own: 1 to 100000. Zero
	// (absent) means each pool without a concurrency of its own learns it
	// from the deployment's answers, within admission.learn's bounds.
	Concurrency int `yaml:"concurrency"`
	// Models are the models it serves. At least one.
	Models []ModelConfig `yaml:"models"`
}

// ModelConfig is one model a deployment serves: one pool.
type ModelConfig struct {
	// Name is the model's name at the deployment: a call is sent upstream
	// with it, whichever of its names the caller used. Required; unique
	// within the deployment, aliases included.
	Name string `yaml:"name"`
	// Aliases are other names callers may use for it (a dated version, a
	// shorter name). Each unique within the deployment, names included.
	Aliases []string `yaml:"aliases"`
	// Concurrency is how many calls may be in flight in this pool. Zero
	// means the deployment's concurrency; at most 100000.
	Concurrency int `yaml:"concurrency"`
	// RPM and TPM are the deployment's requests and tokens per minute for
	// this model. Zero means none configured (a limit is then learned from
	// the provider's rate-limit headers when it sends them); negative is
	// an error.
	RPM int64 `yaml:"rpm"`
	TPM int64 `yaml:"tpm"`
}

// The API flavours of a deployment.
const (
	FlavourOpenAI    = "openai"
	FlavourAnthropic = "anthropic"
)

var deploymentName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Deployment is what the gateway needs at run time to reach one deployment.
type Deployment struct {
	Name string
	URL  *url.URL
	// APIKeyEnv is the variable holding the key; empty: the caller's
	// Authorization is forwarded. KeyField is its YAML path, for the error
	// when the variable is empty.
	APIKeyEnv, KeyField string
	// Flavour is FlavourOpenAI or FlavourAnthropic; AuthHeader how the key
	// is sent: "authorization" (Bearer) or "x-api-key".
	Flavour, AuthHeader string
}

// Deployments lists where calls go, with their URLs parsed and their
// flavours defaulted: each of upstreams, in order, or the one upstream as
// a deployment named chain.DefaultPool ("default", as X-Sluice-Upstream
// says) — one upstream is one deployment and one pool.
func (c Config) Deployments() ([]Deployment, error) {
	if len(c.Upstreams) == 0 {
		u, err := parseUpstreamURL("upstream.url", c.Upstream.URL)
		if err != nil {
			return nil, err
		}
		auth := c.Upstream.AuthHeader
		if auth == "" {
			auth = "authorization"
		}
		return []Deployment{{Name: chain.DefaultPool, URL: u, APIKeyEnv: c.Upstream.APIKeyEnv, KeyField: "upstream.api_key_env",
			Flavour: FlavourOpenAI, AuthHeader: auth}}, nil
	}
	var out []Deployment
	for i, d := range c.Upstreams {
		u, err := parseUpstreamURL(fmt.Sprintf("upstreams[%d].url", i), d.URL)
		if err != nil {
			return nil, err
		}
		dep := Deployment{Name: d.Name, URL: u, APIKeyEnv: d.APIKeyEnv, KeyField: fmt.Sprintf("upstreams[%d].api_key_env", i),
			Flavour: d.flavour(), AuthHeader: "authorization"}
		if dep.Flavour == FlavourAnthropic {
			dep.AuthHeader = "x-api-key"
		}
		out = append(out, dep)
	}
	return out, nil
}

func (d DeploymentConfig) flavour() string {
	if d.Flavour == "" {
		return FlavourOpenAI
	}
	return d.Flavour
}

// concurrency is the model's pool concurrency in deployment d.
func (m ModelConfig) concurrency(d DeploymentConfig) int {
	if m.Concurrency != 0 {
		return m.Concurrency
	}
	return d.Concurrency
}

// names are the names callers may use for the model.
func (m ModelConfig) names() []string { return append([]string{m.Name}, m.Aliases...) }

// largestPoolConcurrency is the largest concurrency of any pool: with
// upstreams, the base gate's (admission.concurrency is then not written).
func (c Config) largestPoolConcurrency() int {
	n := 0
	for _, d := range c.Upstreams {
		for _, m := range d.Models {
			n = max(n, m.concurrency(d))
		}
	}
	return n
}

// parseUpstreamURL checks an http(s) base URL, naming field.
func parseUpstreamURL(field, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errorf("%s is required", field)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errorf("%s: %q is not an http(s) URL", field, raw)
	}
	return u, nil
}

// servedAt is one deployment serving a name. servedBy maps every caller-facing name (model names and aliases) to the
// deployments serving it, in upstreams order, with the model's name there.
type servedAt struct {
	deployment int    // index in upstreams
	model      string // the name at the deployment
}

func (c Config) servedBy() map[string][]servedAt {
	out := map[string][]servedAt{}
	for i, d := range c.Upstreams {
		for _, m := range d.Models {
			for _, n := range m.names() {
				out[n] = append(out[n], servedAt{i, m.Name})
			}
		}
	}
	return out
}

// DegradeLadder is the ladder under load and the YAML path it was written
// at: degrade.ladder, or spend.ladder when that is empty.
func (c Config) DegradeLadder() (map[string]string, string) {
	if len(c.Degrade.Ladder) == 0 && c.Spend != nil && len(c.Spend.Ladder) > 0 {
		return c.Spend.Ladder, "spend.ladder"
	}
	return c.Degrade.Ladder, "degrade.ladder"
}

// validateUpstreams checks upstreams, routes and degrade on a config with
// its defaults (classes filled in).
func (c Config) validateUpstreams() error {
	if len(c.Upstreams) == 0 {
		switch {
		case len(c.Routes) > 0:
			return errorf("routes: needs upstreams (several deployments); with the single upstream every model goes to it")
		case len(c.Degrade.Ladder) > 0:
			return errorf("degrade.ladder: needs upstreams (several deployments): degrading under load picks among their pools")
		case len(c.Degrade.Classes) > 0:
			return errorf("degrade.classes: needs upstreams (several deployments): degrading under load picks among their pools")
		}
		return nil
	}
	switch {
	case c.Upstream.URL != "":
		return errorf("upstreams: set together with upstream.url: use upstream for one provider or upstreams for several, not both")
	case c.Upstream.APIKeyEnv != "":
		return errorf("upstream.api_key_env: set together with upstreams: give each deployment its own upstreams[i].api_key_env")
	case c.Upstream.AuthHeader != "" && c.Upstream.AuthHeader != "authorization":
		return errorf("upstream.auth_header: set together with upstreams: a deployment's flavour (upstreams[i].flavour) says how its key is sent")
	case c.Admission.Concurrency != 0 && !c.Admission.concurrencyDerived:
		return errorf("admission.concurrency: set together with upstreams: set it per upstream (upstreams[i].concurrency, upstreams[i].models[j].concurrency)")
	}
	names := map[string]int{}
	for i, d := range c.Upstreams {
		path := fmt.Sprintf("upstreams[%d]", i)
		switch {
		case d.Name == "":
			return errorf("%s.name is required", path)
		case !deploymentName.MatchString(d.Name):
			return errorf("%s.name: %q, want letters, digits, '.', '_' or '-'", path, d.Name)
		}
		if j, dup := names[d.Name]; dup {
			return errorf("%s.name: %q is also upstreams[%d]'s", path, d.Name, j)
		}
		names[d.Name] = i
		if _, err := parseUpstreamURL(path+".url", d.URL); err != nil {
			return err
		}
		if len(c.Tenants) > 0 && d.APIKeyEnv == "" {
			return errorf("%s.api_key_env is required when tenants are configured: their keys must not be forwarded to the provider", path)
		}
		switch d.Flavour {
		case "", FlavourOpenAI, FlavourAnthropic:
		default:
			return errorf("%s.flavour: %q, want openai or anthropic", path, d.Flavour)
		}
		if err := intIn(path+".concurrency", d.Concurrency, 0, maxConcurrency); err != nil {
			return err
		}
		if len(d.Models) == 0 {
			return errorf("%s.models: at least one model is required", path)
		}
		seen := map[string]string{} // name → the field that named it first
		for j, m := range d.Models {
			mpath := fmt.Sprintf("%s.models[%d]", path, j)
			if m.Name == "" {
				return errorf("%s.name is required", mpath)
			}
			for k, n := range m.names() {
				field := mpath + ".name"
				if k > 0 {
					field = fmt.Sprintf("%s.aliases[%d]", mpath, k-1)
				}
				if n == "" || strings.ContainsFunc(n, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
					return errorf("%s: %q is not a model name (empty, or spaces or control characters)", field, n)
				}
				if other, dup := seen[n]; dup {
					return errorf("%s: %q is also %s in deployment %q", field, n, other, d.Name)
				}
				seen[n] = field
			}
			for _, err := range []error{
				intIn(mpath+".concurrency", m.Concurrency, 0, maxConcurrency),
				intIn(mpath+".rpm", m.RPM, 0, maxRate),
				intIn(mpath+".tpm", m.TPM, 0, maxRate),
			} {
				if err != nil {
					return err
				}
			}
		}
	}
	servedBy := c.servedBy()
	for _, model := range slices.Sorted(maps.Keys(c.Routes)) {
		path := "routes." + model
		if len(servedBy[model]) == 0 {
			return errorf("%s: model %q is served by no deployment (no upstreams[i].models name or alias it)", path, model)
		}
		deps := c.Routes[model]
		if len(deps) == 0 {
			return errorf("%s: at least one deployment is required", path)
		}
		listed := map[string]int{}
		for k, dep := range deps {
			field := fmt.Sprintf("%s[%d]", path, k)
			i, ok := names[dep]
			if !ok {
				return errorf("%s: %q is not a deployment of upstreams", field, dep)
			}
			if prev, dup := listed[dep]; dup {
				return errorf("%s: deployment %q is listed twice (also %s[%d])", field, dep, path, prev)
			}
			listed[dep] = k
			if !servesAt(servedBy[model], i) {
				return errorf("%s: deployment %q does not serve model %q", field, dep, model)
			}
		}
	}
	served := func(model string) bool { return len(servedBy[model]) > 0 }
	ladder, lpath := c.DegradeLadder()
	if err := yamlpath.At(lpath, chain.ValidateLadder(ladder, served)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if lpath != "spend.ladder" && c.Spend != nil {
		// The spend limiter's rungs are routed too: a call it degrades
		// must reach a pool.
		if err := yamlpath.At("spend.ladder", chain.ValidateLadder(c.Spend.Ladder, served)); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	// The ladder was checked above, as it applies (it may be spend's).
	classes := chain.DegradeConfig{Classes: c.Degrade.Classes}
	if err := yamlpath.At("degrade", classes.Validate(served, slices.Sorted(maps.Keys(c.Classes)))); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

func servesAt(s []servedAt, deployment int) bool {
	for _, x := range s {
		if x.deployment == deployment {
			return true
		}
	}
	return false
}

// maxRate bounds rpm and tpm: 1e12 a minute is no provider's limit, and
// a bound keeps a typo from being silently no limit.
const maxRate = 1_000_000_000_000

// routingConfig is the chain's routing the config describes: nil without
// upstreams (one pool, the gate of base); otherwise a pool per (deployment,
// model) named "deployment/model", each gated as base with the pool's
// concurrency and a waiting room of admission.max_queue when set, else
// derived for the pool's concurrency as DefaultMaxQueue derives the
// gate's (tenants' queue shares follow it). Every caller-facing name,
// aliases included, is routed: as routes says, else to every deployment
// serving it in upstreams order.
func (c Config) routingConfig(base admission.Config) (*chain.RoutingConfig, error) {
	if len(c.Upstreams) == 0 {
		return nil, nil
	}
	rc := &chain.RoutingConfig{Routes: map[string][]string{}}
	for _, d := range c.Upstreams {
		for j, m := range d.Models {
			conc := m.concurrency(d)
			a := base
			a.Concurrency = c.startConcurrency(conc)
			if c.Admission.MaxQueue == nil || c.Admission.maxQueueDerived {
				a.MaxQueue = c.defaultMaxQueueFor(c.ceilingFor(conc))
			}
			if err := a.Validate(); err != nil {
				return nil, errorf("upstreams[%d].models[%d]: %v", indexOf(c.Upstreams, d.Name), j, err)
			}
			rc.Pools = append(rc.Pools, chain.PoolConfig{
				Name: poolName(d.Name, m.Name), Deployment: d.Name, Model: m.Name,
				Flavour: d.flavour(), Admission: a, RPM: m.RPM, TPM: m.TPM, Learn: true,
			})
		}
	}
	servedBy := c.servedBy()
	for name, s := range servedBy {
		if deps, ok := c.Routes[name]; ok {
			for _, dep := range deps {
				for _, x := range s {
					if c.Upstreams[x.deployment].Name == dep {
						rc.Routes[name] = append(rc.Routes[name], poolName(dep, x.model))
					}
				}
			}
			continue
		}
		for _, x := range s {
			rc.Routes[name] = append(rc.Routes[name], poolName(c.Upstreams[x.deployment].Name, x.model))
		}
	}
	if ladder, _ := c.DegradeLadder(); len(ladder) > 0 {
		rc.Ladder = make(map[string]string, len(ladder))
		for k, v := range ladder {
			rc.Ladder[k] = v
		}
	}
	rc.DegradeClasses = append([]string(nil), c.Degrade.Classes...)
	return rc, nil
}

func poolName(deployment, model string) string { return deployment + "/" + model }

func indexOf(ds []DeploymentConfig, name string) int {
	for i, d := range ds {
		if d.Name == name {
			return i
		}
	}
	return -1
}

// Routing is the routing the config describes, as the chain receives it:
// nil with the single upstream. For `sluice check-config`. The config must
// be valid.
func (c Config) Routing() (*chain.RoutingConfig, error) {
	d := c.WithDefaults()
	base, err := d.admissionConfig()
	if err != nil {
		return nil, err
	}
	return d.routingConfig(base)
}
