package dashboard

import (
	"cmp"

	"github.com/sluicehq/sluice/spend"
)

// Sample is one second of the gateway, as the dashboard draws it. Counts
// of the interval ("refused_*") are what happened since the previous
// sample, about one second earlier.
type Sample struct {
	Time        int64   `json:"t"`        // Unix milliseconds
	Goodput     float64 `json:"goodput"`  // answers delivered per second
	Capacity    float64 `json:"capacity"` // concurrency ÷ mean service time, per second; 0 before any service time is known
	InFlight    int     `json:"in_flight"`
	Concurrency int     `json:"concurrency"`
	Queued      int     `json:"queued"`
	Depth       []int   `json:"depth"`   // by rank
	WaitMs      []int64 `json:"wait_ms"` // estimated wait by rank
	// Served and Refused are totals since start: the gate's successful
	// completions and its refusals, as /admin/v1/state counts them.
	Served  uint64 `json:"served"`
	Refused uint64 `json:"refused"`
	// RefusedReason and RefusedClass count the refusals of the interval
	// (every refusal the gateway answered, spend's included).
	RefusedReason map[string]float64 `json:"refused_reason"`
	RefusedClass  map[string]float64 `json:"refused_class"`
	// ShedClass counts, by class, the interval's refusals for want of
	// capacity (queue_wait, queue_full, evicted, expired): not those of
	// spend, the retry budget or draining, which have other causes.
	ShedClass map[string]float64 `json:"shed_class"`
	// WouldRefuseReason counts, by reason, the interval's calls observe
	// mode let through that enforce mode would have refused; absent when
	// there were none.
	WouldRefuseReason map[string]float64 `json:"would_refuse_reason,omitempty"`
	// ServiceMs is each model's service time: p50 and p95.
	ServiceMs   map[string][2]int64 `json:"service_ms"`
	RetryBudget *float64            `json:"retry_budget,omitempty"` // absent with retries disabled
	Spend       *Spend              `json:"spend,omitempty"`        // absent without a spend section
	Draining    bool                `json:"draining,omitempty"`
	Status      Status              `json:"status"`

	// Cluster is the cluster's concurrency, of which Concurrency is this
	// replica's lease, with replicas leasing on Redis; 0 otherwise.
	Cluster int `json:"cluster,omitempty"`
	// Learned says Concurrency is learnt from the provider's answers
	// (no concurrency configured), not configured.
	Learned bool `json:"learned,omitempty"`
	// Pools are the (deployment, model) pools with upstreams: (absent
	// with one upstream), each with its gate and buckets.
	Pools []Pool `json:"pools,omitempty"`
	// Store is Redis's state with store.redis, as /admin/v1/state's
	// store has it; absent without Redis.
	Store *Store `json:"store,omitempty"`
}

// Store is Redis in a Sample: its state as the circuit breaker on every
// call sees it — "up", "down" (calls refused until the next probe) or
// "probing" — and since when.
type Store struct {
	State string `json:"state"`
	Since int64  `json:"since"` // Unix milliseconds
}

// Pool is one pool in a Sample.
type Pool struct {
	Name        string   `json:"name"`
	InFlight    int      `json:"in_flight"`
	Concurrency int      `json:"concurrency"`
	Queued      int      `json:"queued"`
	Tokens      *float64 `json:"tokens,omitempty"` // left in its tokens-per-minute bucket, when it has one
	Down        bool     `json:"down,omitempty"`
}

// Spend is the spend part of a sample.
type Spend struct {
	RatePerHour  float64            `json:"rate_per_hour"`
	Stage        string             `json:"stage"`
	Alerting     bool               `json:"alerting"`
	Tenants      map[string]float64 `json:"tenants"` // rate per hour
	TenantsAlert []string           `json:"tenants_alerting,omitempty"`
	WastedUSD    float64            `json:"wasted_usd"`      // total since start
	WastedPerH   float64            `json:"wasted_per_hour"` // the interval's, per hour
}

// Status is the line at the top of the dashboard: Level is "ok", "warn"
// or "crit"; Text is the worst finding in plain words, Details the others.
type Status struct {
	Level   string   `json:"level"`
	Text    string   `json:"text"`
	Details []string `json:"details,omitempty"`
}

// Meta is what does not change while the gateway runs: the classes' ranks
// and default deadlines, and the spend ceiling's stages.
type Meta struct {
	EverySeconds float64          `json:"every_seconds"`
	Classes      map[string]Class `json:"classes"`
	Spend        *SpendMeta       `json:"spend,omitempty"`
}

// Class is one class in Meta: its rank and default deadline (the same
// fields as the classes of /admin/v1/state).
type Class struct {
	Rank             int   `json:"rank"`
	DefaultTimeoutMs int64 `json:"default_timeout_ms"`
}

// SpendMeta places the spend rate against its limits, in USD per hour
// (zero: none).
type SpendMeta struct {
	CeilingPerHour float64 `json:"ceiling_per_hour,omitempty"`
	AlertPerHour   float64 `json:"alert_per_hour,omitempty"`
	ShedAt         float64 `json:"shed_speculative_at,omitempty"`
	DegradeAt      float64 `json:"degrade_at,omitempty"`
	RejectAt       float64 `json:"reject_at,omitempty"`
}

// History is the first message of /admin/v1/events and the body of
// /admin/v1/history: the meta and the samples of the last 15 minutes,
// oldest first.
type History struct {
	Meta    Meta     `json:"meta"`
	Samples []Sample `json:"samples"`
}

// spendMeta is the spend part of the meta: the ceiling and its stages'
// thresholds. Nil without a spend section.
func spendMeta(sc *spend.Config) *SpendMeta {
	if sc == nil {
		return nil
	}
	m := &SpendMeta{
		CeilingPerHour: sc.CeilingPerHour,
		AlertPerHour:   sc.AlertPerHour,
	}
	if sc.CeilingPerHour > 0 {
		m.ShedAt = sc.CeilingPerHour * cmp.Or(sc.Stages.ShedSpeculativeAt, spend.DefaultShedSpeculativeAt)
		m.DegradeAt = sc.CeilingPerHour * cmp.Or(sc.Stages.DegradeAt, spend.DefaultDegradeAt)
		m.RejectAt = sc.CeilingPerHour * cmp.Or(sc.Stages.RejectAt, spend.DefaultRejectAt)
	}
	return m
}
