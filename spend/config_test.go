package spend

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func f64(v float64) *float64 { return &v }
func intp(v int) *int        { return &v }

// baseConfig is a valid config the table tests break one field at a time.
func baseConfig() Config {
	return Config{
		Prices: map[string]Price{
			"big":   {InputPerMTok: 2.5, OutputPerMTok: 10, CachedInputPerMTok: f64(1.25)},
			"small": {InputPerMTok: 0.15, OutputPerMTok: 0.6},
			"tiny":  {InputPerMTok: 0.1, OutputPerMTok: 0.4},
		},
		Ladder:         map[string]string{"big": "small", "small": "tiny"},
		CeilingPerHour: 100,
		Tenants:        map[string]TenantBudget{"acme": {PerHour: 10, PerDay: 100}},
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string // the YAML path the error must name
	}{
		{"negative input price", func(c *Config) { c.Prices["big"] = Price{InputPerMTok: -1} }, "spend.prices.big.input_per_mtok"},
		{"negative output price", func(c *Config) { c.Prices["big"] = Price{OutputPerMTok: -0.5} }, "spend.prices.big.output_per_mtok"},
		{"negative cached price", func(c *Config) { c.Prices["small"] = Price{CachedInputPerMTok: f64(-1)} }, "spend.prices.small.cached_input_per_mtok"},
		{"NaN price", func(c *Config) { c.Prices["tiny"] = Price{InputPerMTok: nan()} }, "spend.prices.tiny.input_per_mtok"},
		{"empty model name", func(c *Config) { c.Prices[""] = Price{} }, "spend.prices"},
		{"unknown_model typo", func(c *Config) { c.UnknownModel = "allow" }, "spend.unknown_model"},
		{"default without price", func(c *Config) { c.UnknownModel = "default" }, "spend.default_price"},
		{"default price ignored", func(c *Config) { c.DefaultPrice = &Price{InputPerMTok: 1} }, "spend.unknown_model"},
		{"negative default price", func(c *Config) {
			c.UnknownModel, c.DefaultPrice = "default", &Price{OutputPerMTok: -2}
		}, "spend.default_price.output_per_mtok"},
		{"ladder names an unknown model", func(c *Config) { c.Ladder["big"] = "nope" }, "spend.ladder.big"},
		{"ladder from an unknown model", func(c *Config) { c.Ladder["nope"] = "tiny" }, "spend.ladder.nope"},
		{"ladder loops", func(c *Config) { c.Ladder["tiny"] = "big" }, "spend.ladder.tiny: the ladder loops back to \"big\""},
		{"ladder to itself", func(c *Config) { c.Ladder["tiny"] = "tiny" }, "spend.ladder.tiny: the ladder loops"},
		{"rung dearer", func(c *Config) { c.Ladder = map[string]string{"small": "big"} }, "spend.ladder.small: rung \"big\" is not cheaper"},
		{"negative ceiling", func(c *Config) { c.CeilingPerHour = -1 }, "spend.ceiling_per_hour"},
		{"stages out of order", func(c *Config) { c.Stages = Stages{ShedSpeculativeAt: 0.9, DegradeAt: 0.8} }, "spend.stages.degrade_at"},
		{"reject below degrade default", func(c *Config) { c.Stages = Stages{RejectAt: 0.85} }, "spend.stages.reject_at"},
		{"stage above 1", func(c *Config) { c.Stages = Stages{RejectAt: 1.5} }, "spend.stages.reject_at"},
		{"negative stage", func(c *Config) { c.Stages = Stages{ShedSpeculativeAt: -0.1} }, "spend.stages.shed_speculative_at"},
		{"top rank too high", func(c *Config) { c.Stages.TopRank = 16 }, "spend.stages.top_rank"},
		{"over-quota rank above top", func(c *Config) { c.Stages.OverQuotaRank = intp(6) }, "spend.stages.over_quota_rank"},
		{"rate window not whole minutes", func(c *Config) { c.RateWindow = Duration(90 * time.Second) }, "spend.rate_window"},
		{"rate window too long", func(c *Config) { c.RateWindow = Duration(2 * time.Hour) }, "spend.rate_window"},
		{"negative default output", func(c *Config) { c.DefaultOutputTokens = -1 }, "spend.default_output_tokens"},
		{"negative per_hour", func(c *Config) { c.Tenants["acme"] = TenantBudget{PerHour: -5} }, "spend.tenants.acme.per_hour"},
		{"negative per_day", func(c *Config) { c.Tenants["acme"] = TenantBudget{PerDay: -5} }, "spend.tenants.acme.per_day"},
		{"negative tenant alert", func(c *Config) { c.Tenants["acme"] = TenantBudget{AlertPerHour: -1} }, "spend.tenants.acme.alert_per_hour"},
		{"reserved tenant name", func(c *Config) { c.Tenants[OtherLabel] = TenantBudget{} }, "spend.tenants"},
		{"negative global alert", func(c *Config) { c.AlertPerHour = -1 }, "spend.alert_per_hour"},
		{"webhook not a URL", func(c *Config) { c.AlertWebhook = "hooks.example.com/x" }, "spend.alert_webhook"},
		{"alert interval above 10s", func(c *Config) { c.AlertInterval = Duration(11 * time.Second) }, "spend.alert_interval"},
		{"negative alert interval", func(c *Config) { c.AlertInterval = Duration(-time.Second) }, "spend.alert_interval"},
		{"negative alert timeout", func(c *Config) { c.AlertTimeout = Duration(-time.Second) }, "spend.alert_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := baseConfig()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("no error, want one naming %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
			if _, err := New(c, Options{}); err == nil {
				t.Error("New accepted the config Validate refused")
			}
		})
	}
	if err := baseConfig().Validate(); err != nil {
		t.Fatalf("base config: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
}

func nan() float64 { var z float64; return z / z }

func TestConfigDefaults(t *testing.T) {
	c, err := baseConfig().compile()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"shed_speculative_at", c.shedAt, 0.8},
		{"degrade_at", c.degradeAt, 0.9},
		{"reject_at", c.rejectAt, 0.95},
		{"top_rank", c.topRank, 5},
		{"over_quota_rank", c.overQuota, 2},
		{"rate_window", c.rateWindow, 5 * time.Minute},
		{"default_output_tokens", c.defaultOut, int64(1024)},
		{"alert_interval", c.interval, 10 * time.Second},
		{"alert_timeout", c.timeout, 5 * time.Second},
		{"alert_per_hour (ceiling × shed)", c.alertGlobal, 80.0},
		{"tenant alert_per_hour (per_hour × shed)", c.tenants["acme"].AlertPerHour, 8.0},
		{"cached price", c.prices["big"].cached, 1.25},
		{"cached price defaults to input", c.prices["small"].cached, 0.15},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	// An explicit rank 0 is not the default.
	cfg := baseConfig()
	cfg.Stages.OverQuotaRank = intp(0)
	if c, err := cfg.compile(); err != nil || c.overQuota != 0 {
		t.Errorf("over_quota_rank: 0 gave %v, %v", c.overQuota, err)
	}
}

