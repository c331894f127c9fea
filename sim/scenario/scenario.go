// One file, over 600 lines, on purpose: it is the scenario file's schema —
// each type with its keys' documentation — and its validation, which
// checks keys against each other across the types (a source's class among
// the classes, a step's model among the models, the policies against the
// sections they need); kept together so that a key, its doc and its check
// are read in one place.

package scenario

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/internal/yamlpath"
	"github.com/sluicehq/sluice/retrybudget"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/workload"
)

// Scenario is one workload: the upstream, the callers and the policies to
// compare. It is usually read from a YAML file with [Load]; the YAML
// keys are the snake_case names given on each field. Every field documents
// its zero value; [Scenario.Validate] names the first bad field by its YAML
// path.
type Scenario struct {
	// Name identifies the scenario in tables and file names (name). Empty
	// means the file's base name, or "scenario" when built in code.
	Name string `yaml:"name"`
	// Description is a sentence or two for results.md (description).
	// Empty means none.
	Description string `yaml:"description"`
	// Seed selects the random draws (seed). Zero is a seed like any other.
	Seed uint64 `yaml:"seed"`
	// Requests is the expected number of logical requests (first attempts)
	// per run, over every traffic source (requests). The arrival window is
	// sized so that this many arrive on average; the actual count is
	// Poisson. Zero means DefaultRequests.
	Requests int `yaml:"requests"`
	// Loads are the load factors the scenario is tabled at: the offered
	// rate of first attempts of the swept traffic as a multiple of the
	// upstream's capacity (loads). Empty means DefaultLoads.
	Loads []float64 `yaml:"loads"`
	// Policies are the policies compared, by name (policies). Empty means
	// [Scenario.PolicyNames].
	Policies []string `yaml:"policies"`

	Upstream Upstream `yaml:"upstream"`
	// Classes are the priority classes and their deadlines (classes). At
	// least one.
	Classes []Class `yaml:"classes"`
	// Traffic are the sources of logical requests (traffic). At least one
	// must be swept (have no fixed Load).
	Traffic []Source `yaml:"traffic"`

	Baselines Baselines    `yaml:"baselines"`
	Sluice    SluiceConfig `yaml:"sluice"`
	// Spend is the spend limiter's configuration (spend): the gateway's
	// `spend:` section, decoded into the very spend.Config the gateway
	// uses — prices per model, ladder, ceiling_per_hour, tenants' budgets,
	// stages, rate_window, alert thresholds. With it, every call of every
	// policy is priced from spend.prices by its source's tokens, and the
	// policy "spend" (full sluice with the spend limiter) is run. Nil means
	// no spend limiter, and calls priced by cost_per_call.
	Spend *spend.Config `yaml:"spend"`
	// Timeseries, when set, asks for time-series plots of this scenario
	// (timeseries). Nil means none.
	Timeseries *Timeseries `yaml:"timeseries"`
	// Replicas, when set, runs every sluice policy as several gateway
	// replicas sharing the upstream's concurrency by leases (replicas).
	// Nil means one gateway.
	Replicas *Replicas `yaml:"replicas"`
	// TraceFile is a trace of recorded traffic to replay (trace_file), in
	// the CSV form of workload.ReadCSV, relative to the scenario file: Load
	// reads it into Trace. Empty means none.
	TraceFile string `yaml:"trace_file"`
	// Trace, when set, replaces the sources' Poisson arrivals: each call
	// of the trace arrives as the traffic source named after its service
	// (a trace whose calls name none has one source), with its own prompt
	// and answer tokens, and its own max_tokens and deadline when the
	// trace has them. A load factor plays the trace at the speed that
	// offers that load: the calls' mean service time times their rate over
	// the concurrency. Nil means Poisson sources.
	Trace *workload.Trace `yaml:"-"`
}

// Replicas is a fleet of gateways in front of one upstream (replicas):
// each sluice policy runs Count chains, one per replica, whose
// concurrency is set every LeaseInterval by the lease table the gateway
// uses with Redis (lease.Table: the cluster's concurrency divided by
// demand, ranks first). Traffic is spread round-robin, except the sources
// pinned to a replica (traffic[].replica): that is how demand is skewed
// between replicas. The baselines run as one queue, as before.
type Replicas struct {
	// Count is how many replicas (count): 2 to 64. Required.
	Count int `yaml:"count"`
	// LeaseInterval is how often each replica renews its lease
	// (lease_interval); the replicas' renewals are spread evenly over it.
	// Zero means 200ms, the gateway's default; 10ms to 10s.
	LeaseInterval time.Duration `yaml:"lease_interval"`
}

// DefaultRequests is Scenario.Requests when zero.
const DefaultRequests = 100_000

// DefaultLoads are the load factors every scenario is run at: 0.8×, 1×,
// 2×, 5×, 10×.
var DefaultLoads = []float64{0.8, 1, 2, 5, 10}

