package spend

import "time"

// scopeStats is what the Limiter remembers of one tenant or one model
// beyond the ledger's buckets: lifetime counters for metrics and the state
// dump, the observed output size (models), the budget and alert state
// (tenants). Guarded by Limiter.mu.
type scopeStats struct {
	name   string // the label: the name, or OtherLabel
	scope  string // the ledger scope, built once: no allocation per request
	budget *TenantBudget

	actual, estimated   int64 // nano-dollars settled from usage, and at their estimate
	known, unknown      int64 // calls settled from usage, and at their estimate
	wasted, saved       int64 // nano-dollars
	degraded            int64
	refusedCeiling      int64
	refusedBudget       int64
	overShare           int64            // tenants: requests refused past their fair share of the ceiling's first stage
	lastSpend           time.Time        // tenants: when spend was last booked, to find the active ones
	degradedFrom        map[string]int64 // tenants: degraded requests by the model asked for
	outN                int64            // models: outputs observed
	outMean             float64          // models: their mean (a moving mean once outN > outWindow)
	alert               alertState
	alertPerHour        float64 // USD per hour; 0 = no alert
	limitHour, limitDay float64 // USD; 0 = none
}

// outWindow is how many recent outputs the observed mean follows: the
// exact mean of the first outWindow, then an exponential moving mean of the
// same horizon, so that a model whose answers grow longer is re-estimated
// within a few dozen calls.
const outWindow = 32

func (s *scopeStats) observeOutput(n int64) {
	s.outN++
	k := float64(min(s.outN, outWindow))
	s.outMean += (float64(n) - s.outMean) / k
}

// maxExtra bounds how many tenants not in the config, and models not in the
// price table, get counters and ledger scopes of their own; the rest share
// OtherLabel. It keeps metric labels and ledger keys bounded whatever names
// callers send.
const maxExtra = 32

// statsSet is a bounded set of scopeStats by name.
type statsSet struct {
	prefix func(string) string // the ledger scope of a name
	byName map[string]*scopeStats
	list   []*scopeStats // in order of creation
	extra  int
	other  *scopeStats
}

func newStatsSet(prefix func(string) string) statsSet {
	return statsSet{prefix: prefix, byName: make(map[string]*scopeStats)}
}

// add creates the stats of a configured name; configured names do not count
// against maxExtra.
func (s *statsSet) add(name string) *scopeStats {
	if st, ok := s.byName[name]; ok {
		return st
	}
	st := &scopeStats{name: name, scope: s.prefix(name)}
	s.byName[name] = st
	s.list = append(s.list, st)
	return st
}

// get returns the stats of name, creating them while fewer than maxExtra
// unconfigured names have been seen, and the shared OtherLabel stats after.
func (s *statsSet) get(name string) *scopeStats {
	if st, ok := s.byName[name]; ok {
		return st
	}
	if s.extra < maxExtra {
		s.extra++
		return s.add(name)
	}
	if s.other == nil {
		s.other = &scopeStats{name: OtherLabel, scope: s.prefix(OtherLabel)}
		s.list = append(s.list, s.other)
	}
	return s.other
}

// peek returns what get would, without creating anything, for a dry run:
// the stats of name, the shared OtherLabel stats once unconfigured names
// share them, or else the empty stats a new name would start with.
func (s *statsSet) peek(name string) *scopeStats {
	if st, ok := s.byName[name]; ok {
		return st
	}
	if s.extra >= maxExtra && s.other != nil {
		return s.other
	}
	return &scopeStats{name: name, scope: s.prefix(name)}
}
