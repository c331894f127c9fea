package simreport

import (
	"bytes"
	"embed"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/sluicehq/sluice/sim"
)

// The prose of results.md lives in templates/*.tmpl; the Go code hands them
// the figures. A sentence whose wording depends on the figures is a
// conditional in its template, so that regenerating the file cannot leave a
// claim behind that the numbers no longer support, and so that the prose
// can be edited without reading Go.
//
// Markdown wants some paragraphs on one line (list items) and others as a
// quote; the templates write them wrapped for reading, and the functions
// line, list and quote give them their shape.

//go:embed templates/*.tmpl
var templateFS embed.FS

// templates are parsed once, at init: the files are embedded, so parsing
// fails only on a template that does not compile, and then every test of
// the package fails with it.
var templates = template.Must(parseTemplates())

func parseTemplates() (*template.Template, error) {
	var t *template.Template
	funcs := template.FuncMap{
		// include executes a named template into a string, so that its
		// output can go through line, list or quote.
		"include": func(name string, data any) (string, error) {
			var b bytes.Buffer
			err := t.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		"line":     line,
		"list":     list,
		"quote":    quote,
		"join":     strings.Join,
		"f0":       func(v float64) string { return fmt.Sprintf("%.0f", v) },
		"f1":       func(v float64) string { return fmt.Sprintf("%.1f", v) },
		"f2":       func(v float64) string { return fmt.Sprintf("%.2f", v) },
		"x":        func(load float64) string { return fmt.Sprintf("%g×", load) },
		"loads":    loadsText,
		"recovery": recoveryText,
		"duration": durationText,
		"delay":    delayText,
		"number":   number,
		"label":    policyLabel,
	}
	t = template.New("").Funcs(funcs)
	return t.ParseFS(templateFS, "templates/*.tmpl")
}

// line joins a paragraph into one line: every run of white space, line
// breaks included, becomes one space.
func line(s string) string { return strings.Join(strings.Fields(s), " ") }

// list makes a Markdown list of paragraphs, one item a line: each run of
// text between blank lines is one item. Empty paragraphs (a conditional
// that wrote nothing) vanish; no paragraph at all gives "".
func list(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n\n") {
		if p := line(p); p != "" {
			b.WriteString("- " + p + "\n")
		}
	}
	return b.String()
}

// quote wraps a paragraph at about 78 columns as a Markdown quote.
func quote(text string) string {
	var b strings.Builder
	l := ">"
	for _, word := range strings.Fields(text) {
		if len(l)+1+len(word) > 78 {
			b.WriteString(l + "\n")
			l = ">"
		}
		l += " " + word
	}
	b.WriteString(l + "\n")
	return b.String()
}

// loadsText writes load factors as "1×, 5×".
func loadsText(loads []float64) string {
	s := make([]string, len(loads))
	for i, l := range loads {
		s[i] = fmt.Sprintf("%g×", l)
	}
	return strings.Join(s, ", ")
}

// number spells out a count below ten, as prose does.
func number(n int) string {
	if n >= 0 && n < 10 {
		return strings.Fields("zero one two three four five six seven eight nine")[n]
	}
	return fmt.Sprint(n)
}

func recoveryText(r *sim.Recovery) string {
	switch {
	case r == nil:
		return "–"
	case !r.Recovered:
		return "never"
	}
	return fmt.Sprintf("%.0f s", r.Seconds)
}

// delayText is how long after its crossing an alert fired, or "never".
func delayText(a *sim.AlertResult) string {
	if a == nil {
		return "never"
	}
	d, ok := a.Delay()
	if !ok {
		return "never"
	}
	return fmt.Sprintf("%v", d)
}

// durationText writes whole minutes as "5m", anything else as Go does.
func durationText(d time.Duration) string {
	if d > 0 && d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

func policyLabel(name string) string {
	for _, p := range sim.Policies() {
		if p.Name == name {
			return p.Label
		}
	}
	return name
}
