package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const minimalYAML = `
upstream:
  concurrency: 4
  service: {lognormal: {median: 1s, sigma: 0.5}}
classes:
  - {name: interactive, deadline: 10s}
traffic:
  - {class: interactive}
`

// TestScenarioErrorsNameTheField: bad input is refused with an error that
// names the field by its YAML path, never a panic and never a default.
func TestScenarioErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		name, yaml, field string
	}{
		{"unknown top-level key", minimalYAML + "colour: blue\n", "colour"},
		{"misspelt nested key", strings.Replace(minimalYAML, "concurrency", "concurency", 1), "upstream.concurency"},
		{"unknown key in a list item", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, clinet: naive}", 1), "traffic[0].clinet"},
		{"bare number for a duration", strings.Replace(minimalYAML, "median: 1s", "median: 1", 1), "upstream.service.lognormal.median"},
		{"not a duration", strings.Replace(minimalYAML, "deadline: 10s", "deadline: soon", 1), "classes[0].deadline"},
		{"not a number", strings.Replace(minimalYAML, "sigma: 0.5", "sigma: wide", 1), "upstream.service.lognormal.sigma"},
		{"sigma too large", strings.Replace(minimalYAML, "sigma: 0.5", "sigma: 9", 1), "upstream.service.lognormal.sigma"},
		{"zero concurrency", strings.Replace(minimalYAML, "concurrency: 4", "concurrency: 0", 1), "upstream.concurrency"},
		{"fractional concurrency", strings.Replace(minimalYAML, "concurrency: 4", "concurrency: 2.5", 1), "upstream.concurrency"},
		{"negative deadline", strings.Replace(minimalYAML, "deadline: 10s", "deadline: -1s", 1), "classes[0].deadline"},
		{"unknown class", strings.Replace(minimalYAML, "{class: interactive}", "{class: batchy}", 1), "traffic[0].class"},
		{"unknown client", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, client: rude}", 1), "traffic[0].client"},
		{"unknown tier", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, tier: gold}", 1), "traffic[0].tier"},
		{"negative share", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, share: -1}", 1), "traffic[0].share"},
		{"too many attempts", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, max_attempts: 99}", 1), "traffic[0].max_attempts"},
		{"percentage above 100", minimalYAML + "  - {class: interactive, steps: [{at: 150%, factor: 2}]}\n", "traffic[1].steps[0].at"},
		{"negative rate factor", minimalYAML + "  - {class: interactive, bursts: [{at: 10s, for: 5s, factor: -2}]}\n", "traffic[1].bursts[0].factor"},
		{"empty burst", minimalYAML + "  - {class: interactive, bursts: [{at: 10s, for: 0s, factor: 2}]}\n", "traffic[1].bursts[0].for"},
		{"unknown policy", minimalYAML + "policies: [fifo, magic]\n", "policies[1]"},
		{"zero load", minimalYAML + "loads: [1, 0]\n", "loads[1]"},
		{"both distributions", strings.Replace(minimalYAML, "service: {lognormal: {median: 1s, sigma: 0.5}}", "service: {lognormal: {median: 1s}, empirical: [1s]}", 1), "upstream.service"},
		{"no distribution", strings.Replace(minimalYAML, "service: {lognormal: {median: 1s, sigma: 0.5}}", "service: {}", 1), "upstream.service"},
		{"empirical sample not positive", strings.Replace(minimalYAML, "service: {lognormal: {median: 1s, sigma: 0.5}}", "service: {empirical: [1s, 0s]}", 1), "upstream.service.empirical[1]"},
		{"duplicate class", strings.Replace(minimalYAML, "  - {name: interactive, deadline: 10s}", "  - {name: interactive, deadline: 10s}\n  - {name: interactive, deadline: 5s}", 1), "classes[1].name"},
		{"custom class without rank", strings.Replace(minimalYAML, "{name: interactive, deadline: 10s}", "{name: chat, deadline: 10s}", 1), "classes[0].rank"},
		{"rank out of range", strings.Replace(minimalYAML, "{name: interactive, deadline: 10s}", "{name: interactive, deadline: 10s, rank: 16}", 1), "classes[0].rank"},
		{"key given twice", minimalYAML + "seed: 1\nseed: 2\n", "seed"},
		{"missing value", minimalYAML + "requests:\n", "requests"},
		{"a list where a mapping belongs", minimalYAML + "sluice: [1, 2]\n", "sluice"},
		{"a mapping where a value belongs", minimalYAML + "seed: {a: 1}\n", "seed"},
		{"no classes", strings.Replace(minimalYAML, "  - {name: interactive, deadline: 10s}\n", "", 1) + "", "classes"},
		{"every source fixed", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, load: 1}", 1), "traffic"},
		{"bad retry budget", minimalYAML + "sluice: {retry_budget: {ratio: 2}}\n", "sluice.retry_budget.ratio"},
		{"negative tenant weight", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, tenant: a}", 1) + "sluice: {tenants: {a: {weight: -1}}}\n", "sluice.tenants.a.weight"},
		{"queue share above 1", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, tenant: a}", 1) + "sluice: {tenants: {a: {queue_share: 2}}}\n", "sluice.tenants.a.queue_share"},
		{"negative tenant cap", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, tenant: a}", 1) + "sluice: {tenants: {a: {max_concurrency: -1}}}\n", "sluice.tenants.a.max_concurrency"},
		{"tenant not in the traffic", minimalYAML + "sluice: {tenants: {b: {weight: 2}}}\n", "sluice.tenants.b"},
		{"bad timeseries policy", minimalYAML + "timeseries: {policies: [nope]}\n", "timeseries.policies[0]"},
		{"unknown headers", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, headers: some}", 1), "traffic[0].headers"},
		{"same_prompt not a bool", strings.Replace(minimalYAML, "{class: interactive}", "{class: interactive, same_prompt: 2}", 1), "traffic[0].same_prompt"},
		{"negative recognise window", minimalYAML + "sluice: {recognise: {window: -1s}}\n", "sluice.recognise.window"},
		{"zero recognise entries", minimalYAML + "sluice: {recognise: {max_entries: 0}}\n", "sluice.recognise.max_entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a *FieldError naming %s", err, c.field)
			}
			if fe.Field != c.field {
				t.Fatalf("error names %q, want %q: %v", fe.Field, c.field, err)
			}
		})
	}
}

func TestScenarioSyntaxErrors(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "a: [1, 2\n", minimalYAML + "---\nname: two\n"} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestTimePoints(t *testing.T) {
	for in, want := range map[string]string{"90s": "1m30s", "50%": "50%", "0%": "0%", "100%": "100%", "1.5h": "1h30m0s"} {
		p, err := ParseTimePoint(in)
		if err != nil || p.String() != want {
			t.Errorf("%q: %v %v, want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "50", "-1s", "101%", "x%", "NaN%"} {
		if _, err := ParseTimePoint(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// TestRepositoryScenariosLoad keeps the scenario files in the repository
// valid, and named after their files.
func TestRepositoryScenariosLoad(t *testing.T) {
	files, err := filepath.Glob("../../scenarios/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("scenario files: %v %v", files, err)
	}
	for _, f := range files {
		sc, err := Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); sc.Name != want {
			t.Errorf("%s: name %q, want %q", f, sc.Name, want)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(path, []byte(minimalYAML+"seed: minus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("error %v should name the file and the field", err)
	}
	if err := os.WriteFile(path, []byte(minimalYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := Load(path)
	if err != nil || sc.Name != "mine" {
		t.Fatalf("%v %v", sc, err)
	}
}
