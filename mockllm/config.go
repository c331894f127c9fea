package mockllm

import (
	"fmt"
	"math"
	"time"
)

// Mode decides what happens to a request that finds every slot busy.
type Mode string

const (
	// ModeQueue parks the request in an unbounded FIFO until a slot frees, which
	// is what an overloaded provider does from the caller's point of view:
	// nobody is refused, everybody waits longer.
	ModeQueue Mode = "queue"
	// Mode429 refuses the request at once with 429 and a Retry-After, the way a
	// provider enforcing a concurrency or rate limit does.
	Mode429 Mode = "429"
)

// Limits on configuration values. They exist so that no combination of
// factors can overflow a time.Duration, not as opinions about realism.
const (
	// MaxSigma bounds Config.Sigma: at 4 the p99 service time is already
	// about 11,000 times the median.
	MaxSigma = 4.0
	// MaxServiceTime caps every sampled service time, including per-request
	// overrides, so that the product of the call's median (with its
	// per-token parts), the lognormal draw, the model's factor and the step
	// factor always fits in a time.Duration.
	MaxServiceTime = 24 * time.Hour
	// MaxOutputTokens bounds a request's max_tokens (and the generated text):
	// the mock really writes that many tokens of text.
	MaxOutputTokens = 131072
	// DefaultOutputTokens is the completion size of a request that names no
	// maximum when Config.OutputTokens is zero.
	DefaultOutputTokens = 64
)

// Config describes a mock provider. The zero Config is valid: an instant,
// unlimited, fault-free provider with the built-in model table, which is the
// shape wanted for overhead benchmarks. DefaultConfig returns the realistic
// shape the `sluice mock` command starts with.
type Config struct {
	// Slots is the number of requests in service at once. Zero means
	// unlimited: every request starts at once and Mode is irrelevant.
	Slots int

	// Mode decides what a request that finds all Slots busy gets. The empty
	// string means ModeQueue.
	Mode Mode

	// Median is the median service time of a model with LatencyFactor 1,
	// or, with PerPromptToken or PerOutputToken set, its fixed part: a
	// call's median is then Median + prompt tokens × PerPromptToken +
	// answer tokens × PerOutputToken. Zero with both per-token parts zero
	// means no service time at all: the handler answers as soon as it has
	// a slot without starting a timer (streams are written in one go),
	// which is what overhead benchmarks need; zero with a per-token part
	// means no fixed part. It is not replaced by a default.
	Median time.Duration

	// PerPromptToken is the time each prompt token adds to a call's
	// median (reading the prompt), and PerOutputToken the time each answer
	// token adds (writing it, one token after another: the part that
	// dominates a decode-bound provider), so that answers of 10 and 1,000
	// tokens take as different times as a real provider's do. Zero means
	// none: the service time does not depend on the call's size. Each is
	// in [0, 1h]. The answer's length is the request's maximum, the
	// default, or X-Mock-Output-Tokens.
	PerPromptToken time.Duration
	PerOutputToken time.Duration

	// Sigma is the standard deviation of the logarithm of the service time
	// (lognormal around the call's median). Zero means every service time
	// is exactly the call's median times the factors below, which is what
	// virtual-time tests want.
	// It must be in [0, MaxSigma].
	Sigma float64

	// StepAt is when, measured from New, service times start being
	// multiplied by StepFactor: a mid-run slowdown of the dependency. Zero
	// means the step is in force from the start (and has no effect when
	// StepFactor is 0 or 1). The time is read at the moment a request takes
	// its slot.
	StepAt time.Duration

	// StepFactor multiplies service times from StepAt on. Zero means 1 (no
	// step). Values below 1 model a provider that gets faster.
	StepFactor float64

	// Models maps a request's "model" (exact match) to its speed and price.
	// Nil means BuiltinModels(). A non-nil table replaces the built-in one
	// entirely; a request for a model missing from it uses the DefaultModelKey
	// ("*") row if the table has one, else LatencyFactor 1 and price 0.
	Models map[string]ModelSpec

	// OutputTokens is the completion size, in tokens, of a request that names
	// no max_tokens (or max_completion_tokens / max_output_tokens). Zero
	// means DefaultOutputTokens. A request that names a maximum gets exactly
	// that many tokens: the mock stops early only when the request's
	// X-Mock-Output-Tokens says so.
	OutputTokens int

	// RetryAfter is the delay advertised in Retry-After and retry-after-ms on
	// every 429 (Mode429 refusals and the 429 fault). Zero means the current
	// median service time (Median, plus the default answer length ×
	// PerOutputToken, with the step applied), at least one millisecond;
	// Retry-After itself is rounded up to whole seconds, at least 1.
	RetryAfter time.Duration

	// ErrorRate is the fraction of requests answered 500 with an
	// OpenAI-style error body. ErrorRate, HangRate and ResetRate are each in
	// [0, 1] and their sum is at most 1. Faults are drawn at arrival, before
	// capacity, and never take a slot nor cost money.
	ErrorRate float64

	// HangRate is the fraction of requests that are swallowed: no slot, no
	// answer, until the client gives up or Close is called (which answers
	// 503). It models a black hole in front of the provider.
	HangRate float64

	// ResetRate is the fraction of requests whose connection is reset
	// without an answer (a TCP RST where the connection allows it).
	ResetRate float64

	// AbortOnDisconnect stops generation as soon as the client goes away,
	// freeing the slot and billing only the tokens produced so far. False
	// (the zero value) keeps generating until the service time ends, holding
	// the slot and billing the whole answer, as many real providers do.
	AbortOnDisconnect bool

	// Seed seeds the random source behind service times and faults. Zero
	// means a seed drawn from the runtime's random source, so runs differ.
	// Even with a fixed seed, concurrent requests draw in scheduling order,
	// so only sequential runs are reproducible.
	Seed uint64
}

