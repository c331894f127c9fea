package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/spend"
)

// The scenario is decoded by walking the YAML node tree by hand rather than
// by yaml.Unmarshal into tagged structs: every error then carries the full
// path of the field it is about ("traffic[1].bursts[0].for"), an unknown or
// repeated key is refused with the keys that are known, and a bare number
// where a duration is due is refused instead of being read as nanoseconds.

// LoadScenario reads and validates a scenario file. A scenario without a
// name takes the file's base name without extension.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// ParseScenario decodes and validates a scenario. Errors are *FieldError
// values naming the YAML path, YAML syntax errors, or the spend package's
// own validation errors, which name their field as spend.<path> too.
func ParseScenario(data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("scenario is empty")
		}
		return nil, fmt.Errorf("scenario: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("scenario: want one YAML document, found more")
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("scenario is empty")
	}
	s := &Scenario{}
	if err := decodeScenario(doc.Content[0], s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

type fieldFunc func(v *yaml.Node, path string) error

func decodeScenario(n *yaml.Node, s *Scenario) error {
	return mapping(n, "", map[string]fieldFunc{
		"name":        str(&s.Name),
		"description": str(&s.Description),
		"seed":        uintField(&s.Seed),
		"requests":    intField(&s.Requests),
		"loads":       floats(&s.Loads),
		"policies":    strs(&s.Policies),
		"upstream": func(v *yaml.Node, p string) error {
			return mapping(v, p, map[string]fieldFunc{
				"concurrency":   intField(&s.Upstream.Concurrency),
				"cost_per_call": float(&s.Upstream.CostPerCall),
				"steps":         upstreamSteps(&s.Upstream.Steps),
				"models": func(v *yaml.Node, p string) error {
					s.Upstream.Models = map[string]Model{}
					return keyed(v, p, func(name string, v *yaml.Node, p string) error {
						var m Model
						err := mapping(v, p, map[string]fieldFunc{
							"service_factor": float(&m.ServiceFactor),
							"concurrency":    intField(&m.Concurrency),
							"rpm":            int64Field(&m.RPM),
							"tpm":            int64Field(&m.TPM),
						})
						s.Upstream.Models[name] = m
						return err
					})
				},
				"service": func(v *yaml.Node, p string) error {
					sv := &s.Upstream.Service
					return mapping(v, p, map[string]fieldFunc{
						"empirical": durations(&sv.Empirical),
						"lognormal": func(v *yaml.Node, p string) error {
							sv.Lognormal = &Lognormal{}
							return mapping(v, p, map[string]fieldFunc{
								"median": duration(&sv.Lognormal.Median),
								"sigma":  float(&sv.Lognormal.Sigma),
							})
						},
					})
				},
			})
		},
		"classes": sequence(func(v *yaml.Node, p string) error {
			var c Class
			err := mapping(v, p, map[string]fieldFunc{
				"name":     str(&c.Name),
				"deadline": duration(&c.Deadline),
				"rank": func(v *yaml.Node, p string) error {
					c.Rank = new(int)
					return intField(c.Rank)(v, p)
				},
			})
			s.Classes = append(s.Classes, c)
			return err
		}),
		"traffic": sequence(func(v *yaml.Node, p string) error {
			var src Source
			err := mapping(v, p, map[string]fieldFunc{
				"name":            str(&src.Name),
				"class":           str(&src.Class),
				"tenant":          str(&src.Tenant),
				"tier":            str(&src.Tier),
				"share":           float(&src.Share),
				"load":            float(&src.Load),
				"client":          str(&src.Client),
				"max_attempts":    intField(&src.MaxAttempts),
				"attempt_timeout": duration(&src.AttemptTimeout),
				"steps":           steps(&src.Steps),
				"bursts": sequence(func(v *yaml.Node, p string) error {
					var b Burst
					err := mapping(v, p, map[string]fieldFunc{
						"at":     timePoint(&b.At),
						"for":    timePoint(&b.For),
						"factor": float(&b.Factor),
					})
					src.Bursts = append(src.Bursts, b)
					return err
				}),
				"cost_per_call": float(&src.CostPerCall),
				"model":         str(&src.Model),
				"input_tokens":  int64Field(&src.InputTokens),
				"output_tokens": int64Field(&src.OutputTokens),
				"max_tokens":    int64Field(&src.MaxTokens),
				"headers":       str(&src.Headers),
				"same_prompt":   boolField(&src.SamePrompt),
				"replica": func(v *yaml.Node, p string) error {
					src.Replica = new(int)
					return intField(src.Replica)(v, p)
				},
			})
			s.Traffic = append(s.Traffic, src)
			return err
		}),
		"baselines": func(v *yaml.Node, p string) error {
			b := &s.Baselines
			return mapping(v, p, map[string]fieldFunc{
				"depth_threshold": intField(&b.DepthThreshold),
				"queue_timeout":   duration(&b.QueueTimeout),
				"small_queue":     intField(&b.SmallQueue),
			})
		},
		"sluice": func(v *yaml.Node, p string) error {
			sl := &s.Sluice
			return mapping(v, p, map[string]fieldFunc{
				"max_queue":            intField(&sl.MaxQueue),
				"max_queue_per_tenant": intField(&sl.MaxQueuePerTenant),
				"initial_service_time": duration(&sl.InitialServiceTime),
				"tenants": func(v *yaml.Node, p string) error {
					return keyed(v, p, func(name string, v *yaml.Node, p string) error {
						var tc SimTenant
						err := mapping(v, p, map[string]fieldFunc{
							"weight":          float(&tc.Weight),
							"max_concurrency": intField(&tc.MaxConcurrency),
							"queue_share":     float(&tc.QueueShare),
						})
						if sl.Tenants == nil {
							sl.Tenants = map[string]SimTenant{}
						}
						sl.Tenants[name] = tc
						return err
					})
				},
				"retry_budget": func(v *yaml.Node, p string) error {
					rb := &sl.RetryBudget
					return mapping(v, p, map[string]fieldFunc{
						"ratio":          float(&rb.Ratio),
						"min_per_second": float(&rb.MinPerSecond),
						"max_tokens":     float(&rb.MaxTokens),
					})
				},
				"degrade": func(v *yaml.Node, p string) error {
					d := &DegradeConfig{}
					sl.Degrade = d
					return mapping(v, p, map[string]fieldFunc{
						"ladder": func(v *yaml.Node, p string) error {
							d.Ladder = map[string]string{}
							return keyed(v, p, func(name string, v *yaml.Node, p string) error {
								var to string
								err := str(&to)(v, p)
								d.Ladder[name] = to
								return err
							})
						},
						"classes": strs(&d.Classes),
					})
				},
				"recognise": func(v *yaml.Node, p string) error {
					rc := &sl.Recognise
					return mapping(v, p, map[string]fieldFunc{
						"disabled": boolField(&rc.Disabled),
						"window":   duration(&rc.Window),
						"max_entries": func(v *yaml.Node, p string) error {
							rc.MaxEntries = new(int)
							return intField(rc.MaxEntries)(v, p)
						},
					})
				},
			})
		},
		"spend": func(v *yaml.Node, p string) error {
			s.Spend = &spend.Config{}
			return tagged(v, p, reflect.ValueOf(s.Spend).Elem())
		},
		"replicas": func(v *yaml.Node, p string) error {
			r := &Replicas{}
			s.Replicas = r
			return mapping(v, p, map[string]fieldFunc{
				"count":          intField(&r.Count),
				"lease_interval": duration(&r.LeaseInterval),
			})
		},
		"timeseries": func(v *yaml.Node, p string) error {
			ts := &Timeseries{}
			s.Timeseries = ts
			return mapping(v, p, map[string]fieldFunc{
				"load":     float(&ts.Load),
				"policies": strs(&ts.Policies),
				"bucket":   duration(&ts.Bucket),
			})
		},
	})
}

// upstreamSteps are service-time steps, which may name a model.
func upstreamSteps(dst *[]Step) fieldFunc {
	return sequence(func(v *yaml.Node, p string) error {
		var st Step
		err := mapping(v, p, map[string]fieldFunc{
			"at":     timePoint(&st.At),
			"factor": float(&st.Factor),
			"model":  str(&st.Model),
		})
		*dst = append(*dst, st)
		return err
	})
}

func steps(dst *[]Step) fieldFunc {
	return sequence(func(v *yaml.Node, p string) error {
		var st Step
		err := mapping(v, p, map[string]fieldFunc{
			"at":     timePoint(&st.At),
			"factor": float(&st.Factor),
		})
		*dst = append(*dst, st)
		return err
	})
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func mapping(n *yaml.Node, path string, fields map[string]fieldFunc) error {
	where := path
	if where == "" {
		where = "scenario"
	}
	if n.Kind != yaml.MappingNode {
		return ferr(where, "want a mapping of keys (line %d)", n.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		fn, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			slices.Sort(known)
			return ferr(p, "unknown key (line %d; known keys here: %s)", k.Line, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return ferr(p, "given twice (line %d)", k.Line)
		}
		seen[k.Value] = true
		if err := fn(v, p); err != nil {
			return err
		}
	}
	return nil
}

// keyed walks a mapping whose keys are names (of models, tenants), not
// fields.
func keyed(n *yaml.Node, path string, item func(key string, v *yaml.Node, path string) error) error {
	if n.Kind != yaml.MappingNode {
		return ferr(path, "want a mapping of names (line %d)", n.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, err := scalar(k, path)
		if err != nil {
			return err
		}
		p := join(path, key)
		if seen[key] {
			return ferr(p, "given twice (line %d)", k.Line)
		}
		seen[key] = true
		if err := item(key, v, p); err != nil {
			return err
		}
	}
	return nil
}

// tagged decodes n into v by the yaml tags of v's type, as yaml.v3 with
// KnownFields would — the same keys, types and custom unmarshalers (such
// as spend.Duration's) — but naming every error by its YAML path, as the
// rest of the scenario does. It is how the spend section is read into the
// gateway's own spend.Config, with no second description of its schema.
func tagged(n *yaml.Node, path string, v reflect.Value) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if u, ok := v.Addr().Interface().(yaml.Unmarshaler); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			return ferr(path, "%v", err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			return ferr(path, "missing value (line %d)", n.Line)
		}
		v.Set(reflect.New(v.Type().Elem()))
		return tagged(n, path, v.Elem())
	case reflect.Struct:
		fields := map[string]fieldFunc{}
		t := v.Type()
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !t.Field(i).IsExported() {
				continue
			}
			f := v.Field(i)
			fields[name] = func(c *yaml.Node, p string) error { return tagged(c, p, f) }
		}
		return mapping(n, path, fields)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return ferr(path, "cannot be read: its keys are not names")
		}
		m := reflect.MakeMap(v.Type())
		v.Set(m)
		return keyed(n, path, func(key string, c *yaml.Node, p string) error {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := tagged(c, p, e); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), e)
			return nil
		})
	}
	s, err := scalar(n, path)
	if err != nil {
		return err
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return ferr(path, "%q is not %s (line %d)", s, kindName(v.Kind()), n.Line)
	}
	return nil
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + k.String()
}

