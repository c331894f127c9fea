package mockllm

import (
	"fmt"
	"maps"
	"math"
)

// DefaultModelKey names the row of a model table used for any model the
// table does not list.
const DefaultModelKey = "*"

// ModelSpec is one row of the model table: how fast a model is relative to
// Config.Median and what it costs.
type ModelSpec struct {
	// LatencyFactor multiplies the service time of requests for this model.
	// Zero means 1. It must be in [0, 1000].
	LatencyFactor float64 `json:"latency_factor" yaml:"latency_factor"`
	// InputUSDPerMTok is the price of one million prompt tokens in US
	// dollars. Zero means prompt tokens are free.
	InputUSDPerMTok float64 `json:"input_usd_per_mtok" yaml:"input_usd_per_mtok"`
	// OutputUSDPerMTok is the price of one million completion tokens in US
	// dollars. Zero means completion tokens are free.
	OutputUSDPerMTok float64 `json:"output_usd_per_mtok" yaml:"output_usd_per_mtok"`
	// RPM is the model's limit of requests per minute, enforced with 429s
	// and reported in the providers' rate-limit headers. Zero means no
	// limit. Like the providers', it is a bucket that refills continuously
	// (RPM/60 a second), not a window that resets on the minute. Each row
	// has its own buckets; the models the "*" row covers share its buckets.
	RPM int `json:"rpm" yaml:"rpm"`
	// TPM is the model's limit of tokens per minute, a bucket like RPM's. A
	// request is charged, when it arrives, its prompt tokens plus the
	// output tokens it may generate (max_tokens, or the default output
	// size), as OpenAI and Anthropic estimate it; the mock always generates
	// exactly that many, so no reconciliation is needed. Zero means no limit.
	TPM int `json:"tpm" yaml:"tpm"`
}

// Cost is the price in US dollars of a call with the given token counts.
func (m ModelSpec) Cost(tokensIn, tokensOut int64) float64 {
	return (float64(tokensIn)*m.InputUSDPerMTok + float64(tokensOut)*m.OutputUSDPerMTok) / 1e6
}

func (m ModelSpec) validate(name string) error {
	field := fmt.Sprintf("Models[%q]", name)
	if name == "" {
		return &ConfigError{field, "model name must not be empty (use \"*\" for the default row)"}
	}
	if err := checkFactor(field+".LatencyFactor", m.LatencyFactor); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{".InputUSDPerMTok", m.InputUSDPerMTok}, {".OutputUSDPerMTok", m.OutputUSDPerMTok}} {
		if !(p.v >= 0) || math.IsInf(p.v, 0) {
			return &ConfigError{field + p.name, fmt.Sprintf("must be a finite price >= 0, got %v", p.v)}
		}
	}
	if m.RPM < 0 {
		return &ConfigError{field + ".RPM", fmt.Sprintf("must be >= 0 (0 means no limit), got %d", m.RPM)}
	}
	if m.TPM < 0 {
		return &ConfigError{field + ".TPM", fmt.Sprintf("must be >= 0 (0 means no limit), got %d", m.TPM)}
	}
	return nil
}

// BuiltinModels returns a fresh copy of the table used when Config.Models is
// nil. Prices are of the order of public list prices at the time of writing,
// so that cost figures have a realistic shape; they are not a quote. The
// latency factors make the big models slow and the small ones fast relative
// to Config.Median, and embeddings much faster still.
func BuiltinModels() map[string]ModelSpec {
	return maps.Clone(builtinModels)
}

var builtinModels = map[string]ModelSpec{
	DefaultModelKey:          {LatencyFactor: 1, InputUSDPerMTok: 1, OutputUSDPerMTok: 4},
	"gpt-4o":                 {LatencyFactor: 1.5, InputUSDPerMTok: 2.5, OutputUSDPerMTok: 10},
	"gpt-4o-mini":            {LatencyFactor: 0.5, InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.6},
	"gpt-4.1":                {LatencyFactor: 1.3, InputUSDPerMTok: 2, OutputUSDPerMTok: 8},
	"gpt-4.1-mini":           {LatencyFactor: 0.6, InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6},
	"gpt-4.1-nano":           {LatencyFactor: 0.3, InputUSDPerMTok: 0.1, OutputUSDPerMTok: 0.4},
	"o3-mini":                {LatencyFactor: 3, InputUSDPerMTok: 1.1, OutputUSDPerMTok: 4.4},
	"claude-sonnet-4-0":      {LatencyFactor: 1.5, InputUSDPerMTok: 3, OutputUSDPerMTok: 15},
	"claude-3-5-haiku":       {LatencyFactor: 0.6, InputUSDPerMTok: 0.8, OutputUSDPerMTok: 4},
	"text-embedding-3-small": {LatencyFactor: 0.05, InputUSDPerMTok: 0.02},
	"text-embedding-3-large": {LatencyFactor: 0.1, InputUSDPerMTok: 0.13},
}

// lookupModel returns the row for name: the exact row, else the default row,
// else a free model at LatencyFactor 1.
func lookupModel(table map[string]ModelSpec, name string) ModelSpec {
	if m, ok := table[name]; ok {
		return m
	}
	if m, ok := table[DefaultModelKey]; ok {
		return m
	}
	return ModelSpec{LatencyFactor: 1}
}
