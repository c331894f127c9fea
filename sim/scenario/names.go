package scenario

import "slices"

// The policies a scenario can name (policies, timeseries.policies), in
// the order of the simulator's ladder: package sim runs each, keyed by
// these names (sim.Policies).
const (
	PolicyFIFO           = "fifo"
	PolicyDepthThreshold = "depth-threshold"
	PolicyQueueTimeout   = "queue-timeout"
	PolicySmallQueue     = "small-queue"
	PolicyWaitP50        = "wait-p50"
	PolicyWaitMean       = "wait-mean"
	PolicyExpiry         = "expiry"
	PolicyLIFO           = "lifo"
	PolicyEarly          = "early"
	PolicyPriority       = "priority"
	PolicySluice         = "sluice"
	// PolicySpend runs the spend limiter: only with a spend section.
	PolicySpend = "spend"
	// PolicyPools runs a pool per model: only with a concurrency on every
	// model of upstream.models, and without replicas.
	PolicyPools = "pools"
	// PolicyLearned learns the upstream's concurrency instead of being
	// told it: only with sluice.learn, and without replicas.
	PolicyLearned = "learned"
)

var policyNames = []string{
	PolicyFIFO, PolicyDepthThreshold, PolicyQueueTimeout, PolicySmallQueue,
	PolicyWaitP50, PolicyWaitMean, PolicyExpiry, PolicyLIFO, PolicyEarly,
	PolicyPriority, PolicySluice, PolicySpend, PolicyPools, PolicyLearned,
}

// PolicyNames lists every policy, in ladder order; a scenario runs those
// of [Scenario.PolicyNames] when it names none.
func PolicyNames() []string { return slices.Clone(policyNames) }

// PolicyNames lists the policies a scenario runs when it names none: every
// policy, but the spend limiter's only with a spend section, pools only
// with a concurrency on every model and no replicas, and learned only with
// sluice.learn and no replicas.
func (s *Scenario) PolicyNames() []string {
	var out []string
	for _, p := range policyNames {
		if (p != PolicySpend || s.Spend != nil) && (p != PolicyPools || (s.Upstream.HasPools() && s.Replicas == nil)) &&
			(p != PolicyLearned || (s.Sluice.Learn != nil && s.Replicas == nil)) {
			out = append(out, p)
		}
	}
	return out
}

// The caller behaviours a traffic source can have (traffic[].client):
// naive and polite as in package loadgen, client as in package client.
// Empty means naive.
const (
	ClientNaive  = "naive"
	ClientPolite = "polite"
	ClientSluice = "client"
)

// ClientNames lists the caller behaviours a traffic source can have.
func ClientNames() []string { return []string{ClientSluice, ClientNaive, ClientPolite} }