// Upstream is the dependency: finite concurrency, a service-time
// distribution that can step mid-run, and a price per call (upstream).
type Upstream struct {
	// Concurrency is how many calls the upstream serves at once
	// (concurrency). Required, at least 1. Every policy is given exactly
	// this many slots.
	Concurrency int `yaml:"concurrency"`
	// Service is the service-time distribution (service). Required.
	Service Service `yaml:"service"`
	// Steps change the service time mid-run (steps): from At on, every
	// call that starts is Factor times slower — every call, or only the
	// calls to Step.Model when it names one. Later steps replace earlier
	// ones of the same reach; a model's own steps multiply the upstream's.
	// Empty means none.
	Steps []Step `yaml:"steps"`
	// CostPerCall is the price of one billed call, in dollars
	// (cost_per_call). Zero means calls are counted but not priced. It
	// must be zero when the scenario has a spend section: calls are then
	// priced from spend.prices.
	CostPerCall float64 `yaml:"cost_per_call"`
	// Models are the upstream's models by name, as sources name them
	// (models): what differs between them is the service time. A call to a
	// model takes ServiceFactor times the service time drawn for it, so a
	// request degraded to a cheaper model by the spend limiter also takes
	// that model's time. Empty means every model takes the upstream's
	// service time; when set, every model a source names must be listed.
	Models map[string]Model `yaml:"models"`
}

// Model is one model of the upstream. Its price is not here: prices are
// the spend section's (spend.prices), as in the gateway.
type Model struct {
	// ServiceFactor multiplies the service time of a call to this model
	// (service_factor), e.g. 0.5 for a model twice as fast. Required,
	// positive.
	ServiceFactor float64 `yaml:"service_factor"`
	// Concurrency is how many calls to this model the upstream serves at
	// once (concurrency), in slots of the model's own: a call sent when
	// they are all busy waits at the provider, first come first served,
	// and its wait counts in the service time the gateway sees. Zero
	// means the model shares the upstream's concurrency, as without
	// models (the policies' slots are then the only limit). The policy
	// pools gives every model a pool of this many slots, so it needs it
	// on every model.
	Concurrency int `yaml:"concurrency"`
	// RPM and TPM are the provider's requests and tokens per minute for
	// this model (rpm, tpm), which the policy pools paces its calls on
	// (chain.PoolConfig.RPM and TPM): a call is charged its
	// input_tokens plus max_tokens. The simulated provider does not
	// enforce them itself. Zero means none.
	RPM int64 `yaml:"rpm"`
	TPM int64 `yaml:"tpm"`
}

// Service is a service-time distribution: exactly one of Lognormal,
// Empirical and Tokens is set.
type Service struct {
	// Lognormal is Median × exp(Sigma × N(0,1)) (lognormal).
	Lognormal *Lognormal `yaml:"lognormal"`
	// Empirical are observed service times, drawn uniformly (empirical).
	Empirical []time.Duration `yaml:"empirical"`
	// Tokens is a decode-bound provider's time, which follows each call's
	// tokens (tokens): (base + prompt × per_prompt_token + output ×
	// per_output_token) × exp(sigma × N(0,1)) — workload.ServiceModel.
	// A call's tokens are its trace's, or its source's input_tokens and
	// output_tokens.
	Tokens *Tokens `yaml:"tokens"`
}

// Tokens is workload.ServiceModel as a scenario writes it.
type Tokens struct {
	Base           time.Duration `yaml:"base"`
	PerPromptToken time.Duration `yaml:"per_prompt_token"`
	PerOutputToken time.Duration `yaml:"per_output_token"`
	Sigma          float64       `yaml:"sigma"`
}

// Model is the service model the tokens describe.
func (t *Tokens) Model() workload.ServiceModel {
	return workload.ServiceModel{Base: t.Base, PerPromptToken: t.PerPromptToken, PerOutputToken: t.PerOutputToken, Sigma: t.Sigma}
}

// Lognormal is a lognormal service time, the usual shape of LLM latencies:
// a median and a long right tail.
type Lognormal struct {
	// Median is the median service time (median). Required, positive.
	Median time.Duration `yaml:"median"`
	// Sigma is the standard deviation of the log (sigma), in [0, 3]. Zero
	// means every call takes exactly Median.
	Sigma float64 `yaml:"sigma"`
}

// Mean returns the mean of the distribution; with Tokens, of a call
// with no tokens (the mean of a trace's or the sources' calls is the
// simulator's to work out).
func (s Service) Mean() time.Duration {
	if s.Tokens != nil {
		return s.Tokens.Model().Mean(0, 0)
	}
	if s.Lognormal != nil {
		return time.Duration(float64(s.Lognormal.Median) * math.Exp(s.Lognormal.Sigma*s.Lognormal.Sigma/2))
	}
	var sum float64
	for _, d := range s.Empirical {
		sum += float64(d)
	}
	if len(s.Empirical) == 0 {
		return 0
	}
	return time.Duration(sum / float64(len(s.Empirical)))
}

// Step is a change at a point of the run: a service-time factor for the
// upstream, or a rate factor for a traffic source.
type Step struct {
	// At is when the step happens (at): a duration from the start ("90s")
	// or a share of the arrival window ("50%"). Required.
	At TimePoint `yaml:"at"`
	// Factor multiplies the base value from At on (factor). Required,
	// positive for service times, non-negative for rates.
	Factor float64 `yaml:"factor"`
	// Model, in an upstream step only, limits the step to the calls to
	// one model of upstream.models (model). Empty means every call.
	Model string `yaml:"model"`
}

