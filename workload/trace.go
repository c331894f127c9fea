package workload

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Call is one call of a trace.
type Call struct {
	// At is when it arrived, from the trace's start.
	At time.Duration
	// Service names who sent it (the trace's service column). Empty when
	// the trace has none: every call is then one service's.
	Service string
	// PromptTokens and OutputTokens are the sizes of its prompt and of
	// the answer it got.
	PromptTokens, OutputTokens int
	// MaxTokens is the max_tokens it was sent with, and Deadline how long
	// its caller waited, when the trace says (max_tokens, deadline_ms).
	// Zero means the service's, which the replay decides.
	MaxTokens int
	Deadline  time.Duration
}

// Trace is calls in the order they arrived. The zero Trace has no calls.
type Trace struct {
	Calls []Call
}

// Limits on a trace: they keep every product of its numbers inside a
// time.Duration and a replay inside memory.
const (
	// MaxCalls bounds the rows of a trace.
	MaxCalls = 5_000_000
	// MaxTokens bounds every count of tokens in a trace.
	MaxTokens = 10_000_000
	// MaxSpan bounds the time a trace covers, and a deadline.
	MaxSpan = 7 * 24 * time.Hour
)

// Span is the time from the trace's first arrival to its last.
func (t *Trace) Span() time.Duration {
	if len(t.Calls) == 0 {
		return 0
	}
	return t.Calls[len(t.Calls)-1].At - t.Calls[0].At
}

// Services are the services of the trace's calls, in order of first
// appearance ("" among them when some calls name none).
func (t *Trace) Services() []string {
	var out []string
	for _, c := range t.Calls {
		if !slices.Contains(out, c.Service) {
			out = append(out, c.Service)
		}
	}
	return out
}

// Faster returns the trace played speed times faster: every arrival's
// offset divided by speed (2: twice the rate). The sizes and deadlines are
// kept. Speed must be positive and finite.
func (t *Trace) Faster(speed float64) (*Trace, error) {
	if !(speed > 0) || math.IsInf(speed, 0) {
		return nil, fmt.Errorf("workload: speed %v, want a positive factor", speed)
	}
	out := &Trace{Calls: slices.Clone(t.Calls)}
	for i := range out.Calls {
		out.Calls[i].At = time.Duration(float64(out.Calls[i].At) / speed)
	}
	return out, nil
}

// Window returns the calls that arrived in [from, to), their offsets made
// relative to from.
func (t *Trace) Window(from, to time.Duration) *Trace {
	i, _ := slices.BinarySearchFunc(t.Calls, from, func(c Call, at time.Duration) int { return cmp.Compare(c.At, at) })
	j, _ := slices.BinarySearchFunc(t.Calls, to, func(c Call, at time.Duration) int { return cmp.Compare(c.At, at) })
	out := &Trace{Calls: slices.Clone(t.Calls[i:j])}
	for k := range out.Calls {
		out.Calls[k].At -= from
	}
	return out
}

// ParseError is a row of a trace file that could not be read: its line
// (from 1, the header's being 1) and column, by its name in the header.
type ParseError struct {
	Line   int
	Column string
	Err    error
}

