package loadgen

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/workload"
)

// ChatCompletionsPath is appended to Config.Target for every request.
const ChatCompletionsPath = "/v1/chat/completions"

// Defaults applied by [Run] for zero-valued Config fields.
const (
	DefaultMaxAttempts = 3
	DefaultModel       = "gpt-4o-mini"
	DefaultMaxTokens   = 64
	DefaultMaxInFlight = 1000
	DefaultPrompt      = "Reply with one short sentence about rivers."
)

// Class is one kind of caller in the request mix, or one service of a
// replayed trace (Config.Trace).
type Class struct {
	// Name names the class in reports and, with a Config.Trace, is the
	// service whose calls it sends (workload.Call.Service). It is also sent
	// as X-Sluice-Priority unless Priority says otherwise. It must be a
	// non-empty token of letters, digits, '-' and '_', unique within
	// Config.Classes.
	Name string
	// Priority is the X-Sluice-Priority its calls send: several services of
	// a trace are often one priority (interactive) to the gateway. Empty
	// means Name; otherwise a token like Name.
	Priority string
	// APIKey is its callers' key, sent as "Authorization: Bearer <APIKey>":
	// each service of a production trace (each tenant of a mix) sends its
	// own. Empty means Config.APIKey. It must not contain line breaks.
	APIKey string
	// MaxTokens is the "max_tokens" of its calls' bodies. Zero means
	// Config.MaxTokens; a trace call's own MaxTokens wins over both.
	// Negative is an error.
	MaxTokens int
	// Weight is the class's relative share of arrivals. Weights are
	// normalised, so 7/2/1 and 0.7/0.2/0.1 describe the same mix. Zero means
	// the class is never drawn; negative weights are an error, and at least
	// one weight must be positive. With a Config.Trace weights are ignored
	// (the trace says which service sent each call) and may all be zero.
	Weight float64
	// Deadline is how long a caller of this class waits for an answer,
	// measured from its arrival. Required: zero or negative is an error,
	// because a request without a deadline cannot be late and would make
	// goodput meaningless. With a Config.Trace a call's own Deadline wins,
	// and zero is allowed for a class every one of whose calls has one.
	Deadline time.Duration
	// AttemptTimeout is this class's callers' fixed per-attempt timeout:
	// callers of different classes configure different timeouts. Zero
	// means Config.AttemptTimeout; negative is an error.
	AttemptTimeout time.Duration
}

// HeaderMockOutputTokens is the request header a replayed trace call sends
// with the length of the answer the trace recorded for it, in tokens (at
// least 1), for a mock provider to write an answer that long (`sluice
// mock` does, up to the call's max_tokens). A real provider ignores it:
// its answers are as long as they are.
const HeaderMockOutputTokens = "X-Mock-Output-Tokens"

// CharsPerToken is how many characters of prompt a replayed trace call
// sends per prompt token of the trace: the usual rule of thumb for English,
// and how the mock provider counts prompt tokens (characters / 4).
const CharsPerToken = 4

// DefaultClasses returns the mix used when Config.Classes is empty:
// interactive 70% with a 10s deadline (a person waiting at a screen),
// batch 20% with 30s (a job that can wait but not forever), and speculative
// 10% with 5s (prefetch that is worthless unless it arrives early).
// It returns a new slice each call.
func DefaultClasses() []Class {
	return []Class{
		{Name: "interactive", Weight: 0.7, Deadline: 10 * time.Second},
		{Name: "batch", Weight: 0.2, Deadline: 30 * time.Second},
		{Name: "speculative", Weight: 0.1, Deadline: 5 * time.Second},
	}
}

