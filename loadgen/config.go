package loadgen

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
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

// Class is one kind of caller in the request mix.
type Class struct {
	// Name is sent as X-Sluice-Priority. It must be a non-empty token of
	// letters, digits, '-' and '_', unique within Config.Classes.
	Name string
	// Weight is the class's relative share of arrivals. Weights are
	// normalised, so 7/2/1 and 0.7/0.2/0.1 describe the same mix. Zero means
	// the class is never drawn; negative weights are an error, and at least
	// one weight must be positive.
	Weight float64
	// Deadline is how long a caller of this class waits for an answer,
	// measured from its arrival. Required: zero or negative is an error,
	// because a request without a deadline cannot be late and would make
	// goodput meaningless.
	Deadline time.Duration
	// AttemptTimeout is this class's callers' fixed per-attempt timeout:
	// callers of different classes configure different timeouts. Zero
	// means Config.AttemptTimeout; negative is an error.
	AttemptTimeout time.Duration
}

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
// Rate are required, and Duration or MaxRequests must bound the run. Every
// other field has a documented zero value.
type Config struct {
	// Target is the base URL of the gateway or provider, e.g.
	// "http://127.0.0.1:8080"; ChatCompletionsPath is appended to its path.
	// Required; scheme must be http or https.
	Target string

	// Rate is the mean arrival rate of logical requests per second. Required,
	// must be positive and finite.
	Rate float64

	// Duration is how long arrivals are generated. Zero means arrivals stop
	// only at MaxRequests, which must then be positive.
	Duration time.Duration

	// MaxRequests is a hard bound on the number of logical requests. Zero
	// means no bound other than Duration, which must then be positive.
	MaxRequests int

	// Classes is the request mix. Empty means DefaultClasses().
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
	// half the class's deadline, so a naive client gets one retry inside
	// its deadline and its third attempt runs past it.
	AttemptTimeout time.Duration

	// Model is the "model" field of the request body. Empty means
	// DefaultModel.
	Model string

	// MaxTokens is the "max_tokens" field of the request body. Zero means
	// DefaultMaxTokens.
	MaxTokens int

	// Prompt is the content of the single user message. Empty means
	// DefaultPrompt. Every logical request also sends "seed": its sequence
	// number, so that no two send the same bytes (see requestBody), unless
	// SamePrompt is set.
	Prompt string

	// SamePrompt sends every logical request with exactly the same body,
	// without the "seed" that otherwise tells them apart, as load tools
	// and a popular prompt do in production. A gateway that recognises
	// retries by their bytes then sees every request as a copy of the
	// first, which is the case it must not mistake for a retry storm.
	// False (the zero value) means one distinct body per logical request.
	// Either way the attempts of one request are byte-identical copies.
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

	// APIKey, when non-empty, is sent as "Authorization: Bearer <APIKey>".
	APIKey string

	// Headers are added to every attempt. The runner's own headers
	// (Content-Type, Authorization when APIKey is set, X-Sluice-Priority,
	// and the attempt headers AttemptHeaders chooses) take precedence. Nil
	// means none.
	Headers http.Header

	// MaxInFlight caps concurrent attempts, protecting the load generator's
	// own machine. An arrival (or retry) that finds the cap reached is not
	// sent; its logical request ends as client_overflow and is reported,
	// never silently dropped. Zero means DefaultMaxInFlight (1000).
	MaxInFlight int

	// Seed seeds the arrival and class-mix generator. Zero is a seed like
	// any other: runs are reproducible unless the seed is varied.
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
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate <= 0 {
		return fieldErr("Rate", "must be a positive number of requests per second, got %v", c.Rate)
	}
	if c.Duration < 0 {
		return fieldErr("Duration", "must not be negative, got %v", c.Duration)
	}
	if c.MaxRequests < 0 {
		return fieldErr("MaxRequests", "must not be negative, got %d", c.MaxRequests)
	}
	if c.Duration == 0 && c.MaxRequests == 0 {
		return fieldErr("Duration", "zero together with MaxRequests zero would never stop; set one of them")
	}
	if err := validateClasses(c.Classes); err != nil {
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
	return nil
}

func validateClasses(classes []Class) error {
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
		if math.IsNaN(cl.Weight) || math.IsInf(cl.Weight, 0) || cl.Weight < 0 {
			return fieldErr(f+".Weight", "must be a non-negative number, got %v (class %q)", cl.Weight, cl.Name)
		}
		if cl.Deadline <= 0 {
			return fieldErr(f+".Deadline", "must be positive, got %v (class %q)", cl.Deadline, cl.Name)
		}
		if cl.AttemptTimeout < 0 {
			return fieldErr(f+".AttemptTimeout", "must not be negative, got %v (class %q)", cl.AttemptTimeout, cl.Name)
		}
		total += cl.Weight
	}
	if len(classes) > 0 && total <= 0 {
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
// reads only this.
type resolved struct {
	Config
	endpoint    string
	body        []byte
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
	if c.Prompt == "" {
		c.Prompt = DefaultPrompt
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.AttemptHeaders == "" {
		c.AttemptHeaders = AttemptHeadersSluice
	}
	r := &resolved{Config: c}
	r.endpoint = strings.TrimRight(c.Target, "/") + ChatCompletionsPath
	for _, cl := range c.Classes {
		r.maxDeadline = max(r.maxDeadline, cl.Deadline)
	}
	body, err := chatBody(c.Model, c.Prompt, c.MaxTokens, c.Stream)
	if err != nil {
		return nil, err
	}
	r.body = body
	return r, nil
}
