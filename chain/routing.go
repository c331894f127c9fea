package chain

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// RoutingConfig spreads calls over pools: one per (deployment, model), each
// with its own gate — slots, queue, service-time window and wait estimate
// — and its own request and token buckets. The route stage, last before
// the gate, picks the pool of each call (route.go). Nil in Config means one
// pool: the gate of Config.Admission, for every model.
type RoutingConfig struct {
	// Pools are the (deployment, model) pools. At least one; names unique.
	Pools []PoolConfig
	// Routes maps a model as callers name it (aliases included) to the
	// names of its pools in failover order: a call goes to the first whose
	// estimate meets its deadline. Routes[AnyModel] is the route of the
	// models not named. Every pool must be on a route; every name listed
	// must be a pool.
	Routes map[string][]string
	// Ladder maps a model to the cheaper model a call may be degraded to
	// when none of its pools can serve it in time (see DegradeClasses and
	// Request.AllowDegrade). Every model named must be routed; the ladder
	// must not loop.
	Ladder map[string]string
	// DegradeClasses are the classes whose calls may be degraded under
	// load without asking; a call of another class may be with
	// Request.AllowDegrade.
	DegradeClasses []string
	// ProbeInterval is how long a pool found down (its deployment
	// unreachable, or failing every call) is left alone before one call is
	// sent to it as a probe; the interval doubles on every failed probe up
	// to MaxProbeInterval. Zero means 1s.
	ProbeInterval time.Duration
	// MaxProbeInterval bounds the probe's interval. Zero means 30s.
	MaxProbeInterval time.Duration
}

// PoolConfig is one (deployment, model) pool.
type PoolConfig struct {
	// Name identifies the pool in metrics, logs and Routes:
	// "deployment/model" by convention. Required, unique.
	Name string
	// Deployment names the deployment (X-Sluice-Upstream); Model is the
	// model's name there, which the call is sent with, or AnyModel: every
	// model, sent as it is asked for. Required.
	Deployment, Model string
	// Flavour is the API the deployment speaks ("openai", "anthropic"). A
	// call that names its flavour (Request.Flavour) is routed only to
	// pools of that flavour; empty matches every call.
	Flavour string
	// Admission configures the pool's gate.
	Admission admission.Config
	// RPM and TPM are the deployment's requests and tokens per minute for
	// this model. Zero means none configured: a bucket is then learned
	// from the provider's rate-limit headers when it sends them and Learn
	// says so (see Permit.ObserveLimits). Negative is an error.
	RPM, TPM int64
	// Learn lets the pool learn the limits it has none of from the
	// provider's rate-limit headers. False leaves a pool without a
	// configured limit unpaced (the one pool of a chain without routing,
	// which has none to configure).
	Learn bool
}

// A chain without routing has one pool, named DefaultPool after its
// deployment, whose gate is Config.Admission and which serves every model:
// a PoolConfig whose Model is AnyModel takes a call under the model it
// asks for, and Routes[AnyModel] is the route of every model not routed by
// name. So one upstream is one pool, as each of several is, and the chain
// has one shape.
const (
	DefaultPool = "default"
	AnyModel    = "*"
)

// routing is the routing of a chain of cfg: cfg.Routing, or one pool for
// every model, of gate cfg.Admission.
//
// The tenants' shares (TenantConfig.Share) are every pool's: each pool's
// gate gets them, a queue share taken of that gate's own waiting room.
func (cfg Config) routing() *RoutingConfig {
	rt := cfg.Routing
	if rt == nil {
		rt = &RoutingConfig{
			Pools:  []PoolConfig{{Name: DefaultPool, Deployment: DefaultPool, Model: AnyModel, Admission: cfg.Admission}},
			Routes: map[string][]string{AnyModel: {DefaultPool}},
		}
	}
	if !slices.ContainsFunc(cfg.Tenants, func(t TenantConfig) bool { return !t.Share.IsZero() }) {
		return rt
	}
	shared := *rt
	shared.Pools = slices.Clone(rt.Pools)
	for i := range shared.Pools {
		a := &shared.Pools[i].Admission
		tenants := make(map[string]admission.TenantShare, len(a.Tenants)+len(cfg.Tenants))
		maps.Copy(tenants, a.Tenants)
		for _, t := range cfg.Tenants {
			if !t.Share.IsZero() {
				tenants[t.Name] = t.Share
			}
		}
		a.Tenants = tenants
	}
	return &shared
}

// DefaultProbeInterval and DefaultMaxProbeInterval are the probe's
// intervals when RoutingConfig leaves them zero.
const (
	DefaultProbeInterval    = time.Second
	DefaultMaxProbeInterval = 30 * time.Second
)

// UnknownModelError is a call whose model no pool serves (for its API
// flavour, when it names one). The gateway answers it 404.
type UnknownModelError struct {
	Model   string
	Flavour string // the API asked, when the model is served only by others
}

func (e *UnknownModelError) Error() string {
	switch {
	case e.Model == "":
		return fmt.Sprintf("no upstream serves the %s API", e.Flavour)
	case e.Flavour != "":
		return fmt.Sprintf("model %q is not served on the %s API by any upstream", e.Model, e.Flavour)
	}
	return fmt.Sprintf("model %q is not served by any upstream", e.Model)
}

// Degradation causes (Request.DegradedBy).
const (
	DegradedBySpend = "spend"
	DegradedByLoad  = "load"
)