// Config describes one load run. The zero value is not runnable: Target and
// Rate (or a Trace) are required, and Duration or MaxRequests must bound a
// Poisson run. Every other field has a documented zero value.
type Config struct {
	// Target is the base URL of the gateway or provider, e.g.
	// "http://127.0.0.1:8080"; ChatCompletionsPath is appended to its path.
	// Required; scheme must be http or https.
	Target string

	// Rate is the mean arrival rate of logical requests per second. Required,
	// must be positive and finite; with a Trace it must be zero, because
	// the trace's arrival times are the schedule.
	Rate float64

	// Trace, when set, replays recorded traffic instead of the Poisson
	// process: call i of the trace is logical request i, arriving at its
	// At from the start of the run (a gap at the trace's start is waited
	// out), sent as the class named after its Service (a call naming none
	// goes to the only class; with several it is an error, as is a service
	// no class is named after), with a prompt of about PromptTokens ×
	// CharsPerToken characters of filler text, max_tokens its MaxTokens
	// (else its class's), its Deadline (else its class's), and
	// HeaderMockOutputTokens: its OutputTokens. Arrivals stay open-loop and
	// MaxInFlight still applies. Class weights, Seed and the Poisson
	// process play no part; Prompt must be empty and SamePrompt false (a
	// call's prompt is its size). The run reads the trace and never
	// modifies it; it must not be modified while Run runs. Nil means the
	// Poisson process at Rate.
	Trace *workload.Trace

	// Duration is how long arrivals are generated. Zero means arrivals stop
	// only at MaxRequests, which must then be positive. With a Trace, a
	// positive Duration stops the replay there (calls at or after it are
	// not sent), and zero plays the whole trace.
	Duration time.Duration

	// MaxRequests is a hard bound on the number of logical requests. Zero
	// means no bound other than Duration, which must then be positive
	// (with a Trace, no bound but the trace's end).
	MaxRequests int

	// Classes is the request mix, or with a Trace its services. Empty means
	// DefaultClasses().
	Classes []Class

	// Policy is the retrying client being simulated: Naive{}, Polite{}, a
	// RulePolicy, or any client library through ContextPolicy. Nil means
	// Naive{}.
	Policy Policy

	// MaxAttempts bounds attempts per logical request, whatever the policy
	// decides. Zero means DefaultMaxAttempts (3); 1 disables retries.
	MaxAttempts int

	// AttemptTimeout is the callers' fixed per-attempt timeout (unless their
	// class sets its own, Class.AttemptTimeout), the knob SDKs
	// expose; it reaches the policy as Request.AttemptTimeout (Naive uses
	// it, Polite ignores it in favour of the remaining deadline). Zero means
	// half the request's deadline (the class's, or a trace call's own), so
	// a naive client gets one retry inside its deadline and its third
	// attempt runs past it.
	AttemptTimeout time.Duration

	// Model is the "model" field of the request body. Empty means
	// DefaultModel.
	Model string

	// MaxTokens is the "max_tokens" field of the request body, for the
	// classes that set none of their own (Class.MaxTokens). Zero means
	// DefaultMaxTokens.
	MaxTokens int

	// Prompt is the content of the single user message. Empty means
	// DefaultPrompt; with a Trace it must be empty (each call's prompt is
	// filler of its own size). Every logical request also sends "seed":
	// its sequence number, so that no two send the same bytes (see
	// requestBody), unless SamePrompt is set.
	Prompt string

	// SamePrompt sends every logical request with exactly the same body,
	// without the "seed" that otherwise tells them apart, as load tools
	// and a popular prompt do in production. A gateway that recognises
	// retries by their bytes then sees every request as a copy of the
	// first, which is the case it must not mistake for a retry storm.
	// False (the zero value) means one distinct body per logical request.
	// Either way the attempts of one request are byte-identical copies.
	// It has no meaning with a Trace, whose calls differ in size: setting
	// both is an error.
	SamePrompt bool

	// AttemptHeaders chooses the headers that declare each attempt's
	// number and deadline (see the AttemptHeaders constants): sluice's own,
	// the official OpenAI SDKs', both, or no attempt number at all. A
	// header a policy set itself is kept whatever the choice. Empty means
	// AttemptHeadersSluice; any other value not among the constants is an
	// error.
	AttemptHeaders AttemptHeaders

	// Stream asks for a server-sent-event stream ("stream": true). The body
	// is read to its end either way; an answer counts when its last byte
	// has arrived.
	Stream bool

	// APIKey, when non-empty, is sent as "Authorization: Bearer <APIKey>"
	// by the classes that have no key of their own (Class.APIKey). Empty
	// means those send no Authorization.
	APIKey string

	// Headers are added to every attempt. The runner's own headers
	// (Content-Type, Authorization when a key is set, X-Sluice-Priority,
	// HeaderMockOutputTokens with a Trace, and the attempt headers
	// AttemptHeaders chooses) take precedence. Nil means none.
	Headers http.Header

	// MaxInFlight caps concurrent attempts, protecting the load generator's
	// own machine. An arrival (or retry) that finds the cap reached is not
	// sent; its logical request ends as client_overflow and is reported,
	// never silently dropped. Zero means DefaultMaxInFlight (1000).
	MaxInFlight int

	// Seed seeds the arrival and class-mix generator. Zero is a seed like
	// any other: runs are reproducible unless the seed is varied. A Trace
	// is its own schedule and needs none.
	Seed uint64

	// Client sends the requests. Nil means a client built for this run, with
	// as many idle connections per host as MaxInFlight (the standard
	// transport keeps two, which would make an open-loop generator open a
	// fresh connection for most requests and count the handshakes as
	// latency); its idle connections are closed when Run returns. A
	// caller-supplied Client should have no Timeout of its own: the runner
	// sets per-attempt deadlines on each request's context.
	Client *http.Client
}