// Burst multiplies a source's arrival rate for a while.
type Burst struct {
	// At is when the burst starts (at). Required.
	At TimePoint `yaml:"at"`
	// For is how long it lasts (for), as a duration or a share of the
	// window. Required, positive.
	For TimePoint `yaml:"for"`
	// Factor multiplies the rate during the burst (factor). Required,
	// non-negative.
	Factor float64 `yaml:"factor"`
}

// TimePoint is a point (or span) of a run, written either as a Go duration
// ("90s") or as a percentage of the arrival window ("50%"), so that a
// scenario keeps its shape whatever --requests makes the window.
type TimePoint struct {
	D        time.Duration // when Fraction is false
	F        float64       // share of the window, when Fraction is true
	Fraction bool
}

// Resolve returns the point for an arrival window of length window.
func (p TimePoint) Resolve(window time.Duration) time.Duration {
	if p.Fraction {
		return time.Duration(p.F * float64(window))
	}
	return p.D
}

func (p TimePoint) String() string {
	if p.Fraction {
		return fmt.Sprintf("%g%%", p.F*100)
	}
	return p.D.String()
}

// UnmarshalYAML reads a time point written as ParseTimePoint reads it.
func (p *TimePoint) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a single value (line %d)", n.Line)
	}
	tp, err := ParseTimePoint(n.Value)
	if err != nil {
		return fmt.Errorf("%v (line %d)", err, n.Line)
	}
	*p = tp
	return nil
}

// ParseTimePoint parses "90s" or "50%".
func ParseTimePoint(s string) (TimePoint, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return TimePoint{}, fmt.Errorf("%q is not a percentage", s)
		}
		if f < 0 || f > 100 {
			return TimePoint{}, fmt.Errorf("%q: want 0%% to 100%%", s)
		}
		return TimePoint{F: f / 100, Fraction: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return TimePoint{}, fmt.Errorf("%q is neither a duration (90s) nor a percentage (50%%)", s)
	}
	if d < 0 {
		return TimePoint{}, fmt.Errorf("%q must not be negative", s)
	}
	return TimePoint{D: d}, nil
}

// Class is a priority class: a name, a deadline, and for sluice a rank.
type Class struct {
	// Name is the class name (name), sent as X-Sluice-Priority. Required.
	Name string `yaml:"name"`
	// Deadline is how long its callers wait, from arrival (deadline).
	// Required, positive.
	Deadline time.Duration `yaml:"deadline"`
	// Rank is the class's rank in the shed order for the sluice policies
	// with priority shedding (rank, 0–15; higher is shed last). Nil means
	// the rank of admission.DefaultRanks for interactive, batch and
	// speculative; any other class must set it.
	Rank *int `yaml:"rank"`
}

// Source is one stream of logical requests: a Poisson process of one class
// from one tenant, sent by one kind of client.
type Source struct {
	// Name labels the source (name). Empty means "<class>" or
	// "<tenant>/<class>" when Tenant is set.
	Name string `yaml:"name"`
	// Class names one of Scenario.Classes (class). Required.
	Class string `yaml:"class"`
	// Tenant is who the requests are for (tenant). Empty is the anonymous
	// tenant.
	Tenant string `yaml:"tenant"`
	// Tier is the tenant's tier: low, standard or high (tier). Empty means
	// standard.
	Tier string `yaml:"tier"`
	// Share is this source's part of the swept load (share): the swept
	// sources' shares are normalised, so 3 and 1 split it 75/25. Ignored
	// when Load is set; otherwise zero means 1.
	Share float64 `yaml:"share"`
	// Load, when positive, fixes this source's rate at Load × capacity
	// whatever the load being swept (load). Zero means the source is swept.
	Load float64 `yaml:"load"`
	// Client is how callers retry (client): naive, polite or client, as in
	// package loadgen and package client. Empty means naive.
	Client string `yaml:"client"`
	// MaxAttempts bounds attempts per logical request, the first included
	// (max_attempts). Zero means 3.
	MaxAttempts int `yaml:"max_attempts"`
	// AttemptTimeout is the naive client's fixed per-attempt timeout
	// (attempt_timeout). Zero means half the deadline, as loadgen does;
	// polite and client callers give each attempt the time left.
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	// Deadline is how long the source's callers wait, from arrival
	// (deadline): two services of one class may wait differently. Zero
	// means the class's.
	Deadline time.Duration `yaml:"deadline"`
	// Steps change the rate mid-run (steps); Bursts multiply it for a while
	// (bursts). Empty means a constant rate.
	Steps  []Step  `yaml:"steps"`
	Bursts []Burst `yaml:"bursts"`
	// CostPerCall overrides Upstream.CostPerCall for this source's calls
	// (cost_per_call). Zero means the upstream's price. It must be zero
	// when the scenario has a spend section.
	CostPerCall float64 `yaml:"cost_per_call"`
	// Model is the model the source's requests ask for (model), as the
	// gateway reads it from the body: it selects the admission core's
	// service-time statistics (Request.Key), the service time
	// (Upstream.Models) and, with a spend section, the price. Empty means
	// none: with a spend section it must then be billed by
	// spend.unknown_model: default.
	Model string `yaml:"model"`
	// InputTokens and OutputTokens are the usage every call of the source
	// reports (input_tokens, output_tokens), priced from spend.prices;
	// MaxTokens is the max_tokens the request sends (max_tokens), which
	// the spend limiter reserves for. Zero input means a prompt of unknown
	// size, zero max_tokens none sent (the limiter then reserves the
	// model's observed mean output). OutputTokens must not exceed a
	// non-zero MaxTokens. Ignored without a spend section, except by the
	// policy pools, which charges them against a model's tpm.
	InputTokens  int64 `yaml:"input_tokens"`
	OutputTokens int64 `yaml:"output_tokens"`
	MaxTokens    int64 `yaml:"max_tokens"`
	// Headers says whether the callers declare their retries (headers):
	// "attempt" sends the attempt number, as X-Sluice-Attempt or the
	// official SDKs' X-Stainless-Retry-Count do; "none" sends nothing, as
	// a shell loop or a homemade client does, and only the chain's
	// recognise stage can tell a retry by its copy of the request. Empty
	// means attempt.
	Headers string `yaml:"headers"`
	// SamePrompt makes every request of the source the same request
	// (same_prompt): one prompt sampled again and again, where otherwise
	// each logical request asks something of its own. Its attempts are
	// copies of it either way.
	SamePrompt bool `yaml:"same_prompt"`
	// Replica pins the source's traffic to one replica, numbered from 0
	// (replica), with a replicas section. Nil means round-robin over them.
	Replica *int `yaml:"replica"`
}

