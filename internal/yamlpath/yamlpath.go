// Package yamlpath decodes YAML into Go values by their yaml tags, naming
// every error by the YAML path of the field it is about
// ("retries.recognise.window", "traffic[1].bursts[0].for").
//
// It is how every sluice configuration is read — the gateway's file, the
// simulator's scenarios and the policy sections they share — so that a
// config error reads the same wherever it comes from. Compared with
// yaml.v3's own decoder (with KnownFields), which reports problems by line
// number:
//
//   - an unknown key is refused with the keys known at its place, and a
//     repeated key is refused too;
//   - a time.Duration is written as a Go duration string ("30s", "5m"); a
//     bare number is refused, since its unit would be a guess;
//   - an explicit null ("max_queue:" with nothing after it) is refused
//     rather than read as the zero value: a key written without its value
//     is a mistake, not a request for the default;
//   - validation errors of the decoded values, returned by their Validate
//     methods as *FieldError relative to their section, are placed at the
//     section's path with At.
//
// A type with its own UnmarshalYAML (yaml.Unmarshaler) decodes itself; its
// error is placed at its path. Struct fields tagged `yaml:",inline"` are
// read from the enclosing mapping, as yaml.v3 reads them.
package yamlpath

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// FieldError is an invalid field, named by its YAML path.
type FieldError struct {
	// Field is the YAML path: keys joined by dots, list items by [i].
	Field string
	// Problem says what is wrong with it.
	Problem string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return e.Field + ": " + e.Problem
}

// Errorf returns a *FieldError for field.
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// At places err at path: a *FieldError in it (a section's own validation,
// naming a field relative to the section) gets path in front of its field;
// any other error becomes the problem of path itself. A nil err stays nil.
func At(path string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: Join(path, fe.Field), Problem: fe.Problem}
	}
	return &FieldError{Field: path, Problem: err.Error()}
}

// Join joins a path and a key ("" on either side is left out). A key that
// starts with "[" (a list index) is joined without a dot.
func Join(path, key string) string {
	switch {
	case path == "":
		return key
	case key == "":
		return path
	case strings.HasPrefix(key, "["):
		return path + key
	}
	return path + "." + key
}

// Document parses data as one YAML document and returns its root node (the
// document's content, not the document node). An empty document is an
// error, and so is more than one.
func Document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the document is empty")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("want one YAML document, found more")
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("the document is empty")
	}
	return doc.Content[0], nil
}

// Unmarshal decodes the one YAML document in data into v, a pointer.
func Unmarshal(data []byte, v any) error {
	n, err := Document(data)
	if err != nil {
		return err
	}
	return Decode(n, "", v)
}

// Decode decodes n, found at path, into v, a non-nil pointer. Errors are
// *FieldError values naming the path of the field they are about.
func Decode(n *yaml.Node, path string, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("yamlpath: Decode wants a non-nil pointer, got %T", v)
	}
	return decode(n, path, rv.Elem())
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

func decode(n *yaml.Node, path string, v reflect.Value) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		if isNull(n) {
			return Errorf(where(path), "missing value (line %d)", n.Line)
		}
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			return At(where(path), err)
		}
		return nil
	}
	if v.Type() == durationType {
		s, err := scalar(n, path)
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return Errorf(where(path), "want a duration such as 1.5s or 200ms, got %q (line %d)", s, n.Line)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			return Errorf(where(path), "missing value (line %d)", n.Line)
		}
		p := reflect.New(v.Type().Elem())
		if err := decode(n, path, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		fields := map[string]reflect.Value{}
		collect(v, fields)
		return mapping(n, path, fields)
	case reflect.Map:
		return decodeMap(n, path, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return Errorf(where(path), "want a list (line %d)", n.Line)
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := decode(c, fmt.Sprintf("%s[%d]", path, i), s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	s, err := scalar(n, path)
	if err != nil {
		return err
	}
	if !setScalar(v, s) {
		return Errorf(where(path), "%q is not %s (line %d)", s, kindName(v.Kind()), n.Line)
	}
	return nil
}

// collect adds the fields of struct v by their yaml names, those of inline
// structs included.
func collect(v reflect.Value, fields map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			collect(v.Field(i), fields)
			continue
		}
		if name == "" {
			continue
		}
		fields[name] = v.Field(i)
	}
}

func mapping(n *yaml.Node, path string, fields map[string]reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return Errorf(where(path), "want a mapping of keys (line %d)", n.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, c := n.Content[i], n.Content[i+1]
		p := Join(path, k.Value)
		f, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			slices.Sort(known)
			return Errorf(p, "unknown key (line %d; known keys here: %s)", k.Line, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return Errorf(p, "given twice (line %d)", k.Line)
		}
		seen[k.Value] = true
		if err := decode(c, p, f); err != nil {
			return err
		}
	}
	return nil
}

// decodeMap decodes a mapping whose keys are names (of models, tenants,
// classes), not fields.
func decodeMap(n *yaml.Node, path string, v reflect.Value) error {
	if v.Type().Key().Kind() != reflect.String {
		return Errorf(where(path), "cannot be read: its keys are not names")
	}
	if n.Kind != yaml.MappingNode {
		return Errorf(where(path), "want a mapping of names (line %d)", n.Line)
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, c := n.Content[i], n.Content[i+1]
		key, err := scalar(k, path)
		if err != nil {
			return err
		}
		p := Join(path, key)
		kv := reflect.ValueOf(key).Convert(v.Type().Key())
		if m.MapIndex(kv).IsValid() {
			return Errorf(p, "given twice (line %d)", k.Line)
		}
		e := reflect.New(v.Type().Elem()).Elem()
		if err := decode(c, p, e); err != nil {
			return err
		}
		m.SetMapIndex(kv, e)
	}
	v.Set(m)
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func scalar(n *yaml.Node, path string) (string, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return "", Errorf(where(path), "want a single value (line %d)", n.Line)
	}
	if isNull(n) {
		return "", Errorf(where(path), "missing value (line %d)", n.Line)
	}
	return n.Value, nil
}

// setScalar parses s into v by v's kind, reporting false when it does not
// parse. Numbers may be written with underscores (1_000_000); a float must
// be finite.
func setScalar(v reflect.Value, s string) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		switch s {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			return false
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil || v.OverflowInt(n) {
			return false
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil || v.OverflowUint(n) {
			return false
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || v.OverflowFloat(f) {
			return false
		}
		v.SetFloat(f)
	default:
		return false
	}
	return true
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + k.String()
}

// where is path, or "the document" for the root.
func where(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}
