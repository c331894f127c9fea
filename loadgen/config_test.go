package loadgen

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/workload"
)

func TestValidateNamesTheField(t *testing.T) {
	good := Config{Target: "http://127.0.0.1:8080", Rate: 10, Duration: time.Second}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(c *Config)
	}{
		{"Target", func(c *Config) { c.Target = "" }},
		{"Target", func(c *Config) { c.Target = "127.0.0.1:8080" }},
		{"Target", func(c *Config) { c.Target = "ftp://host" }},
		{"Target", func(c *Config) { c.Target = "http://" }},
		{"Target", func(c *Config) { c.Target = "http://host/v1/chat/completions" }},
		{"Target", func(c *Config) { c.Target = "http://host?x=1" }},
		{"Rate", func(c *Config) { c.Rate = 0 }},
		{"Rate", func(c *Config) { c.Rate = -5 }},
		{"Rate", func(c *Config) { c.Rate = math.Inf(1) }},
		{"Rate", func(c *Config) { c.Rate = math.NaN() }},
		{"Duration", func(c *Config) { c.Duration = -time.Second }},
		{"Duration", func(c *Config) { c.Duration = 0 }},
		{"MaxRequests", func(c *Config) { c.MaxRequests = -1 }},
		{"Classes[0].Name", func(c *Config) { c.Classes = []Class{{Name: "", Weight: 1, Deadline: time.Second}} }},
		{"Classes[0].Name", func(c *Config) { c.Classes = []Class{{Name: "two words", Weight: 1, Deadline: time.Second}} }},
		{"Classes[1].Name", func(c *Config) {
			c.Classes = []Class{{Name: "a", Weight: 1, Deadline: time.Second}, {Name: "a", Weight: 1, Deadline: time.Second}}
		}},
		{"Classes[0].Weight", func(c *Config) { c.Classes = []Class{{Name: "a", Weight: -1, Deadline: time.Second}} }},
		{"Classes[0].Weight", func(c *Config) { c.Classes = []Class{{Name: "a", Weight: math.NaN(), Deadline: time.Second}} }},
		{"Classes[0].Deadline", func(c *Config) { c.Classes = []Class{{Name: "a", Weight: 1}} }},
		{"Classes", func(c *Config) { c.Classes = []Class{{Name: "a", Weight: 0, Deadline: time.Second}} }},
		{"Classes[0].Priority", func(c *Config) {
			c.Classes = []Class{{Name: "a", Priority: "very high", Weight: 1, Deadline: time.Second}}
		}},
		{"Classes[0].APIKey", func(c *Config) {
			c.Classes = []Class{{Name: "a", APIKey: "k\nX-Evil: 1", Weight: 1, Deadline: time.Second}}
		}},
		{"Classes[0].MaxTokens", func(c *Config) { c.Classes = []Class{{Name: "a", MaxTokens: -1, Weight: 1, Deadline: time.Second}} }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = -1 }},
		{"AttemptTimeout", func(c *Config) { c.AttemptTimeout = -time.Second }},
		{"MaxTokens", func(c *Config) { c.MaxTokens = -1 }},
		{"MaxInFlight", func(c *Config) { c.MaxInFlight = -1 }},
		{"AttemptHeaders", func(c *Config) { c.AttemptHeaders = "openai" }},
		{"AttemptHeaders", func(c *Config) { c.AttemptHeaders = "Sluice" }},
		{"APIKey", func(c *Config) { c.APIKey = "k\r\nX-Evil: 1" }},
		{"Headers", func(c *Config) { c.Headers = http.Header{"Bad Name": {"v"}} }},
		{"Headers", func(c *Config) { c.Headers = http.Header{"X-Ok": {"a\nb"}} }},
	} {
		c := good
		tc.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: err = %v, want a ConfigError for %s", c, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("message %q does not name Config.%s", err, tc.field)
		}
	}
}

func TestDurationZeroNeedsMaxRequests(t *testing.T) {
	c := Config{Target: "http://h", Rate: 1, MaxRequests: 5}
	if err := c.Validate(); err != nil {
		t.Errorf("count-bounded config rejected: %v", err)
	}
}

func TestResolveDefaults(t *testing.T) {
	rc, err := resolve(Config{Target: "http://h:1/base/", Rate: 1, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rc.endpoint != "http://h:1/base/v1/chat/completions" {
		t.Errorf("endpoint = %q", rc.endpoint)
	}
	if rc.MaxAttempts != 3 || rc.Model != DefaultModel || rc.MaxTokens != 64 || rc.MaxInFlight != 1000 || rc.Policy.Name() != "naive" ||
		rc.AttemptHeaders != AttemptHeadersSluice || rc.SamePrompt {
		t.Errorf("defaults not applied: %+v", rc.Config)
	}
	if len(rc.Classes) != 3 || rc.maxDeadline != 30*time.Second {
		t.Errorf("default classes %+v, max deadline %v", rc.Classes, rc.maxDeadline)
	}
	// A class's priority, key and max_tokens default to its name and the
	// run's.
	rc, err = resolve(Config{Target: "http://h", Rate: 1, Duration: time.Second, APIKey: "k", MaxTokens: 5,
		Classes: []Class{{Name: "a", Weight: 1, Deadline: time.Second}, {Name: "b", Priority: "p", APIKey: "kb", MaxTokens: 6, Weight: 1, Deadline: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Class{
		{Name: "a", Priority: "a", APIKey: "k", MaxTokens: 5, Weight: 1, Deadline: time.Second},
		{Name: "b", Priority: "p", APIKey: "kb", MaxTokens: 6, Weight: 1, Deadline: time.Second},
	}
	if !slices.Equal(rc.Classes, want) {
		t.Errorf("resolved classes %+v, want %+v", rc.Classes, want)
	}
	// A trace's longest deadline bounds the run too.
	rc, err = resolve(Config{Target: "http://h", Classes: []Class{{Name: "a", Deadline: time.Second}},
		Trace: &workload.Trace{Calls: []workload.Call{{Deadline: time.Minute}, {}}}})
	if err != nil {
		t.Fatal(err)
	}
	if rc.maxDeadline != time.Minute {
		t.Errorf("max deadline with a trace = %v, want 1m", rc.maxDeadline)
	}
}

func TestPolicyTransportErrorIsConfigError(t *testing.T) {
	_, err := Run(t.Context(), Config{Target: "http://127.0.0.1:1", Rate: 1, MaxRequests: 1, Policy: Polite{Backoff: -1}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Policy" {
		t.Errorf("err = %v, want ConfigError for Policy", err)
	}
}
