package spend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/yamltime"
)

// Config is the spend policy, as read from YAML. The gateway embeds it under
// its `spend:` key; every field documents its zero value, and Validate names
// the first bad field by its YAML path as written under that key
// (spend.prices.gpt-4o.input_per_mtok). The zero Config is valid and inert:
// no prices (every model is refused as unknown), no ceiling, no budgets.
type Config struct {
	// Prices maps a model name, as callers send it in "model", to its
	// price. A model not listed here is handled by UnknownModel.
	Prices map[string]Price `yaml:"prices"`
	// DefaultPrice is the price of every model not in Prices when
	// UnknownModel is "default". Nil means none; setting it while
	// UnknownModel is not "default" is an error, so that it is never
	// silently ignored.
	DefaultPrice *Price `yaml:"default_price"`
	// UnknownModel decides what happens to a request for a model that has
	// no price (including a request that names no model): "reject" refuses
	// it as bad input (Admit returns ErrUnknownModel), "default" bills it
	// at DefaultPrice. Empty means reject: a missing price is never a
	// silent zero.
	UnknownModel string `yaml:"unknown_model"`
	// Ladder maps a model to its next cheaper rung (e.g. gpt-4o:
	// gpt-4o-mini). In the degrade stage a request is rewritten one rung
	// down. Both models must be in Prices, the rung must be no dearer for
	// input nor output and cheaper for at least one, and a chain of rungs
	// must not loop. Empty means no degrading: the degrade stage then
	// changes nothing and the reject stage comes next.
	Ladder map[string]string `yaml:"ladder"`
	// CeilingPerHour is the global ceiling on the spend rate, in USD per
	// hour, across all tenants and models. Zero means no ceiling (the
	// global stage stays normal; tenant budgets still apply).
	CeilingPerHour float64 `yaml:"ceiling_per_hour"`
	// Stages are the thresholds of the staged policy, as fractions of the
	// global ceiling and of each tenant's budget.
	Stages Stages `yaml:"stages"`
	// RateWindow is how much recent spend is projected to USD per hour to
	// give the rate that drives stages and alerts: rate = spend in the last
	// RateWindow × (1h / RateWindow). Shorter reacts faster to a runaway
	// and is noisier. It must be a whole number of minutes from 1m to 60m
	// (spend is kept in minute buckets). Zero means 5m.
	RateWindow Duration `yaml:"rate_window"`
	// DefaultOutputTokens is the output size assumed for a request that
	// sends no max_tokens, for a model whose output has not been observed
	// yet; once calls to the model have reported usage, their mean output
	// is used instead. Zero means 1024.
	DefaultOutputTokens int64 `yaml:"default_output_tokens"`
	// Tenants are the budgets of tenants, by tenant name (the gateway's
	// tenants[].name, or "anonymous" when it has no tenants). A tenant not
	// listed has no budget of its own; its spend still counts against the
	// ceiling and is reported.
	Tenants map[string]TenantBudget `yaml:"tenants"`
	// AlertPerHour is the global spend rate, in USD per hour, above which
	// an alert fires. Zero means the ceiling times
	// stages.shed_speculative_at (the alert fires as the policy starts to
	// act), and no global alert without a ceiling.
	AlertPerHour float64 `yaml:"alert_per_hour"`
	// AlertWebhook is an http(s) URL that receives each alert event as a
	// JSON POST. Empty means no webhook (alerts are still logged and
	// exported as metrics).
	AlertWebhook string `yaml:"alert_webhook"`
	// AlertInterval is how often alerts are evaluated. It must be at most
	// 10s so that a crossing is seen within seconds. Zero means 10s.
	AlertInterval Duration `yaml:"alert_interval"`
	// AlertTimeout bounds one webhook POST. Zero means 5s.
	AlertTimeout Duration `yaml:"alert_timeout"`
}

// Price is a model's price in USD per million tokens.
type Price struct {
	// InputPerMTok is the price of a million input (prompt) tokens. Zero
	// is a free input, stated explicitly.
	InputPerMTok float64 `yaml:"input_per_mtok"`
	// OutputPerMTok is the price of a million output (completion) tokens.
	// Zero is a free output, stated explicitly.
	OutputPerMTok float64 `yaml:"output_per_mtok"`
	// CachedInputPerMTok is the price of a million input tokens served from
	// the provider's prompt cache. Nil means the same as InputPerMTok.
	CachedInputPerMTok *float64 `yaml:"cached_input_per_mtok"`
}

