package sim

import (
	"slices"

	"github.com/sluicehq/sluice/admission"
)

// Policy is one of the admission policies the simulator compares. The
// baselines (unbounded FIFO, depth threshold, queue timeout, small bounded
// queue) are simple queues written here: they are the comparison, what a
// classic proxy does. Every other policy is the real admission.Core,
// configured to switch features on one at a time, ending with full sluice;
// the retry budget is the real retrybudget.Budget, and the spend limiter of
// the last rung (run only for scenarios with a spend section) the real
// spend.Limiter.
type Policy struct {
	// Name is the stable identifier used in scenario files and on the
	// command line.
	Name string
	// Label is the human name used in tables and plots.
	Label string
	// Sluice reports whether the policy is the real admission code.
	Sluice bool

	queue    queueKind // baselines
	gate     gateOptions
	dontPlot bool
}

type queueKind uint8

const (
	queueUnbounded queueKind = iota + 1
	queueDepth
	queueTimeout
	queueSmall
)

// gateOptions are the features of an admission.Core policy.
type gateOptions struct {
	estimator   admission.WaitEstimator
	expiry      bool // drop at dequeue what can no longer finish in time
	lifo        bool // adaptive LIFO
	early       bool // refusing early: overtaken work told at once, a standing queue kept short
	priority    bool // classes ranked; otherwise every request ranks the same
	retryBudget bool // per-tenant and global retry budgets before the gate
	spend       bool // the spend limiter between the retry budgets and the gate
	pools       bool // the route stage: a pool (a gate) per model
}

// SpendLimiter reports whether the policy runs the spend limiter, and so
// needs a scenario with a spend section.
func (p Policy) SpendLimiter() bool { return p.gate.spend }

// policies is the ladder, in table order: each sluice rung adds one feature
// to the one above it.
var policies = []Policy{
	{Name: "fifo", Label: "unbounded FIFO", queue: queueUnbounded},
	{Name: "depth-threshold", Label: "FIFO, depth threshold", queue: queueDepth},
	{Name: "queue-timeout", Label: "FIFO, queue timeout", queue: queueTimeout},
	{Name: "small-queue", Label: "small bounded queue", queue: queueSmall},
	{Name: "wait-p50", Label: "wait-based, p50", Sluice: true,
		gate: gateOptions{estimator: admission.ByMedian}},
	{Name: "wait-mean", Label: "wait-based, mean", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean}},
	{Name: "expiry", Label: "+ expiry at dequeue", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true}},
	{Name: "lifo", Label: "+ adaptive LIFO", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true}},
	{Name: "early", Label: "+ refusing early", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true}},
	{Name: "priority", Label: "+ priority shedding", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true}},
	{Name: "sluice", Label: "sluice (+ retry budget)", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true}},
	// Full sluice with a spend section, as the gateway runs with one. It
	// needs prices, so only scenarios with a spend section run it.
	{Name: "spend", Label: "+ spend limiter", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true, spend: true}},
	// Full sluice with the route stage: a pool per model of the upstream,
	// each with its own gate of the model's concurrency, paced on its rpm
	// and tpm, degrading under load when sluice.degrade says. It needs a
	// concurrency on every model (upstream.models), so only scenarios with
	// one run it.
	{Name: "pools", Label: "+ pools per model", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true, pools: true}},
}

// PolicyNames lists every policy, in ladder order; a scenario without a
// spend section runs all but the last ([Scenario.PolicyNames]).
func PolicyNames() []string {
	out := make([]string, len(policies))
	for i, p := range policies {
		out[i] = p.Name
	}
	return out
}

// Policies returns every policy, in ladder order.
func Policies() []Policy { return slices.Clone(policies) }

// PolicyNames lists the policies a scenario runs when it names none: every
// policy, but the spend limiter's only with a spend section, and pools only
// with a concurrency on every model and no replicas.
func (s *Scenario) PolicyNames() []string {
	var out []string
	for _, p := range policies {
		if (!p.gate.spend || s.Spend != nil) && (!p.gate.pools || (s.Upstream.HasPools() && s.Replicas == nil)) {
			out = append(out, p.Name)
		}
	}
	return out
}

func policyByName(name string) (Policy, bool) {
	for _, p := range policies {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// clientKind is how a caller retries.
type clientKind uint8

const (
	clientNaive clientKind = iota
	clientPolite
	clientSluice
)

var clientNames = map[string]clientKind{"naive": clientNaive, "polite": clientPolite, "client": clientSluice}

// ClientNames lists the caller behaviours a traffic source can have:
// naive and polite as in package loadgen, client as in package client.
func ClientNames() []string { return []string{"client", "naive", "polite"} }

func clientByName(name string) (clientKind, bool) {
	if name == "" {
		return clientNaive, true
	}
	k, ok := clientNames[name]
	return k, ok
}