// Baselines parameterise the comparison queues that are not sluice.
type Baselines struct {
	// DepthThreshold is the queue depth at which the depth-threshold
	// baseline refuses (depth_threshold). Zero means 500, a
	// threshold such queues are commonly given.
	DepthThreshold int `yaml:"depth_threshold"`
	// QueueTimeout is the queue-timeout baseline's fixed maximum queue time
	// (queue_timeout). Zero means 30s.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// SmallQueue is the small bounded queue's size (small_queue). Zero
	// means the upstream's concurrency.
	SmallQueue int `yaml:"small_queue"`
}

// SluiceConfig configures the sluice policies (sluice).
type SluiceConfig struct {
	// MaxQueue is admission.Config.MaxQueue (max_queue). Zero means
	// 8 × the upstream's concurrency.
	MaxQueue int `yaml:"max_queue"`
	// MaxQueuePerTenant is admission.Config.MaxQueuePerTenant
	// (max_queue_per_tenant). Zero means no fixed cap.
	MaxQueuePerTenant int `yaml:"max_queue_per_tenant"`
	// Tenants gives tenants their part of the gate's fair shares
	// (tenants, a mapping of tenant names): weight, max_concurrency and
	// queue_share, as in the gateway's tenants. A tenant not listed has
	// weight 1, no cap and MaxQueuePerTenant.
	Tenants map[string]admission.TenantShare `yaml:"tenants"`
	// InitialServiceTime is admission.Config.InitialServiceTime
	// (initial_service_time). Zero means the upstream's mean service time:
	// an operator's starting guess.
	InitialServiceTime time.Duration `yaml:"initial_service_time"`
	// RetryBudget configures the gateway's retry budgets, one per tenant and
	// one global, as in the gateway (retry_budget). Zero fields take
	// package retrybudget's defaults.
	RetryBudget retrybudget.Config `yaml:"retry_budget"`
	// Recognise configures the recognition of retries sent without a
	// header, as the gateway's retries.recognise (recognise), in the
	// policies with retry budgets. Zero fields take the defaults.
	Recognise chain.RecogniseConfig `yaml:"recognise"`
	// Degrade lets the route stage of the policy pools send a call one
	// rung down a ladder when its model's pool cannot serve it in time
	// (degrade), as the gateway's degrade under load. Nil means never.
	// Both its ladder (models of upstream.models) and its classes are
	// required.
	Degrade *chain.DegradeConfig `yaml:"degrade"`
	// Learn runs the policy learned (learn): full sluice whose gate is
	// not told the upstream's concurrency but learns it from the
	// latencies it sees, within these bounds, as the gateway does
	// without admission.concurrency (package adaptive). The upstream then
	// has upstream.concurrency slots of its own, first come first
	// served, as a model with a concurrency does: a call sent when they
	// are all busy waits at the provider, its wait part of the latency.
	// Max zero means adaptive.DefaultMax. Nil means the policy is not
	// run.
	Learn *adaptive.Config `yaml:"learn"`
}

// Timeseries asks for time-series plots: queue depth, estimated wait and
// latency over time, for one load and a few policies.
type Timeseries struct {
	// Load is the load factor plotted (load). Zero means 1.
	Load float64 `yaml:"load"`
	// Policies are plotted (policies). Empty means fifo, depth-threshold,
	// queue-timeout and sluice.
	Policies []string `yaml:"policies"`
	// Bucket is the width of a time bucket (bucket). Zero means 1s.
	Bucket time.Duration `yaml:"bucket"`
}