// TenantBudget is one tenant's own budget. The same stages as the global
// ceiling apply to it, with over-quota in place of shedding: past
// stages.shed_speculative_at of its budget a tenant's speculative work is
// refused and the rest drops to the over-quota rank, past degrade_at it is
// degraded, and from reject_at it is refused (429 tenant_budget) in rank
// order.
type TenantBudget struct {
	// PerHour is the tenant's budget on its spend rate, in USD per hour
	// (measured like the global rate, over rate_window). Zero means no
	// hourly budget.
	PerHour float64 `yaml:"per_hour"`
	// PerDay is the tenant's budget on its spend over the last 24 hours, in
	// USD. Zero means no daily budget.
	PerDay float64 `yaml:"per_day"`
	// AlertPerHour is the tenant's spend rate, in USD per hour, above which
	// an alert fires. Zero means PerHour times stages.shed_speculative_at,
	// and no alert without an hourly budget.
	AlertPerHour float64 `yaml:"alert_per_hour"`
}

// Stages are the thresholds of the staged policy, as fractions of a limit
// (the global ceiling, or a tenant's budget). They must be in order:
// 0 < shed_speculative_at ≤ degrade_at ≤ reject_at ≤ 1.
//
// A scope whose rate is at fraction f of its limit is:
//   - below shed_speculative_at: normal;
//   - from shed_speculative_at: rank 0 (speculative work) is refused; for a
//     tenant, its other requests are also marked over quota. For the global
//     ceiling, a tenant spending more than its max-min fair share of this
//     stage (among the tenants with spend in the rate window) is refused
//     like rank 0 and marked over quota, whatever its rank;
//   - from degrade_at: requests are rewritten to the next rung of their
//     model's ladder;
//   - from reject_at: ranks 1 and up are refused one after another, each at
//     its own fraction spread evenly from reject_at (rank 1) to 1.0 (TopRank
//     and above). With the defaults: rank 1 (retries) at 0.95, 2 (low tier,
//     over quota) at 0.9625, 3 (batch) at 0.975, 4 (interactive) at 0.9875
//     and 5 (high-tier interactive) at the ceiling itself.
//
// For the global ceiling, the rank of an over-quota tenant's request is
// first lowered to OverQuotaRank, so a runaway tenant is refused globally
// before everyone else's work of the same class.
type Stages struct {
	// ShedSpeculativeAt: from this fraction rank 0 is refused. Zero means 0.8.
	ShedSpeculativeAt float64 `yaml:"shed_speculative_at"`
	// DegradeAt: from this fraction requests move down their ladder. Zero
	// means 0.9.
	DegradeAt float64 `yaml:"degrade_at"`
	// RejectAt: from this fraction rank 1 is refused, and higher ranks at
	// higher fractions up to 1.0. Zero means 0.95.
	RejectAt float64 `yaml:"reject_at"`
	// TopRank is the rank refused only at the ceiling itself (the highest
	// rank of the admission gate: 5 with its default ranks). Zero means 5;
	// otherwise 1–15.
	TopRank int `yaml:"top_rank"`
	// OverQuotaRank is the rank an over-quota tenant's requests drop to
	// (the gate's low-tier rank). Nil means 2, the gate's default.
	OverQuotaRank *int `yaml:"over_quota_rank"`
}

// The documented defaults of zero fields.
const (
	DefaultRateWindow        = 5 * time.Minute
	DefaultOutputTokens      = 1024
	DefaultAlertInterval     = 10 * time.Second
	MaxAlertInterval         = 10 * time.Second
	DefaultAlertTimeout      = 5 * time.Second
	DefaultShedSpeculativeAt = 0.8
	DefaultDegradeAt         = 0.9
	DefaultRejectAt          = 0.95
	DefaultTopRank           = 5
	DefaultOverQuotaRank     = 2
)

// Unknown-model policies.
const (
	UnknownModelReject  = "reject"
	UnknownModelDefault = "default"
)

// OtherLabel is the name under which tenants and models beyond the tracked
// bound are reported together. It cannot be a configured tenant's name.
const OtherLabel = "(other)"

// Duration is a time.Duration written in YAML as a Go duration string
// ("30s", "5m"); a bare number is refused, since its unit would be a guess.
// D returns the time.Duration. The same type as the other config's
// Duration (gateway and spend), so a value moves between them as it is.
type Duration = yamltime.Duration