func sequence(item fieldFunc) fieldFunc {
	return func(v *yaml.Node, p string) error {
		if v.Kind != yaml.SequenceNode {
			return ferr(p, "want a list (line %d)", v.Line)
		}
		for i, c := range v.Content {
			if err := item(c, fmt.Sprintf("%s[%d]", p, i)); err != nil {
				return err
			}
		}
		return nil
	}
}

func scalar(v *yaml.Node, p string) (string, error) {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v.Kind != yaml.ScalarNode {
		return "", ferr(p, "want a single value (line %d)", v.Line)
	}
	if v.Tag == "!!null" {
		return "", ferr(p, "missing value (line %d)", v.Line)
	}
	return v.Value, nil
}

func str(dst *string) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		*dst = s
		return err
	}
}

func boolField(dst *bool) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		if err != nil {
			return err
		}
		switch s {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			return ferr(p, "%q is not true or false (line %d)", s, v.Line)
		}
		return nil
	}
}

func strs(dst *[]string) fieldFunc {
	return sequence(func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		*dst = append(*dst, s)
		return err
	})
}

func float(dst *float64) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return ferr(p, "%q is not a number (line %d)", s, v.Line)
		}
		*dst = f
		return nil
	}
}

func floats(dst *[]float64) fieldFunc {
	return sequence(func(v *yaml.Node, p string) error {
		var f float64
		err := float(&f)(v, p)
		*dst = append(*dst, f)
		return err
	})
}