// DefaultConfig is the realistic provider the `sluice mock` command starts
// with: 8 slots, a queue, a lognormal service time of median 1s and sigma
// 0.5, no step, no faults.
func DefaultConfig() Config {
	return Config{
		Slots:  8,
		Mode:   ModeQueue,
		Median: time.Second,
		Sigma:  0.5,
	}
}

// ConfigError reports an invalid Config field. Field is the Go field name
// (for example "Sigma" or `Models["gpt-4o"].LatencyFactor`), so that a
// command can translate it into the flag the user typed.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("mockllm: Config.%s: %s", e.Field, e.Reason)
}

// Validate reports the first invalid field as a *ConfigError. It never
// corrects a value.
func (c Config) Validate() error {
	if c.Slots < 0 {
		return &ConfigError{"Slots", fmt.Sprintf("must be >= 0 (0 means unlimited), got %d", c.Slots)}
	}
	switch c.Mode {
	case "", ModeQueue, Mode429:
	default:
		return &ConfigError{"Mode", fmt.Sprintf("must be %q or %q, got %q", ModeQueue, Mode429, c.Mode)}
	}
	if c.Median < 0 || c.Median > MaxServiceTime {
		return &ConfigError{"Median", fmt.Sprintf("must be in [0, %v], got %v", MaxServiceTime, c.Median)}
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"PerPromptToken", c.PerPromptToken}, {"PerOutputToken", c.PerOutputToken}} {
		if p.d < 0 || p.d > time.Hour {
			return &ConfigError{p.name, fmt.Sprintf("must be in [0, 1h], got %v", p.d)}
		}
	}
	if !(c.Sigma >= 0 && c.Sigma <= MaxSigma) { // also rejects NaN
		return &ConfigError{"Sigma", fmt.Sprintf("must be in [0, %v], got %v", MaxSigma, c.Sigma)}
	}
	if c.StepAt < 0 {
		return &ConfigError{"StepAt", fmt.Sprintf("must be >= 0, got %v", c.StepAt)}
	}
	if err := checkFactor("StepFactor", c.StepFactor); err != nil {
		return err
	}
	for name, m := range c.Models {
		if err := m.validate(name); err != nil {
			return err
		}
	}
	if c.OutputTokens < 0 || c.OutputTokens > MaxOutputTokens {
		return &ConfigError{"OutputTokens", fmt.Sprintf("must be in [0, %d], got %d", MaxOutputTokens, c.OutputTokens)}
	}
	if c.RetryAfter < 0 {
		return &ConfigError{"RetryAfter", fmt.Sprintf("must be >= 0, got %v", c.RetryAfter)}
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"ErrorRate", c.ErrorRate}, {"HangRate", c.HangRate}, {"ResetRate", c.ResetRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return &ConfigError{r.name, fmt.Sprintf("must be in [0, 1], got %v", r.v)}
		}
	}
	if sum := c.ErrorRate + c.HangRate + c.ResetRate; sum > 1 {
		return &ConfigError{"ErrorRate", fmt.Sprintf("ErrorRate + HangRate + ResetRate must be <= 1, got %v", sum)}
	}
	return nil
}

// checkFactor accepts zero (meaning 1) and finite positive factors up to
// 1000; a larger factor is almost certainly a unit mistake.
func checkFactor(field string, v float64) error {
	if !(v >= 0 && v <= 1000) || math.IsInf(v, 0) {
		return &ConfigError{field, fmt.Sprintf("must be in [0, 1000] (0 means 1), got %v", v)}
	}
	return nil
}

// orOne returns v, or 1 when v is zero (the documented meaning of a zero
// factor).
func orOne(v float64) float64 {
	if v == 0 {
		return 1
	}
	return v
}