// Steady returns a copy of the scenario in which every traffic source keeps
// the rate it has at the start: its steps after time zero and its bursts
// are gone. It is the scenario's normal day, against which the success of
// the sources a runaway shares the upstream with is judged.
func (s *Scenario) Steady() *Scenario {
	c := *s
	c.Traffic = slices.Clone(s.Traffic)
	for i := range c.Traffic {
		src := &c.Traffic[i]
		src.Steps = slices.DeleteFunc(slices.Clone(src.Steps), func(st Step) bool { return !st.At.isStart() })
		src.Bursts = nil
	}
	return &c
}

// Changes reports whether the source's rate changes after the start: a
// step after time zero, or a burst.
func (src *Source) Changes() bool {
	return len(src.Bursts) > 0 || slices.ContainsFunc(src.Steps, func(st Step) bool { return !st.At.isStart() })
}

func (p TimePoint) isStart() bool {
	if p.Fraction {
		return p.F == 0
	}
	return p.D == 0
}

// FieldError is an invalid scenario field, named by its YAML path
// ("traffic[1].share"): every configuration of sluice names its fields the
// same way (package yamlpath).
type FieldError = yamlpath.FieldError

var ferr = yamlpath.Errorf

// Limits that keep every product of the scenario's numbers inside a
// time.Duration and a run inside memory; they are not opinions on realism.
// The exported ones bound the simulator's own options too.
const (
	// MaxRequests bounds requests, and a run's requests however given.
	MaxRequests = 50_000_000
	// MaxLoad bounds every load factor.
	MaxLoad = 1000.0
	// MaxDuration bounds every duration of a scenario, and a run's
	// arrival window.
	MaxDuration = 24 * time.Hour

	maxConcurrency = 1 << 16
	maxSigma       = 3.0
	maxFactor      = 1000.0
	maxAttempts    = 20
	maxTokens      = 10_000_000
	maxLimit       = 1 << 40 // requests or tokens per minute
)