func TestParseConfigYAML(t *testing.T) {
	doc := `
prices:
  gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10, cached_input_per_mtok: 1.25}
  gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}
unknown_model: reject
ladder: {gpt-4o: gpt-4o-mini}
ceiling_per_hour: 50
stages: {shed_speculative_at: 0.7, degrade_at: 0.85, reject_at: 0.9}
rate_window: 10m
tenants:
  acme: {per_hour: 5, per_day: 60, alert_per_hour: 4}
alert_webhook: https://hooks.example.com/sluice
alert_interval: 5s
`
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RateWindow.D() != 10*time.Minute || cfg.Tenants["acme"].PerDay != 60 || cfg.Ladder["gpt-4o"] != "gpt-4o-mini" ||
		*cfg.Prices["gpt-4o"].CachedInputPerMTok != 1.25 || cfg.Stages.RejectAt != 0.9 {
		t.Errorf("parsed %+v", cfg)
	}
	for _, bad := range []struct{ doc, want string }{
		{"prices:\n  m: {input_per_mtok: 1, ouput_per_mtok: 2}\n", "ouput_per_mtok"},
		{"rate_window: 300\n", "want a duration"},
		{"tenants:\n  acme: {per_hour: -1}\n", "spend.tenants.acme.per_hour"},
		{"ceiling: 10\n", "ceiling"},
	} {
		if _, err := ParseConfig([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseConfig(%q) = %v, want an error naming %s", bad.doc, err, bad.want)
		}
	}
}

// TestEmbeddedUnderSpendKey decodes the config as the gateway does: under a
// `spend:` key of a larger document, with unknown keys refused.
func TestEmbeddedUnderSpendKey(t *testing.T) {
	type gatewayConfig struct {
		Listen string `yaml:"listen"`
		Spend  Config `yaml:"spend"`
	}
	decode := func(doc string) (gatewayConfig, error) {
		var c gatewayConfig
		dec := yaml.NewDecoder(strings.NewReader(doc))
		dec.KnownFields(true)
		err := dec.Decode(&c)
		return c, err
	}
	c, err := decode("listen: :8080\nspend:\n  ceiling_per_hour: 25\n  rate_window: 2m\n  stages: {over_quota_rank: 0}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Spend.CeilingPerHour != 25 || c.Spend.RateWindow.D() != 2*time.Minute || *c.Spend.Stages.OverQuotaRank != 0 {
		t.Errorf("%+v", c.Spend)
	}
	if err := c.Spend.Validate(); err != nil {
		t.Error(err)
	}
	if _, err := decode("spend:\n  ceiling_per_hr: 25\n"); err == nil || !strings.Contains(err.Error(), "ceiling_per_hr") {
		t.Errorf("unknown key: %v", err)
	}
	out, err := yaml.Marshal(c.Spend)
	if err != nil || !strings.Contains(string(out), "rate_window: 2m0s") {
		t.Errorf("marshal: %s %v", out, err)
	}
}