func (e *ParseError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: column %s: %v", e.Line, e.Column, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// The columns a trace file may have, each by any of its names (compared
// without case, spaces, '_' or '-'): the arrival time, the prompt's and
// the answer's tokens are required; the others optional.
var columns = []struct {
	field string
	names []string
}{
	{"time", []string{"timestamp", "time", "arrival", "arrivaltime", "at"}},
	{"prompt", []string{"contexttokens", "prompttokens", "inputtokens", "prompt"}},
	{"output", []string{"generatedtokens", "outputtokens", "completiontokens", "output"}},
	{"service", []string{"service", "app", "application"}},
	{"max_tokens", []string{"maxtokens"}},
	{"deadline_ms", []string{"deadlinems", "timeoutms"}},
}

func columnName(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		if r != ' ' && r != '_' && r != '-' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ReadCSV reads a trace: a header row naming the columns, then one row
// per call. The columns, by any of these names (case, spaces, '_' and
// '-' ignored; others are skipped):
//
//   - timestamp (time, arrival, at): seconds as a decimal number, or a
//     date and time ("2023-11-16 18:15:46.6805900", RFC 3339); offsets are
//     taken from the earliest. Required.
//   - context_tokens (prompt_tokens, input_tokens): the prompt's tokens.
//     Required.
//   - generated_tokens (output_tokens, completion_tokens): the answer's
//     tokens. Required.
//   - service: who sent the call. Optional: without it every call is one
//     service's.
//   - max_tokens, deadline_ms: what the call was sent with, and how long
//     its caller waited. Optional; an empty cell is the service's.
//
// Rows are put in order of arrival (a stable sort: rows of one instant
// keep their order). A bad value is a *ParseError naming the line and the
// column; a trace with no rows is an error.
func ReadCSV(r io.Reader) (*Trace, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	head, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("workload: the trace is empty: want a header row and a row per call")
	}
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	idx := map[string]int{}
	label := map[string]string{}
	for i, h := range head {
		name := columnName(strings.TrimPrefix(h, "\ufeff"))
		for _, col := range columns {
			if slices.Contains(col.names, name) {
				if _, dup := idx[col.field]; dup {
					return nil, &ParseError{Line: 1, Column: h, Err: fmt.Errorf("a second %s column", col.field)}
				}
				idx[col.field], label[col.field] = i, strings.TrimSpace(h)
			}
		}
	}
	for _, need := range []string{"time", "prompt", "output"} {
		if _, ok := idx[need]; !ok {
			var names []string
			for _, col := range columns {
				if col.field == need {
					names = col.names
				}
			}
			return nil, &ParseError{Line: 1, Err: fmt.Errorf("no %s column (want one named %s)", need, strings.Join(names, ", "))}
		}
	}
	var (
		t      Trace
		stamps []int64 // nanoseconds, from an origin of the column's own
		dated  = -1    // 1: the time column holds dates, 0: numbers
	)
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("workload: %w", err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line
		}
		cell := func(field string) (string, bool) {
			i, ok := idx[field]
			if !ok || i >= len(rec) {
				return "", false
			}
			v := strings.TrimSpace(rec[i])
			return v, v != ""
		}
		bad := func(field string, err error) error {
			return &ParseError{Line: line, Column: label[field], Err: err}
		}
		if len(t.Calls) >= MaxCalls {
			return nil, &ParseError{Line: line, Err: fmt.Errorf("more than %d calls", MaxCalls)}
		}
		v, ok := cell("time")
		if !ok {
			return nil, bad("time", errors.New("empty: every call needs its arrival time"))
		}
		ns, isDate, err := parseStamp(v)
		if err != nil {
			return nil, bad("time", err)
		}
		if d := map[bool]int{false: 0, true: 1}[isDate]; dated < 0 {
			dated = d
		} else if dated != d {
			return nil, bad("time", fmt.Errorf("%q: the column mixes dates and numbers of seconds", v))
		}
		var c Call
		for _, f := range []struct {
			field    string
			dst      *int
			required bool
		}{{"prompt", &c.PromptTokens, true}, {"output", &c.OutputTokens, true}, {"max_tokens", &c.MaxTokens, false}} {
			v, ok := cell(f.field)
			if !ok {
				if f.required {
					return nil, bad(f.field, errors.New("empty: want a number of tokens"))
				}
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > MaxTokens {
				return nil, bad(f.field, fmt.Errorf("%q: want a whole number of tokens, 0 to %d", v, MaxTokens))
			}
			*f.dst = n
		}
		if c.MaxTokens > 0 && c.OutputTokens > c.MaxTokens {
			return nil, bad("output", fmt.Errorf("%d tokens, more than its max_tokens (%d)", c.OutputTokens, c.MaxTokens))
		}
		if v, ok := cell("deadline_ms"); ok {
			ms, err := strconv.ParseFloat(v, 64)
			if err != nil || !(ms > 0) || ms > float64(MaxSpan/time.Millisecond) {
				return nil, bad("deadline_ms", fmt.Errorf("%q: want a positive number of milliseconds up to %d", v, MaxSpan/time.Millisecond))
			}
			c.Deadline = time.Duration(ms * float64(time.Millisecond))
		}
		c.Service, _ = cell("service")
		t.Calls = append(t.Calls, c)
		stamps = append(stamps, ns)
	}
	if len(t.Calls) == 0 {
		return nil, errors.New("workload: the trace has a header and no calls")
	}
	first := slices.Min(stamps)
	for i := range t.Calls {
		off := time.Duration(stamps[i] - first)
		if off > MaxSpan {
			return nil, fmt.Errorf("workload: the trace spans more than %v", MaxSpan)
		}
		t.Calls[i].At = off
	}
	slices.SortStableFunc(t.Calls, func(a, b Call) int { return cmp.Compare(a.At, b.At) })
	return &t, nil
}

// ReadFile reads the trace in the CSV file at path (see ReadCSV).
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// dateLayouts are the forms of a date in a trace's time column: Azure's
// (seven digits of fraction, a space), and RFC 3339.
var dateLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00"}

// parseStamp reads a time cell: seconds, or a date (isDate), in
// nanoseconds from an origin of the column's own.
func parseStamp(v string) (ns int64, isDate bool, err error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e9 {
			return 0, false, fmt.Errorf("%q: want seconds from 0 to 1e9", v)
		}
		return int64(math.Round(f * 1e9)), false, nil
	}
	for _, l := range dateLayouts {
		if tm, err := time.Parse(l, v); err == nil {
			return tm.UnixNano(), true, nil
		}
	}
	return 0, false, fmt.Errorf("%q is neither seconds nor a date such as 2023-11-16 18:15:46.6805900", v)
}

// WriteCSV writes the trace in the form ReadCSV reads: timestamp in
// seconds, context_tokens, generated_tokens, and service, max_tokens and
// deadline_ms when any call has one.
func (t *Trace) WriteCSV(w io.Writer) error {
	var service, maxTokens, deadline bool
	for _, c := range t.Calls {
		service = service || c.Service != ""
		maxTokens = maxTokens || c.MaxTokens > 0
		deadline = deadline || c.Deadline > 0
	}
	cw := csv.NewWriter(w)
	head := []string{"timestamp", "context_tokens", "generated_tokens"}
	if service {
		head = append(head, "service")
	}
	if maxTokens {
		head = append(head, "max_tokens")
	}
	if deadline {
		head = append(head, "deadline_ms")
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	row := make([]string, 0, len(head))
	for _, c := range t.Calls {
		row = append(row[:0], strconv.FormatFloat(c.At.Seconds(), 'f', 3, 64), strconv.Itoa(c.PromptTokens), strconv.Itoa(c.OutputTokens))
		if service {
			row = append(row, c.Service)
		}
		if maxTokens {
			row = append(row, optional(c.MaxTokens))
		}
		if deadline {
			row = append(row, optional(int(c.Deadline.Milliseconds())))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func optional(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