// ConfigError reports an invalid Config field. Field is the Go field path,
// such as "Rate" or "Classes[1].Weight", so that front ends can map it to
// their own names (the sluice command maps it to a flag).
type ConfigError struct {
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("loadgen: Config.%s: %s", e.Field, e.Problem)
}

func fieldErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first invalid field as a *ConfigError. It does not
// modify c.
func (c *Config) Validate() error {
	if c.Target == "" {
		return fieldErr("Target", "required (the base URL, e.g. http://127.0.0.1:8080)")
	}
	u, err := url.Parse(c.Target)
	if err != nil {
		return fieldErr("Target", "not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fieldErr("Target", "scheme must be http or https, got %q", c.Target)
	}
	if u.Host == "" {
		return fieldErr("Target", "missing host in %q", c.Target)
	}
	if strings.HasSuffix(strings.TrimRight(u.Path, "/"), ChatCompletionsPath) {
		return fieldErr("Target", "give the base URL; %s is appended (got %q)", ChatCompletionsPath, c.Target)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fieldErr("Target", "must not carry a query or fragment, got %q", c.Target)
	}
	if c.Trace != nil {
		if c.Rate != 0 {
			return fieldErr("Rate", "must be zero with a Trace (the trace's arrival times are the schedule), got %v", c.Rate)
		}
	} else if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate <= 0 {
		return fieldErr("Rate", "must be a positive number of requests per second, got %v", c.Rate)
	}
	if c.Duration < 0 {
		return fieldErr("Duration", "must not be negative, got %v", c.Duration)
	}
	if c.MaxRequests < 0 {
		return fieldErr("MaxRequests", "must not be negative, got %d", c.MaxRequests)
	}
	if c.Duration == 0 && c.MaxRequests == 0 && c.Trace == nil {
		return fieldErr("Duration", "zero together with MaxRequests zero would never stop; set one of them")
	}
	if err := validateClasses(c.Classes, c.Trace != nil); err != nil {
		return err
	}
	if c.MaxAttempts < 0 {
		return fieldErr("MaxAttempts", "must not be negative, got %d", c.MaxAttempts)
	}
	if c.AttemptTimeout < 0 {
		return fieldErr("AttemptTimeout", "must not be negative, got %v", c.AttemptTimeout)
	}
	if c.MaxTokens < 0 {
		return fieldErr("MaxTokens", "must not be negative, got %d", c.MaxTokens)
	}
	if !c.AttemptHeaders.valid() {
		return fieldErr("AttemptHeaders", "must be one of %s, got %q", attemptHeaderList(), c.AttemptHeaders)
	}
	if c.MaxInFlight < 0 {
		return fieldErr("MaxInFlight", "must not be negative, got %d", c.MaxInFlight)
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return fieldErr("APIKey", "must not contain line breaks")
	}
	for name, vals := range c.Headers {
		if !isToken(name) {
			return fieldErr("Headers", "invalid header name %q", name)
		}
		for _, v := range vals {
			if strings.ContainsAny(v, "\r\n") {
				return fieldErr("Headers", "value of %s must not contain line breaks", name)
			}
		}
	}
	if c.Trace != nil {
		if c.SamePrompt {
			return fieldErr("SamePrompt", "has no meaning with a Trace: each call's prompt is its own size")
		}
		if c.Prompt != "" {
			return fieldErr("Prompt", "must be empty with a Trace: each call's prompt is filler of its own size")
		}
		classes := c.Classes
		if len(classes) == 0 {
			classes = DefaultClasses()
		}
		if _, err := traceClasses(c.Trace, classes); err != nil {
			return err
		}
	}
	return nil
}

// traceClasses checks that every call of t can be sent, and returns the
// index in classes of each of t's services: a call is sent as the class
// named after its service, or, naming none, as the only class.
func traceClasses(t *workload.Trace, classes []Class) (map[string]int, error) {
	if len(t.Calls) == 0 {
		return nil, fieldErr("Trace", "has no calls")
	}
	names := make([]string, len(classes))
	byName := make(map[string]int, len(classes))
	for i, cl := range classes {
		names[i] = cl.Name
		byName[cl.Name] = i
	}
	of := map[string]int{}
	// needsDeadline[k] is the first call of class k that carries no
	// deadline of its own, or -1.
	needsDeadline := make([]int, len(classes))
	for k := range needsDeadline {
		needsDeadline[k] = -1
	}
	var prev time.Duration
	for i, call := range t.Calls {
		k, ok := of[call.Service]
		if !ok {
			switch k, ok = byName[call.Service]; {
			case ok:
			case call.Service == "" && len(classes) == 1:
				k = 0
			case call.Service == "":
				return nil, fieldErr("Trace", "call %d names no service, and there are %d classes (%s): name every call's service, or give one class",
					i, len(classes), strings.Join(names, ", "))
			default:
				return nil, fieldErr("Trace", "call %d is of service %q, which no class is named after (classes: %s)",
					i, call.Service, strings.Join(names, ", "))
			}
			of[call.Service] = k
		}
		switch {
		case call.At < 0:
			return nil, fieldErr("Trace", "call %d arrives at %v, before the start", i, call.At)
		case call.At < prev:
			return nil, fieldErr("Trace", "call %d arrives at %v, before call %d (%v): calls must be in order of arrival", i, call.At, i-1, prev)
		case call.PromptTokens < 0 || call.PromptTokens > workload.MaxTokens:
			return nil, fieldErr("Trace", "call %d has %d prompt tokens, want 0 to %d", i, call.PromptTokens, workload.MaxTokens)
		case call.OutputTokens < 0 || call.OutputTokens > workload.MaxTokens:
			return nil, fieldErr("Trace", "call %d has %d output tokens, want 0 to %d", i, call.OutputTokens, workload.MaxTokens)
		case call.MaxTokens < 0 || call.MaxTokens > workload.MaxTokens:
			return nil, fieldErr("Trace", "call %d has max_tokens %d, want 0 (its class's) to %d", i, call.MaxTokens, workload.MaxTokens)
		case call.Deadline < 0:
			return nil, fieldErr("Trace", "call %d has deadline %v, want 0 (its class's) or positive", i, call.Deadline)
		}
		prev = call.At
		if call.Deadline == 0 && needsDeadline[k] < 0 {
			needsDeadline[k] = i
		}
	}
	for k, i := range needsDeadline {
		if i >= 0 && classes[k].Deadline <= 0 {
			return nil, fieldErr(fmt.Sprintf("Classes[%d].Deadline", k), "zero, and call %d of the trace (at %v) has no deadline of its own: service %q needs one",
				i, t.Calls[i].At, classes[k].Name)
		}
	}
	return of, nil
}

func validateClasses(classes []Class, trace bool) error {
	seen := make(map[string]bool, len(classes))
	total := 0.0
	for i, cl := range classes {
		f := fmt.Sprintf("Classes[%d]", i)
		if !isToken(cl.Name) {
			return fieldErr(f+".Name", "must be a non-empty token of letters, digits, '-' or '_', got %q", cl.Name)
		}
		if seen[cl.Name] {
			return fieldErr(f+".Name", "duplicate class %q", cl.Name)
		}
		seen[cl.Name] = true
		if cl.Priority != "" && !isToken(cl.Priority) {
			return fieldErr(f+".Priority", "must be empty (the name) or a token of letters, digits, '-' or '_', got %q (class %q)", cl.Priority, cl.Name)
		}
		if strings.ContainsAny(cl.APIKey, "\r\n") {
			return fieldErr(f+".APIKey", "must not contain line breaks (class %q)", cl.Name)
		}
		if cl.MaxTokens < 0 {
			return fieldErr(f+".MaxTokens", "must not be negative, got %d (class %q)", cl.MaxTokens, cl.Name)
		}
		if math.IsNaN(cl.Weight) || math.IsInf(cl.Weight, 0) || cl.Weight < 0 {
			return fieldErr(f+".Weight", "must be a non-negative number, got %v (class %q)", cl.Weight, cl.Name)
		}
		// A trace's calls may carry their own deadlines; whether its class
		// needs one is checked against them (traceClasses).
		if cl.Deadline < 0 || cl.Deadline == 0 && !trace {
			return fieldErr(f+".Deadline", "must be positive, got %v (class %q)", cl.Deadline, cl.Name)
		}
		if cl.AttemptTimeout < 0 {
			return fieldErr(f+".AttemptTimeout", "must not be negative, got %v (class %q)", cl.AttemptTimeout, cl.Name)
		}
		total += cl.Weight
	}
	// With a trace the weights are ignored: it says who sent each call.
	if len(classes) > 0 && total <= 0 && !trace {
		return fieldErr("Classes", "at least one class needs a positive weight")
	}
	return nil
}

// isToken reports whether s is a usable class or header name: ASCII letters,
// digits, '-' and '_'. Narrower than RFC 9110's token on purpose: these names
// end up in metrics labels and flag syntax (name=value,...).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// resolved is a validated Config with every default applied; the runner
// reads only this. Its Classes have Priority, APIKey and MaxTokens filled
// in from their defaults.
type resolved struct {
	Config
	endpoint string
	// bodies are each class's body for a Poisson run (see requestBody).
	bodies [][]byte
	// traceClass maps a trace's services to their classes; traceBody
	// builds its calls' bodies.
	traceClass  map[string]int
	traceBody   *traceBody
	maxDeadline time.Duration
}

func resolve(c Config) (*resolved, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.Classes) == 0 {
		c.Classes = DefaultClasses()
	} else {
		c.Classes = append([]Class(nil), c.Classes...)
	}
	if c.Policy == nil {
		c.Policy = Naive{}
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	if c.Prompt == "" && c.Trace == nil {
		c.Prompt = DefaultPrompt
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.AttemptHeaders == "" {
		c.AttemptHeaders = AttemptHeadersSluice
	}
	for i := range c.Classes {
		cl := &c.Classes[i]
		cl.Priority = cmp.Or(cl.Priority, cl.Name)
		cl.APIKey = cmp.Or(cl.APIKey, c.APIKey)
		cl.MaxTokens = cmp.Or(cl.MaxTokens, c.MaxTokens)
	}
	r := &resolved{Config: c}
	r.endpoint = strings.TrimRight(c.Target, "/") + ChatCompletionsPath
	for _, cl := range c.Classes {
		r.maxDeadline = max(r.maxDeadline, cl.Deadline)
	}
	if c.Trace != nil {
		of, err := traceClasses(c.Trace, c.Classes)
		if err != nil {
			return nil, err
		}
		r.traceClass = of
		longest := 0
		for _, call := range c.Trace.Calls {
			longest = max(longest, call.PromptTokens)
			r.maxDeadline = max(r.maxDeadline, call.Deadline)
		}
		r.traceBody, err = newTraceBody(c.Model, c.Stream, longest*CharsPerToken)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	r.bodies = make([][]byte, len(c.Classes))
	for i, cl := range c.Classes {
		body, err := chatBody(c.Model, c.Prompt, cl.MaxTokens, c.Stream)
		if err != nil {
			return nil, err
		}
		r.bodies[i] = body
	}
	return r, nil
}
