package sim

import (
	"slices"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/sim/scenario"
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
	// command line: one of scenario.PolicyNames.
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
	learn       bool // the gate's concurrency learnt (package adaptive), not told
}

// SpendLimiter reports whether the policy runs the spend limiter, and so
// needs a scenario with a spend section.
func (p Policy) SpendLimiter() bool { return p.gate.spend }

// policies is the ladder, in table order: each sluice rung adds one feature
// to the one above it.
var policies = []Policy{
	{Name: scenario.PolicyFIFO, Label: "unbounded FIFO", queue: queueUnbounded},
	{Name: scenario.PolicyDepthThreshold, Label: "FIFO, depth threshold", queue: queueDepth},
	{Name: scenario.PolicyQueueTimeout, Label: "FIFO, queue timeout", queue: queueTimeout},
	{Name: scenario.PolicySmallQueue, Label: "small bounded queue", queue: queueSmall},
	{Name: scenario.PolicyWaitP50, Label: "wait-based, p50", Sluice: true,
		gate: gateOptions{estimator: admission.ByMedian}},
	{Name: scenario.PolicyWaitMean, Label: "wait-based, mean", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean}},
	{Name: scenario.PolicyExpiry, Label: "+ expiry at dequeue", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true}},
	{Name: scenario.PolicyLIFO, Label: "+ adaptive LIFO", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true}},
	{Name: scenario.PolicyEarly, Label: "+ refusing early", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true}},
	{Name: scenario.PolicyPriority, Label: "+ priority shedding", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true}},
	{Name: scenario.PolicySluice, Label: "sluice (+ retry budget)", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true}},
	// Full sluice with a spend section, as the gateway runs with one. It
	// needs prices, so only scenarios with a spend section run it.
	{Name: scenario.PolicySpend, Label: "+ spend limiter", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true, spend: true}},
	// Full sluice with the route stage: a pool per model of the upstream,
	// each with its own gate of the model's concurrency, paced on its rpm
	// and tpm, degrading under load when sluice.degrade says. It needs a
	// concurrency on every model (upstream.models), so only scenarios with
	// one run it.
	{Name: scenario.PolicyPools, Label: "+ pools per model", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true, pools: true}},
	// Full sluice not told the upstream's concurrency: its gate learns it
	// from the latencies it sees (package adaptive), as the gateway does
	// without admission.concurrency. It needs sluice.learn, so only
	// scenarios with one run it.
	{Name: scenario.PolicyLearned, Label: "+ learned concurrency", Sluice: true,
		gate: gateOptions{estimator: admission.ByMean, expiry: true, lifo: true, early: true, priority: true, retryBudget: true, learn: true}},
}

// Policies returns every policy, in ladder order: one per name of
// scenario.PolicyNames, in its order.
func Policies() []Policy { return slices.Clone(policies) }

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

// clientKinds are the caller behaviours by their names in a scenario.
var clientKinds = map[string]clientKind{scenario.ClientNaive: clientNaive, scenario.ClientPolite: clientPolite, scenario.ClientSluice: clientSluice}

func clientByName(name string) (clientKind, bool) {
	if name == "" {
		return clientNaive, true
	}
	k, ok := clientKinds[name]
	return k, ok
}