// Validate reports the first invalid field as a *FieldError, or as the
// spend package's error for a bad spend section (which names its field as
// spend.<path>). It does not modify s.
func (s *Scenario) Validate() error {
	if s.Requests < 0 || s.Requests > MaxRequests {
		return ferr("requests", "want 0 (for %d) to %d, got %d", DefaultRequests, MaxRequests, s.Requests)
	}
	for i, l := range s.Loads {
		if !(l > 0) || l > MaxLoad || math.IsInf(l, 0) {
			return ferr(fmt.Sprintf("loads[%d]", i), "want a load factor in (0, %g], got %v", MaxLoad, l)
		}
	}
	for i, p := range s.Policies {
		if err := s.checkPolicy(fmt.Sprintf("policies[%d]", i), p); err != nil {
			return err
		}
	}
	if err := s.Upstream.validate(); err != nil {
		return err
	}
	if len(s.Classes) == 0 {
		return ferr("classes", "at least one class is required")
	}
	names := map[string]bool{}
	for i, c := range s.Classes {
		f := fmt.Sprintf("classes[%d]", i)
		if c.Name == "" {
			return ferr(f+".name", "required")
		}
		if names[c.Name] {
			return ferr(f+".name", "duplicate class %q", c.Name)
		}
		names[c.Name] = true
		if c.Deadline <= 0 || c.Deadline > MaxDuration {
			return ferr(f+".deadline", "want a positive duration up to %v, got %v", MaxDuration, c.Deadline)
		}
		if c.Rank != nil {
			if *c.Rank < 0 || *c.Rank >= admission.MaxRanks {
				return ferr(f+".rank", "want 0 to %d, got %d", admission.MaxRanks-1, *c.Rank)
			}
		} else if _, ok := admission.DefaultRanks().Classes[c.Name]; !ok {
			return ferr(f+".rank", "class %q is not built in (interactive, batch, speculative): set its rank", c.Name)
		}
	}
	if len(s.Traffic) == 0 {
		return ferr("traffic", "at least one source is required")
	}
	swept := false
	for i := range s.Traffic {
		if err := s.Traffic[i].validate(fmt.Sprintf("traffic[%d]", i), names, s.Upstream.Models); err != nil {
			return err
		}
		if s.Traffic[i].Load == 0 {
			swept = true
		}
	}
	if !swept {
		return ferr("traffic", "every source has a fixed load: at least one must be swept (no load)")
	}
	if r := s.Replicas; r != nil {
		if r.Count < 2 || r.Count > 64 {
			return ferr("replicas.count", "want 2 to 64, got %d", r.Count)
		}
		if r.LeaseInterval != 0 && (r.LeaseInterval < 10*time.Millisecond || r.LeaseInterval > 10*time.Second) {
			return ferr("replicas.lease_interval", "want 0 (for 200ms) or 10ms to 10s, got %v", r.LeaseInterval)
		}
		if s.Spend != nil {
			return ferr("replicas", "not with a spend section: the simulator shares concurrency between replicas, not books")
		}
	}
	for i, src := range s.Traffic {
		if src.Replica == nil {
			continue
		}
		if s.Replicas == nil {
			return ferr(fmt.Sprintf("traffic[%d].replica", i), "only with a replicas section")
		}
		if *src.Replica < 0 || *src.Replica >= s.Replicas.Count {
			return ferr(fmt.Sprintf("traffic[%d].replica", i), "want 0 to %d (replicas.count − 1), got %d", s.Replicas.Count-1, *src.Replica)
		}
	}
	if err := s.validateTrace(); err != nil {
		return err
	}
	b := s.Baselines
	switch {
	case b.DepthThreshold < 0:
		return ferr("baselines.depth_threshold", "want ≥ 0 (0 for 500), got %d", b.DepthThreshold)
	case b.QueueTimeout < 0 || b.QueueTimeout > MaxDuration:
		return ferr("baselines.queue_timeout", "want 0 (for 30s) to %v, got %v", MaxDuration, b.QueueTimeout)
	case b.SmallQueue < 0:
		return ferr("baselines.small_queue", "want ≥ 0 (0 for the concurrency), got %d", b.SmallQueue)
	}
	sl := s.Sluice
	switch {
	case sl.MaxQueue < 0:
		return ferr("sluice.max_queue", "want ≥ 0 (0 for 8 × concurrency), got %d", sl.MaxQueue)
	case sl.MaxQueuePerTenant < 0:
		return ferr("sluice.max_queue_per_tenant", "want ≥ 0, got %d", sl.MaxQueuePerTenant)
	case sl.InitialServiceTime < 0 || sl.InitialServiceTime > MaxDuration:
		return ferr("sluice.initial_service_time", "want 0 (for the mean service time) to %v, got %v", MaxDuration, sl.InitialServiceTime)
	}
	for _, name := range slices.Sorted(maps.Keys(sl.Tenants)) {
		p := "sluice.tenants." + name
		if !slices.ContainsFunc(s.Traffic, func(src Source) bool { return src.Tenant == name }) {
			return ferr(p, "not a tenant of the traffic (traffic[].tenant)")
		}
		if err := sl.Tenants[name].Validate(); err != nil {
			return yamlpath.At(p, err)
		}
	}
	if err := sl.RetryBudget.Validate(); err != nil {
		return yamlpath.At("sluice.retry_budget", err)
	}
	if err := sl.Recognise.Validate(); err != nil {
		return yamlpath.At("sluice.recognise", err)
	}
	if d := sl.Degrade; d != nil {
		if len(d.Ladder) == 0 {
			return ferr("sluice.degrade.ladder", "required: a mapping of model to cheaper model")
		}
		if len(d.Classes) == 0 {
			return ferr("sluice.degrade.classes", "required: the classes whose calls may be degraded")
		}
		served := func(m string) bool { _, ok := s.Upstream.Models[m]; return ok }
		if err := d.Validate(served, slices.Sorted(maps.Keys(names))); err != nil {
			return yamlpath.At("sluice.degrade", err)
		}
	}
	if l := sl.Learn; l != nil {
		if err := l.Validate(); err != nil {
			return yamlpath.At("sluice.learn", err)
		}
	}
	if ts := s.Timeseries; ts != nil {
		if ts.Load < 0 || ts.Load > MaxLoad || math.IsNaN(ts.Load) {
			return ferr("timeseries.load", "want 0 (for 1) to %g, got %v", MaxLoad, ts.Load)
		}
		if ts.Bucket < 0 || (ts.Bucket > 0 && ts.Bucket < time.Millisecond) || ts.Bucket > time.Hour {
			return ferr("timeseries.bucket", "want 0 (for 1s) or 1ms to 1h, got %v", ts.Bucket)
		}
		for i, p := range ts.Policies {
			if err := s.checkPolicy(fmt.Sprintf("timeseries.policies[%d]", i), p); err != nil {
				return err
			}
		}
	}
	if s.Spend != nil {
		if _, err := s.SpendConfig(); err != nil {
			return err
		}
	}
	return nil
}

// checkPolicy names field when policy is unknown, or needs a spend section
// the scenario does not have.
func (s *Scenario) checkPolicy(field, policy string) error {
	if !slices.Contains(policyNames, policy) {
		return ferr(field, "unknown policy %q (known: %s)", policy, strings.Join(PolicyNames(), ", "))
	}
	if policy == PolicySpend && s.Spend == nil {
		return ferr(field, "policy %q runs the spend limiter: the scenario needs a spend section", policy)
	}
	if policy == PolicyPools && !s.Upstream.HasPools() {
		return ferr(field, "policy %q runs a pool per model: every model of upstream.models needs a concurrency", policy)
	}
	if policy == PolicyPools && s.Replicas != nil {
		return ferr(field, "policy %q is not run with a replicas section", policy)
	}
	if policy == PolicyLearned && s.Sluice.Learn == nil {
		return ferr(field, "policy %q learns the concurrency: the scenario needs a sluice.learn section", policy)
	}
	if policy == PolicyLearned && s.Replicas != nil {
		return ferr(field, "policy %q is not run with a replicas section", policy)
	}
	return nil
}