func intField(dst *int) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			n, err = strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
		}
		if err != nil || n != int64(int(n)) {
			return ferr(p, "%q is not a whole number (line %d)", s, v.Line)
		}
		*dst = int(n)
		return nil
	}
}

func int64Field(dst *int64) fieldFunc {
	return func(v *yaml.Node, p string) error {
		var n int
		if err := intField(&n)(v, p); err != nil {
			return err
		}
		*dst = int64(n)
		return nil
	}
}

func uintField(dst *uint64) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		if err != nil {
			return err
		}
		n, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil {
			return ferr(p, "%q is not a non-negative whole number (line %d)", s, v.Line)
		}
		*dst = n
		return nil
	}
}

func duration(dst *time.Duration) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return ferr(p, "want a duration such as 1.5s or 200ms, got %q (line %d)", s, v.Line)
		}
		*dst = d
		return nil
	}
}

func durations(dst *[]time.Duration) fieldFunc {
	return sequence(func(v *yaml.Node, p string) error {
		var d time.Duration
		err := duration(&d)(v, p)
		*dst = append(*dst, d)
		return err
	})
}

func timePoint(dst *TimePoint) fieldFunc {
	return func(v *yaml.Node, p string) error {
		s, err := scalar(v, p)
		if err != nil {
			return err
		}
		tp, err := ParseTimePoint(s)
		if err != nil {
			return ferr(p, "%v (line %d)", err, v.Line)
		}
		*dst = tp
		return nil
	}
}