// ParseConfig parses a YAML document whose top level is the spend section
// (what the gateway's config has under `spend:`), refusing unknown keys, and
// validates it.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("spend: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate checks every field and returns an error naming the first bad one
// by its YAML path.
func (c Config) Validate() error {
	_, err := c.compile()
	return err
}

func fieldErr(path, format string, args ...any) error {
	return fmt.Errorf("config: spend.%s: %s", path, fmt.Sprintf(format, args...))
}

// checkAmount accepts a finite, non-negative number.
func checkAmount(path string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fieldErr(path, "%v, want a finite number", v)
	}
	if v < 0 {
		return fieldErr(path, "%v, want ≥ 0", v)
	}
	return nil
}

func (p Price) validate(path string) error {
	if err := checkAmount(path+".input_per_mtok", p.InputPerMTok); err != nil {
		return err
	}
	if err := checkAmount(path+".output_per_mtok", p.OutputPerMTok); err != nil {
		return err
	}
	if p.CachedInputPerMTok != nil {
		if err := checkAmount(path+".cached_input_per_mtok", *p.CachedInputPerMTok); err != nil {
			return err
		}
	}
	return nil
}

// compiled is a validated Config with its defaults filled in: what the
// Limiter runs on. It is never mutated after compile.
type compiled struct {
	prices       map[string]price
	defaultPrice *price
	ladder       map[string]string
	ceiling      float64 // USD per hour; 0 = none
	shedAt       float64
	degradeAt    float64
	rejectAt     float64
	topRank      int
	overQuota    int
	rateWindow   time.Duration
	defaultOut   int64
	tenants      map[string]TenantBudget
	alertGlobal  float64 // USD per hour; 0 = none
	webhook      string
	interval     time.Duration
	timeout      time.Duration
}