func (u *Upstream) validate() error {
	if u.Concurrency < 1 || u.Concurrency > maxConcurrency {
		return ferr("upstream.concurrency", "want 1 to %d, got %d", maxConcurrency, u.Concurrency)
	}
	sv := u.Service
	set := 0
	for _, ok := range []bool{sv.Lognormal != nil, len(sv.Empirical) > 0, sv.Tokens != nil} {
		if ok {
			set++
		}
	}
	switch {
	case set == 0:
		return ferr("upstream.service", "set lognormal, empirical or tokens")
	case set > 1:
		return ferr("upstream.service", "set one of lognormal, empirical and tokens")
	case sv.Tokens != nil:
		m := sv.Tokens.Model()
		if err := m.Validate(); err != nil {
			field, msg, _ := strings.Cut(err.Error(), ": ")
			return ferr("upstream.service.tokens."+field, "%s", msg)
		}
		if m.IsZero() {
			return ferr("upstream.service.tokens", "every part is zero: calls would take no time")
		}
	case sv.Lognormal != nil:
		if sv.Lognormal.Median <= 0 || sv.Lognormal.Median > time.Hour {
			return ferr("upstream.service.lognormal.median", "want a positive duration up to 1h, got %v", sv.Lognormal.Median)
		}
		if s := sv.Lognormal.Sigma; !(s >= 0 && s <= maxSigma) {
			return ferr("upstream.service.lognormal.sigma", "want 0 to %g, got %v", maxSigma, s)
		}
	default:
		for i, d := range sv.Empirical {
			if d <= 0 || d > time.Hour {
				return ferr(fmt.Sprintf("upstream.service.empirical[%d]", i), "want a positive duration up to 1h, got %v", d)
			}
		}
	}
	for i, st := range u.Steps {
		f := fmt.Sprintf("upstream.steps[%d]", i)
		if err := validPoint(f+".at", st.At); err != nil {
			return err
		}
		if !(st.Factor > 0 && st.Factor <= maxFactor) {
			return ferr(f+".factor", "want a service-time factor in (0, %g], got %v", maxFactor, st.Factor)
		}
		if _, ok := u.Models[st.Model]; st.Model != "" && !ok {
			return ferr(f+".model", "model %q is not in upstream.models", st.Model)
		}
	}
	if c := u.CostPerCall; !(c >= 0) || math.IsInf(c, 0) {
		return ferr("upstream.cost_per_call", "want a non-negative price, got %v", c)
	}
	for _, name := range slices.Sorted(maps.Keys(u.Models)) {
		if name == "" {
			return ferr("upstream.models", "a model name is empty")
		}
		m := u.Models[name]
		p := "upstream.models." + name
		if f := m.ServiceFactor; !(f > 0 && f <= maxFactor) {
			return ferr(p+".service_factor", "want a service-time factor in (0, %g], got %v", maxFactor, f)
		}
		if m.Concurrency < 0 || m.Concurrency > maxConcurrency {
			return ferr(p+".concurrency", "want 0 (the upstream's, shared) to %d, got %d", maxConcurrency, m.Concurrency)
		}
		if m.RPM < 0 || m.RPM > maxLimit {
			return ferr(p+".rpm", "want 0 (none) to %d requests per minute, got %d", int64(maxLimit), m.RPM)
		}
		if m.TPM < 0 || m.TPM > maxLimit {
			return ferr(p+".tpm", "want 0 (none) to %d tokens per minute, got %d", int64(maxLimit), m.TPM)
		}
	}
	return nil
}

// HasPools says whether every model of the upstream has a concurrency of
// its own, as the policy pools needs.
func (u *Upstream) HasPools() bool {
	if len(u.Models) == 0 {
		return false
	}
	for _, m := range u.Models {
		if m.Concurrency == 0 {
			return false
		}
	}
	return true
}

func validPoint(field string, p TimePoint) error {
	if !p.Fraction && (p.D < 0 || p.D > MaxDuration) {
		return ferr(field, "want 0 to %v, got %v", MaxDuration, p.D)
	}
	if p.Fraction && !(p.F >= 0 && p.F <= 1) {
		return ferr(field, "want 0%% to 100%%, got %v", p)
	}
	return nil
}

