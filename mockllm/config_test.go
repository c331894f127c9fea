package mockllm

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Slots: -1}, "Slots"},
		{Config{Mode: "lifo"}, "Mode"},
		{Config{Median: -time.Second}, "Median"},
		{Config{Median: 25 * time.Hour}, "Median"},
		{Config{PerPromptToken: -time.Microsecond}, "PerPromptToken"},
		{Config{PerPromptToken: time.Hour + 1}, "PerPromptToken"},
		{Config{PerOutputToken: -time.Millisecond}, "PerOutputToken"},
		{Config{PerOutputToken: 2 * time.Hour}, "PerOutputToken"},
		{Config{Sigma: -0.1}, "Sigma"},
		{Config{Sigma: math.NaN()}, "Sigma"},
		{Config{Sigma: 5}, "Sigma"},
		{Config{StepAt: -time.Second}, "StepAt"},
		{Config{StepFactor: -2}, "StepFactor"},
		{Config{StepFactor: math.Inf(1)}, "StepFactor"},
		{Config{OutputTokens: -1}, "OutputTokens"},
		{Config{OutputTokens: MaxOutputTokens + 1}, "OutputTokens"},
		{Config{RetryAfter: -time.Second}, "RetryAfter"},
		{Config{ErrorRate: 1.5}, "ErrorRate"},
		{Config{HangRate: -0.5}, "HangRate"},
		{Config{ResetRate: math.NaN()}, "ResetRate"},
		{Config{ErrorRate: 0.5, HangRate: 0.4, ResetRate: 0.2}, "ErrorRate"},
		{Config{Models: map[string]ModelSpec{"x": {LatencyFactor: -1}}}, `Models["x"].LatencyFactor`},
		{Config{Models: map[string]ModelSpec{"x": {InputUSDPerMTok: -1}}}, `Models["x"].InputUSDPerMTok`},
		{Config{Models: map[string]ModelSpec{"x": {OutputUSDPerMTok: math.Inf(1)}}}, `Models["x"].OutputUSDPerMTok`},
		{Config{Models: map[string]ModelSpec{"": {}}}, `Models[""]`},
	} {
		err := tc.cfg.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: error %v, want a ConfigError for %s", tc.cfg, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("message %q does not name Config.%s", err, tc.field)
		}
		if s, err := New(tc.cfg); s != nil || err == nil {
			t.Errorf("New accepted %+v", tc.cfg)
		}
	}
}

func TestZeroAndDefaultConfigsAreValid(t *testing.T) {
	for _, cfg := range []Config{{}, DefaultConfig(), {Mode: Mode429, Slots: 1, ErrorRate: 0.5, HangRate: 0.25, ResetRate: 0.25},
		{PerPromptToken: time.Hour, PerOutputToken: time.Hour}} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// New copies the model table: editing the caller's map later changes
// nothing.
func TestNewCopiesTheModelTable(t *testing.T) {
	models := map[string]ModelSpec{"a": {LatencyFactor: 2}}
	s := newServer(t, Config{Models: models})
	models["a"] = ModelSpec{LatencyFactor: 9}
	if got := lookupModel(s.models, "a").LatencyFactor; got != 2 {
		t.Errorf("LatencyFactor %v, want the 2 given to New", got)
	}
	// A table without a default row prices unknown models at zero.
	if got := lookupModel(s.models, "b"); got != (ModelSpec{LatencyFactor: 1}) {
		t.Errorf("unknown model %+v", got)
	}
}