func (c Config) compile() (*compiled, error) {
	out := &compiled{prices: make(map[string]price, len(c.Prices))}
	for _, m := range sortedKeys(c.Prices) {
		p := c.Prices[m]
		path := "prices." + m
		if m == "" {
			return nil, fieldErr("prices", "a model name is empty")
		}
		if err := p.validate(path); err != nil {
			return nil, err
		}
		out.prices[m] = newPrice(p)
	}
	switch c.UnknownModel {
	case "", UnknownModelReject:
		if c.DefaultPrice != nil {
			return nil, fieldErr("unknown_model", "%q, but default_price is set: use unknown_model: default to bill unpriced models at it, or remove default_price", c.UnknownModel)
		}
	case UnknownModelDefault:
		if c.DefaultPrice == nil {
			return nil, fieldErr("default_price", "required when unknown_model is default")
		}
		if err := c.DefaultPrice.validate("default_price"); err != nil {
			return nil, err
		}
		p := newPrice(*c.DefaultPrice)
		out.defaultPrice = &p
	default:
		return nil, fieldErr("unknown_model", "%q, want reject or default", c.UnknownModel)
	}
	out.ladder = make(map[string]string, len(c.Ladder))
	for _, from := range sortedKeys(c.Ladder) {
		to := c.Ladder[from]
		path := "ladder." + from
		if _, ok := out.prices[from]; !ok {
			return nil, fieldErr(path, "model %q has no price in spend.prices", from)
		}
		if _, ok := out.prices[to]; !ok {
			return nil, fieldErr(path, "rung %q has no price in spend.prices", to)
		}
		// Follow the chain; the entry that leads back to a model already
		// on it is the one named.
		seen := map[string]bool{from: true}
		for prev, m := from, to; m != ""; prev, m = m, c.Ladder[m] {
			if seen[m] {
				return nil, fieldErr("ladder."+prev, "the ladder loops back to %q", m)
			}
			seen[m] = true
		}
		// A rung dearer than its model would make degrading raise spend.
		pf, pt := out.prices[from], out.prices[to]
		if pt.in > pf.in || pt.out > pf.out || (pt.in == pf.in && pt.out == pf.out) {
			return nil, fieldErr(path, "rung %q is not cheaper than %q (input %v vs %v, output %v vs %v per Mtok)",
				to, from, pt.in, pf.in, pt.out, pf.out)
		}
		out.ladder[from] = to
	}
	if err := checkAmount("ceiling_per_hour", c.CeilingPerHour); err != nil {
		return nil, err
	}
	out.ceiling = c.CeilingPerHour
	if err := c.Stages.compile(out); err != nil {
		return nil, err
	}
	out.rateWindow = c.RateWindow.D()
	if out.rateWindow == 0 {
		out.rateWindow = DefaultRateWindow
	}
	if w := out.rateWindow; w < time.Minute || w > time.Hour || w%time.Minute != 0 {
		return nil, fieldErr("rate_window", "%v, want a whole number of minutes from 1m to 60m", c.RateWindow.D())
	}
	if c.DefaultOutputTokens < 0 {
		return nil, fieldErr("default_output_tokens", "%d, want ≥ 0", c.DefaultOutputTokens)
	}
	out.defaultOut = c.DefaultOutputTokens
	if out.defaultOut == 0 {
		out.defaultOut = DefaultOutputTokens
	}
	out.tenants = make(map[string]TenantBudget, len(c.Tenants))
	for _, name := range sortedKeys(c.Tenants) {
		b := c.Tenants[name]
		path := "tenants." + name
		if name == "" || name == OtherLabel {
			return nil, fieldErr("tenants", "%q is not a valid tenant name", name)
		}
		for _, f := range []struct {
			field string
			v     float64
		}{{"per_hour", b.PerHour}, {"per_day", b.PerDay}, {"alert_per_hour", b.AlertPerHour}} {
			if err := checkAmount(path+"."+f.field, f.v); err != nil {
				return nil, err
			}
		}
		if b.AlertPerHour == 0 {
			b.AlertPerHour = b.PerHour * out.shedAt
		}
		out.tenants[name] = b
	}
	if err := checkAmount("alert_per_hour", c.AlertPerHour); err != nil {
		return nil, err
	}
	out.alertGlobal = c.AlertPerHour
	if out.alertGlobal == 0 {
		out.alertGlobal = out.ceiling * out.shedAt
	}
	if c.AlertWebhook != "" {
		u, err := url.Parse(c.AlertWebhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fieldErr("alert_webhook", "%q is not an http(s) URL", c.AlertWebhook)
		}
		out.webhook = c.AlertWebhook
	}
	out.interval = c.AlertInterval.D()
	if out.interval == 0 {
		out.interval = DefaultAlertInterval
	}
	if out.interval < 0 || out.interval > MaxAlertInterval {
		return nil, fieldErr("alert_interval", "%v, want more than 0 and at most %v", c.AlertInterval.D(), MaxAlertInterval)
	}
	out.timeout = c.AlertTimeout.D()
	if out.timeout == 0 {
		out.timeout = DefaultAlertTimeout
	}
	if out.timeout < 0 {
		return nil, fieldErr("alert_timeout", "%v, want ≥ 0", c.AlertTimeout.D())
	}
	return out, nil
}

func (s Stages) compile(out *compiled) error {
	vals := []struct {
		field string
		v     float64
		def   float64
		dst   *float64
	}{
		{"shed_speculative_at", s.ShedSpeculativeAt, DefaultShedSpeculativeAt, &out.shedAt},
		{"degrade_at", s.DegradeAt, DefaultDegradeAt, &out.degradeAt},
		{"reject_at", s.RejectAt, DefaultRejectAt, &out.rejectAt},
	}
	prev, prevField := 0.0, ""
	for _, f := range vals {
		v := f.v
		if v == 0 {
			v = f.def
		}
		path := "stages." + f.field
		if math.IsNaN(v) || v <= 0 || v > 1 {
			return fieldErr(path, "%v, want a fraction of the limit in (0, 1]", f.v)
		}
		if v < prev {
			return fieldErr(path, "%v is below %s (%v): the stages must be in order shed_speculative_at ≤ degrade_at ≤ reject_at", v, prevField, prev)
		}
		*f.dst = v
		prev, prevField = v, "stages."+f.field
	}
	out.topRank = s.TopRank
	if out.topRank == 0 {
		out.topRank = DefaultTopRank
	}
	if out.topRank < 1 || out.topRank >= admission.MaxRanks {
		return fieldErr("stages.top_rank", "%d, want 1..%d", s.TopRank, admission.MaxRanks-1)
	}
	out.overQuota = DefaultOverQuotaRank
	if s.OverQuotaRank != nil {
		out.overQuota = *s.OverQuotaRank
	}
	if out.overQuota < 0 || out.overQuota > out.topRank {
		return fieldErr("stages.over_quota_rank", "%d, want 0..top_rank (%d)", out.overQuota, out.topRank)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
