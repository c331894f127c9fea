package gateway

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yaml.v3 reports type errors by line ("line 4: cannot unmarshal !!str `two`
// into int"). A config error must name the field, so each such line is
// mapped back to the key path of the value it is about.

var yamlLineError = regexp.MustCompile("^line (\\d+): (.*)$")
var yamlQuoted = regexp.MustCompile("`([^`]*)`")

// namedYAMLError rewrites the decode error's lines to start with the path of
// the offending key.
func namedYAMLError(root *yaml.Node, err error) error {
	var lines []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines = te.Errors
	} else {
		lines = []string{err.Error()}
	}
	var out []string
	for _, l := range lines {
		m := yamlLineError.FindStringSubmatch(strings.TrimPrefix(l, "yaml: "))
		if m == nil {
			out = append(out, l)
			continue
		}
		line, _ := strconv.Atoi(m[1])
		value := ""
		// The offending value is the last `quoted` text of the message.
		if q := yamlQuoted.FindAllStringSubmatch(m[2], -1); q != nil {
			value = q[len(q)-1][1]
		}
		if path := pathAt(root, "", line, value); path != "" {
			out = append(out, fmt.Sprintf("%s: %s (line %d)", path, m[2], line))
		} else {
			out = append(out, l)
		}
	}
	return errors.New(strings.Join(out, "; "))
}

// pathAt finds the key path of the value on line whose text is value (or of
// the first key on that line when value is empty or not found).
func pathAt(n *yaml.Node, path string, line int, value string) string {
	var fallback string
	var walk func(n *yaml.Node, path string) string
	walk = func(n *yaml.Node, path string) string {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if p := walk(c, path); p != "" {
					return p
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if v.Line == line && v.Kind == yaml.ScalarNode && (value == "" || v.Value == value) {
					return p
				}
				if k.Line == line && fallback == "" {
					fallback = p
				}
				if found := walk(v, p); found != "" {
					return found
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Line == line && c.Kind == yaml.ScalarNode && (value == "" || c.Value == value) {
					return p
				}
				if found := walk(c, p); found != "" {
					return found
				}
			}
		}
		return ""
	}
	if p := walk(n, path); p != "" {
		return p
	}
	return fallback
}
