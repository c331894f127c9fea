package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/internal/yamlpath"
	"github.com/sluicehq/sluice/workload"
)

// Load reads and validates a scenario file. A scenario without a
// name takes the file's base name without extension.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// readTrace reads a scenario's trace_file, relative to the scenario's
// directory dir.
func (s *Scenario) readTrace(dir string) error {
	if s.TraceFile == "" {
		return nil
	}
	p := s.TraceFile
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	t, err := workload.ReadFile(p)
	if err != nil {
		return ferr("trace_file", "%v", err)
	}
	s.Trace = t
	return nil
}

// Parse decodes and validates a scenario. The scenario is read by
// its yaml tags with package yamlpath, as every sluice configuration is:
// an unknown or repeated key is refused with the keys that are known, a
// bare number where a duration is due is refused instead of being read as
// nanoseconds, and every error is a *FieldError naming the YAML path of
// its field ("traffic[1].bursts[0].for"), the sections shared with the
// gateway (spend, sluice.tenants, sluice.retry_budget, sluice.recognise)
// included. A trace_file is read relative to the working directory (Load
// reads it relative to the scenario file).
func Parse(data []byte) (*Scenario, error) { return parse(data, ".") }

func parse(data []byte, dir string) (*Scenario, error) {
	n, err := yamlpath.Document(data)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s := &Scenario{}
	if err := yamlpath.Decode(n, "", s); err != nil {
		return nil, err
	}
	if err := s.readTrace(dir); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}
