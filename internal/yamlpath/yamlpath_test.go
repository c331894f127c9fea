package yamlpath

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type inner struct {
	Window  time.Duration `yaml:"window"`
	Entries *int          `yaml:"max_entries"`
}

type share struct {
	Weight float64 `yaml:"weight"`
}

type tenant struct {
	Name  string `yaml:"name"`
	share `yaml:",inline"`
	skip  int //nolint:unused // unexported fields are not keys
}

type doc struct {
	Name    string            `yaml:"name"`
	Seed    uint64            `yaml:"seed"`
	Count   int               `yaml:"count"`
	On      bool              `yaml:"on"`
	Inner   inner             `yaml:"inner"`
	Tenants []tenant          `yaml:"tenants"`
	Ladder  map[string]string `yaml:"ladder"`
	Loads   []float64         `yaml:"loads"`
	Custom  custom            `yaml:"custom"`
	Ignored int               `yaml:"-"`
}

// custom decodes itself and refuses "bad".
type custom string

func (c *custom) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "bad" {
		return fmt.Errorf("line %d: not good", n.Line)
	}
	*c = custom(n.Value)
	return nil
}

func TestDecodeReadsEveryShape(t *testing.T) {
	src := `
name: x
seed: 18_446_744_073_709_551_615
count: 1_000
on: true
inner: {window: 1.5s, max_entries: 0}
tenants: [{name: a, weight: 2}, {name: b}]
ladder: {big: small}
loads: [0.5, 2]
custom: fine
`
	var d doc
	if err := Unmarshal([]byte(src), &d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "x" || d.Seed != 1<<64-1 || d.Count != 1000 || !d.On {
		t.Errorf("scalars: %+v", d)
	}
	if d.Inner.Window != 1500*time.Millisecond || d.Inner.Entries == nil || *d.Inner.Entries != 0 {
		t.Errorf("inner: %+v", d.Inner)
	}
	if len(d.Tenants) != 2 || d.Tenants[0].Name != "a" || d.Tenants[0].Weight != 2 || d.Tenants[1].Weight != 0 {
		t.Errorf("tenants (inline weight): %+v", d.Tenants)
	}
	if d.Ladder["big"] != "small" || len(d.Loads) != 2 || d.Loads[1] != 2 || d.Custom != "fine" {
		t.Errorf("ladder %v loads %v custom %q", d.Ladder, d.Loads, d.Custom)
	}
	var absent doc
	if err := Unmarshal([]byte("name: y\n"), &absent); err != nil || absent.Inner.Entries != nil {
		t.Errorf("an absent pointer stays nil: %v %+v", err, absent.Inner)
	}
}

func TestDecodeNamesTheField(t *testing.T) {
	for _, tc := range []struct{ src, field, problem string }{
		{"nmae: x\n", "nmae", "unknown key (line 1; known keys here: count, custom, inner, ladder, loads, name, on, seed, tenants)"},
		{"name: x\nname: y\n", "name", "given twice"},
		{"inner: {window: 30}\n", "inner.window", `want a duration such as 1.5s or 200ms, got "30"`},
		{"inner:\n  max_entries:\n", "inner.max_entries", "missing value"},
		{"count: two\n", "count", `"two" is not a whole number`},
		{"seed: -1\n", "seed", "is not a non-negative whole number"},
		{"on: yes\n", "on", "is not true or false"},
		{"loads: [1, .nan]\n", "loads[1]", "is not a number"},
		{"tenants: [{name: a}, {name: b, wieght: 1}]\n", "tenants[1].wieght", "unknown key"},
		{"tenants: {name: a}\n", "tenants", "want a list"},
		{"ladder: {a: b, a: c}\n", "ladder.a", "given twice"},
		{"ladder: [a]\n", "ladder", "want a mapping of names"},
		{"inner: [1]\n", "inner", "want a mapping of keys"},
		{"name: [x]\n", "name", "want a single value"},
		{"custom: bad\n", "custom", "line 1: not good"},
		{"skip: 1\n", "skip", "unknown key"},
		{"- 1\n", "the document", "want a mapping of keys"},
	} {
		var d doc
		err := Unmarshal([]byte(tc.src), &d)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%q: error %v, want a *FieldError", tc.src, err)
			continue
		}
		if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
			t.Errorf("%q: %q at %q, want %q at %q", tc.src, fe.Problem, fe.Field, tc.problem, tc.field)
		}
	}
}

func TestDocumentIsOne(t *testing.T) {
	for _, src := range []string{"", "a: 1\n---\nb: 2\n", "a: [\n"} {
		if _, err := Document([]byte(src)); err == nil {
			t.Errorf("%q: no error", src)
		}
	}
}

func TestAtPlacesSectionErrors(t *testing.T) {
	if err := At("retries", nil); err != nil {
		t.Errorf("At of nil: %v", err)
	}
	got := At("retries.recognise", Errorf("window", "2h is out of range"))
	if got.Error() != "retries.recognise.window: 2h is out of range" {
		t.Errorf("relative field: %v", got)
	}
	got = At("tenants", At("[2]", Errorf("weight", "-1")))
	if got.Error() != "tenants[2].weight: -1" {
		t.Errorf("list index: %v", got)
	}
	got = At("spend", errors.New("rate_window: too short"))
	if got.Error() != "spend: rate_window: too short" {
		t.Errorf("plain error: %v", got)
	}
}

func TestDecodeWantsAPointer(t *testing.T) {
	n, err := Document([]byte("a: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Decode(n, "", doc{}); err == nil {
		t.Error("a struct value was accepted")
	}
}