func (src *Source) validate(f string, classes map[string]bool, models map[string]Model) error {
	if src.Class == "" {
		return ferr(f+".class", "required")
	}
	if !classes[src.Class] {
		return ferr(f+".class", "unknown class %q (define it under classes)", src.Class)
	}
	if _, err := admission.ParseTier(src.Tier); err != nil {
		return ferr(f+".tier", "%v", err)
	}
	if !(src.Share >= 0) || src.Share > 1e6 {
		return ferr(f+".share", "want a non-negative weight, got %v", src.Share)
	}
	if !(src.Load >= 0) || src.Load > MaxLoad {
		return ferr(f+".load", "want 0 (swept) to %g, got %v", MaxLoad, src.Load)
	}
	if src.Client != "" && !slices.Contains(ClientNames(), src.Client) {
		return ferr(f+".client", "unknown client %q (known: %s)", src.Client, strings.Join(ClientNames(), ", "))
	}
	if src.MaxAttempts < 0 || src.MaxAttempts > maxAttempts {
		return ferr(f+".max_attempts", "want 0 (for 3) to %d, got %d", maxAttempts, src.MaxAttempts)
	}
	if src.Headers != "" && src.Headers != "attempt" && src.Headers != "none" {
		return ferr(f+".headers", "want attempt or none, got %q", src.Headers)
	}
	if src.AttemptTimeout < 0 || src.AttemptTimeout > MaxDuration {
		return ferr(f+".attempt_timeout", "want 0 (half the deadline) to %v, got %v", MaxDuration, src.AttemptTimeout)
	}
	if src.Deadline < 0 || src.Deadline > MaxDuration {
		return ferr(f+".deadline", "want 0 (the class's) to %v, got %v", MaxDuration, src.Deadline)
	}
	for i, st := range src.Steps {
		g := fmt.Sprintf("%s.steps[%d]", f, i)
		if err := validPoint(g+".at", st.At); err != nil {
			return err
		}
		if !(st.Factor >= 0 && st.Factor <= maxFactor) {
			return ferr(g+".factor", "want a rate factor in [0, %g], got %v", maxFactor, st.Factor)
		}
	}
	for i, b := range src.Bursts {
		g := fmt.Sprintf("%s.bursts[%d]", f, i)
		if err := validPoint(g+".at", b.At); err != nil {
			return err
		}
		if err := validPoint(g+".for", b.For); err != nil {
			return err
		}
		if (b.For.Fraction && b.For.F == 0) || (!b.For.Fraction && b.For.D == 0) {
			return ferr(g+".for", "want a positive span, got %v", b.For)
		}
		if !(b.Factor >= 0 && b.Factor <= maxFactor) {
			return ferr(g+".factor", "want a rate factor in [0, %g], got %v", maxFactor, b.Factor)
		}
	}
	if c := src.CostPerCall; !(c >= 0) || math.IsInf(c, 0) {
		return ferr(f+".cost_per_call", "want a non-negative price, got %v", c)
	}
	if _, ok := models[src.Model]; len(models) > 0 && !ok {
		return ferr(f+".model", "model %q is not in upstream.models", src.Model)
	}
	for _, n := range []struct {
		field string
		v     int64
	}{{"input_tokens", src.InputTokens}, {"output_tokens", src.OutputTokens}, {"max_tokens", src.MaxTokens}} {
		if n.v < 0 || n.v > maxTokens {
			return ferr(f+"."+n.field, "want 0 to %d tokens, got %d", maxTokens, n.v)
		}
	}
	if src.MaxTokens > 0 && src.OutputTokens > src.MaxTokens {
		return ferr(f+".output_tokens", "%d is more than max_tokens (%d): an answer is never longer than the request allows", src.OutputTokens, src.MaxTokens)
	}
	return nil
}

// SourceName is the name a source's results go by: its name, else
// "<class>" or "<tenant>/<class>".
func (src *Source) SourceName() string {
	switch {
	case src.Name != "":
		return src.Name
	case src.Tenant != "":
		return src.Tenant + "/" + src.Class
	}
	return src.Class
}

// validateTrace checks the trace against the sources: each service of
// the trace is a source's name (one source for a trace whose calls name
// none), each source a service of the trace, and nothing the trace's own
// arrivals replace is set.
func (s *Scenario) validateTrace() error {
	if s.Trace == nil {
		if s.TraceFile != "" {
			return ferr("trace_file", "not read: a scenario with a trace file is loaded with scenario.Load")
		}
		return nil
	}
	field := "trace_file"
	if len(s.Trace.Calls) == 0 {
		return ferr(field, "the trace has no calls")
	}
	if s.Spend != nil {
		return ferr(field, "not with a spend section: the simulator prices a source's calls alike, and a trace's differ")
	}
	services := s.Trace.Services()
	unnamed := len(services) == 1 && services[0] == ""
	if unnamed && len(s.Traffic) != 1 {
		return ferr(field, "the trace names no service: want one traffic source, got %d", len(s.Traffic))
	}
	names := map[string]bool{}
	for i := range s.Traffic {
		src := &s.Traffic[i]
		f := fmt.Sprintf("traffic[%d]", i)
		name := src.SourceName()
		names[name] = true
		switch {
		case !unnamed && !slices.Contains(services, name):
			return ferr(f+".name", "%q is not a service of the trace (%s)", name, strings.Join(services, ", "))
		case src.Load != 0:
			return ferr(f+".load", "not with a trace: its calls arrive when the trace says")
		case len(src.Steps) > 0 || len(src.Bursts) > 0:
			return ferr(f+".steps", "not with a trace: its calls arrive when the trace says")
		case src.SamePrompt:
			return ferr(f+".same_prompt", "not with a trace: each of its calls is its own")
		}
	}
	if !unnamed {
		for _, sv := range services {
			if !names[sv] {
				return ferr("traffic", "the trace's service %q has no source: name one after it", sv)
			}
		}
	}
	return nil
}
