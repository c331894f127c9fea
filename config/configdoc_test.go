package config

import (
	"bufio"
	"encoding"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestConfigDocNamesEveryKey holds docs/configuration.md to the config's
// YAML schema: the keys a config file may hold, found by reflection from
// Config over the yaml tags, are exactly the backticked paths that start
// the reference's table rows, each once. A key added without a row, a row
// left behind by a key renamed or removed, and a key documented twice
// fail it. It depends on the shape of the YAML, not on the names of the Go
// types behind it, so types may move between packages freely.
func TestConfigDocNamesEveryKey(t *testing.T) {
	keys := configKeyPaths(reflect.TypeFor[Config]())
	if len(keys) == 0 {
		t.Fatal("no keys found in Config")
	}
	rows, err := configDocRows("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}

	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	count := map[string]int{}
	for _, r := range rows {
		count[r]++
	}
	var missing, unknown, twice []string
	for _, k := range keys {
		if count[k] == 0 {
			missing = append(missing, k)
		}
	}
	for r, n := range count {
		if !want[r] {
			unknown = append(unknown, r)
		} else if n > 1 {
			twice = append(twice, r)
		}
	}
	sort.Strings(unknown)
	sort.Strings(twice)
	if len(missing)+len(unknown)+len(twice) > 0 {
		var b strings.Builder
		if len(missing) > 0 {
			b.WriteString("\nkeys of Config with no row in docs/configuration.md:\n\t" + strings.Join(missing, "\n\t"))
		}
		if len(unknown) > 0 {
			b.WriteString("\nrows of docs/configuration.md that name no key of Config:\n\t" + strings.Join(unknown, "\n\t"))
		}
		if len(twice) > 0 {
			b.WriteString("\nkeys with more than one row in docs/configuration.md:\n\t" + strings.Join(twice, "\n\t"))
		}
		t.Errorf("docs/configuration.md does not match Config (%d keys, %d rows):%s", len(keys), len(rows), b.String())
	}
}

// configDocRows returns the backticked path that starts each table row of
// the Markdown file at path, in order, repeats included.
func configDocRows(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	row := regexp.MustCompile("^\\|\\s*`([^`]+)`")
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m[1])
		}
	}
	return out, sc.Err()
}

// configKeyPaths lists every key a YAML document decoded into a value of
// type root may hold, as a dotted path in the order of the fields: a list
// of mappings adds "[]" to its key (tenants[].name), a mapping keyed by
// names the caller chooses adds "<name>" (classes.<name>.rank). A key is
// listed whether it holds a value or a section; the sections' own entries
// follow it. The walk stops at what YAML reads as one value: a scalar, a
// list or mapping of scalars, and any type that decodes itself
// (an UnmarshalYAML or UnmarshalText method), such as a duration.
func configKeyPaths(root reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, prefix string, seen map[reflect.Type]bool) {
		t = deref(t)
		if t.Kind() != reflect.Struct || decodesItself(t) || seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if strings.Contains(opts, "inline") {
				walk(f.Type, prefix, seen)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name) // yaml's default key
			}
			path := prefix + name
			out = append(out, path)
			ft := deref(f.Type)
			if decodesItself(ft) {
				continue
			}
			switch ft.Kind() {
			case reflect.Struct:
				walk(ft, path+".", seen)
			case reflect.Slice, reflect.Array:
				walk(ft.Elem(), path+"[].", seen)
			case reflect.Map:
				if ft.Key().Kind() == reflect.String {
					walk(ft.Elem(), path+".<name>.", seen)
				}
			}
		}
	}
	walk(root, "", map[reflect.Type]bool{})
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// decodesItself reports whether YAML hands a node of type t to t's own
// method rather than to its fields: yaml.Unmarshaler, the obsolete
// func-based form of it, and encoding.TextUnmarshaler.
func decodesItself(t reflect.Type) bool {
	for _, tt := range []reflect.Type{t, reflect.PointerTo(t)} {
		if _, ok := tt.MethodByName("UnmarshalYAML"); ok {
			return true
		}
		if tt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
			return true
		}
	}
	return false
}

// TestConfigKeyPathsWalk pins the walk's rules on a type of its own.
func TestConfigKeyPathsWalk(t *testing.T) {
	type leaf struct {
		A int `yaml:"a"`
	}
	type inline struct {
		I string `yaml:"i"`
	}
	type root struct {
		Plain    string              `yaml:"plain"`
		Dur      Duration            `yaml:"dur"`
		DurPtr   *Duration           `yaml:"dur_ptr"`
		Sect     leaf                `yaml:"sect"`
		Ptr      *leaf               `yaml:"ptr"`
		List     []leaf              `yaml:"list"`
		PtrList  []*leaf             `yaml:"ptr_list"`
		Names    []string            `yaml:"names"`
		ByName   map[string]leaf     `yaml:"by_name"`
		Ladder   map[string]string   `yaml:"ladder"`
		Routes   map[string][]string `yaml:"routes"`
		Skipped  int                 `yaml:"-"`
		Untagged int
		Inline   inline `yaml:",inline"`
		hidden   int
	}
	got := configKeyPaths(reflect.TypeFor[root]())
	want := []string{
		"plain", "dur", "dur_ptr",
		"sect", "sect.a",
		"ptr", "ptr.a",
		"list", "list[].a",
		"ptr_list", "ptr_list[].a",
		"names",
		"by_name", "by_name.<name>.a",
		"ladder", "routes",
		"untagged",
		"i",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("configKeyPaths:\n got %q\nwant %q", got, want)
	}
	_ = root{}.hidden
}
