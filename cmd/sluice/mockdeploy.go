package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/mockllm"
)

// mockDeploymentsFile is the --deployments file: several mock providers,
// each on its own address, so that a test or a demo can run a primary and
// a secondary (or a fast and a slow region) from one process.
//
//	deployments:
//	  - name: primary
//	    listen: 127.0.0.1:9001
//	    latency_factor: 1
//	    models:
//	      gpt-4o-mini: {latency_factor: 0.5, rpm: 600, tpm: 200000}
//	  - name: secondary
//	    listen: 127.0.0.1:9002
//	    latency_factor: 4
//
// A field a deployment leaves out takes the value of the matching flag
// (or its default).
type mockDeploymentsFile struct {
	Deployments []mockDeploymentSpec `yaml:"deployments"`
}

type mockDeploymentSpec struct {
	Name   string `yaml:"name"`
	Listen string `yaml:"listen"`
	// LatencyFactor multiplies the deployment's median service time: 4 is
	// a deployment four times slower than the flags describe.
	LatencyFactor *float64                     `yaml:"latency_factor"`
	Slots         *int                         `yaml:"slots"`
	Mode          *string                      `yaml:"mode"`
	Median        *time.Duration               `yaml:"median"`
	Sigma         *float64                     `yaml:"sigma"`
	StepAt        *time.Duration               `yaml:"step_at"`
	StepFactor    *float64                     `yaml:"step_factor"`
	OutputTokens  *int                         `yaml:"output_tokens"`
	RetryAfter    *time.Duration               `yaml:"retry_after"`
	ErrorRate     *float64                     `yaml:"error_rate"`
	HangRate      *float64                     `yaml:"hang_rate"`
	ResetRate     *float64                     `yaml:"reset_rate"`
	AbortOnDisc   *bool                        `yaml:"abort_on_disconnect"`
	Seed          *uint64                      `yaml:"seed"`
	Models        map[string]mockllm.ModelSpec `yaml:"models"`
}

var deploymentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// mockDeploymentFields maps mockllm.Config fields to the keys of a
// deployment.
var mockDeploymentFields = map[string]string{
	"Slots": "slots", "Mode": "mode", "Median": "median", "Sigma": "sigma", "StepAt": "step_at",
	"StepFactor": "step_factor", "OutputTokens": "output_tokens", "RetryAfter": "retry_after",
	"ErrorRate": "error_rate", "HangRate": "hang_rate", "ResetRate": "reset_rate",
}

// loadMockDeployments reads a --deployments file; base is the
// configuration the flags describe. Every error names the file and the
// field (deployments[i].key).
func loadMockDeployments(path string, base mockllm.Config) ([]mockDeployment, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("--deployments: %s: %s", path, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--deployments: %v", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var file mockDeploymentsFile
	if err := dec.Decode(&file); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail("empty")
		}
		return nil, fail("%v", err)
	}
	if len(file.Deployments) == 0 {
		return nil, fail("deployments: at least one deployment is required")
	}
	seen := map[string]int{}
	out := make([]mockDeployment, 0, len(file.Deployments))
	for i, d := range file.Deployments {
		at := fmt.Sprintf("deployments[%d]", i)
		if !deploymentName.MatchString(d.Name) {
			return nil, fail("%s.name: want 1-64 letters, digits, '.', '_' or '-', got %q", at, d.Name)
		}
		if j, dup := seen[d.Name]; dup {
			return nil, fail("%s.name: %q is already deployments[%d]", at, d.Name, j)
		}
		seen[d.Name] = i
		if _, _, err := net.SplitHostPort(d.Listen); err != nil {
			return nil, fail("%s.listen: want host:port, got %q", at, d.Listen)
		}
		cfg := base
		setIf(&cfg.Slots, d.Slots)
		if d.Mode != nil {
			cfg.Mode = mockllm.Mode(*d.Mode)
		}
		setIf(&cfg.Median, d.Median)
		setIf(&cfg.Sigma, d.Sigma)
		setIf(&cfg.StepAt, d.StepAt)
		setIf(&cfg.StepFactor, d.StepFactor)
		setIf(&cfg.OutputTokens, d.OutputTokens)
		setIf(&cfg.RetryAfter, d.RetryAfter)
		setIf(&cfg.ErrorRate, d.ErrorRate)
		setIf(&cfg.HangRate, d.HangRate)
		setIf(&cfg.ResetRate, d.ResetRate)
		setIf(&cfg.AbortOnDisconnect, d.AbortOnDisc)
		setIf(&cfg.Seed, d.Seed)
		if d.Models != nil {
			cfg.Models = d.Models
		}
		if lf := d.LatencyFactor; lf != nil {
			if !(*lf > 0 && *lf <= 1000) {
				return nil, fail("%s.latency_factor: must be in (0, 1000], got %v", at, *lf)
			}
			cfg.Median = time.Duration(float64(cfg.Median) * *lf)
		}
		if err := cfg.Validate(); err != nil {
			var ce *mockllm.ConfigError
			if !errors.As(err, &ce) {
				return nil, fail("%s: %v", at, err)
			}
			key, reason := ce.Field, ce.Reason
			if k, ok := mockDeploymentFields[key]; ok {
				key = k
			} else if m, ok := strings.CutPrefix(key, "Models"); ok {
				key = "models" + m
			}
			for g, y := range mockDeploymentFields {
				reason = strings.ReplaceAll(reason, g, y)
			}
			return nil, fail("%s.%s: %s", at, key, reason)
		}
		out = append(out, mockDeployment{name: d.Name, listen: d.Listen, cfg: cfg})
	}
	return out, nil
}

// setIf copies *v into *dst when v is given.
func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
