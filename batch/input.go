package batch

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/contract"
)

// Endpoints are the URLs a line may name: the gateway's gated APIs that
// OpenAI's Batch API takes.
var Endpoints = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}

// MaxLineErrors bounds the faults a failed batch lists: the first ones, by
// line. A batch's errors are read whole with every poll of it, so they are
// kept short; the first hundred are enough to fix a file from.
const MaxLineErrors = 100

// InputError is a file refused as a whole, at upload: Param is the field.
type InputError struct {
	Param string
	Msg   string
}

func (e *InputError) Error() string { return e.Msg }

// CheckFile is what is checked of a batch file when it is uploaded: that
// it is JSONL at all — UTF-8 text whose first line that is not blank is a
// JSON object — and holds between 1 and maxLines lines that are not blank.
// Each line's content is checked later, by Validate, while the batch is
// validating: a bad line fails the batch with every bad line listed.
func CheckFile(content []byte, maxLines int) *InputError {
	if !utf8.Valid(content) {
		return &InputError{Param: "file", Msg: "the file is not UTF-8 text: a batch file is JSONL, one JSON object a line"}
	}
	n := 0
	for raw := range bytes.Lines(content) {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		if n++; n == 1 {
			var v map[string]json.RawMessage
			if json.Unmarshal(raw, &v) != nil || v == nil {
				return &InputError{Param: "file", Msg: "the file is not JSONL: its first line is not a JSON object (a batch file is one JSON object a line)"}
			}
		}
		if n > maxLines {
			return &InputError{Param: "file", Msg: fmt.Sprintf("the file has more than %d requests (batch.max_requests): split it", maxLines)}
		}
	}
	if n == 0 {
		return &InputError{Param: "file", Msg: "the file has no requests"}
	}
	return nil
}

// lineFields are the fields of a line, in the order they are checked.
var lineFields = []string{"custom_id", "method", "url", "body"}

// ParseInput reads every line of an input file: the requests of the lines
// that are a JSON object of custom_id, method POST, a url among Endpoints
// and an object body, with a custom_id not seen before; and a fault for
// each other line, in line order, up to MaxLineErrors. Blank lines are
// skipped (a trailing newline is usual). The file is good only when there
// is no fault.
func ParseInput(content []byte, maxLines int) (reqs []Request, errs []LineError) {
	seen := map[string]int{}
	n := 0
	fault := func(line int, code, param, msg string) bool {
		errs = append(errs, LineError{Code: code, Line: line, Param: param, Message: msg})
		return len(errs) < MaxLineErrors
	}
	for raw := range bytes.Lines(content) {
		n++
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		if len(reqs)+len(errs) == maxLines {
			fault(n, "too_many_tasks", "", fmt.Sprintf("more than %d requests in one file", maxLines))
			return reqs, errs
		}
		r, code, param, msg := parseLine(raw)
		if code == "" {
			if first, dup := seen[r.CustomID]; dup {
				code, param, msg = "duplicate_custom_id", "custom_id", fmt.Sprintf("custom_id %s is already used on line %d", contract.Echo(r.CustomID), first)
			}
		}
		if code != "" {
			if !fault(n, code, param, msg) {
				return reqs, errs
			}
			continue
		}
		seen[r.CustomID] = n
		r.Line = n
		reqs = append(reqs, r)
	}
	if len(reqs) == 0 && len(errs) == 0 {
		errs = append(errs, LineError{Code: "empty_file", Message: "the file has no requests"})
	}
	return reqs, errs
}

// parseLine reads one line; code is empty when it is a good request.
func parseLine(raw []byte) (r Request, code, param, msg string) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return r, "invalid_json_line", "", "this line is not a JSON object"
	}
	if dec.More() {
		return r, "invalid_json_line", "", "this line holds more than one JSON value"
	}
	for k := range fields {
		if !slices.Contains(lineFields, k) {
			return r, "unknown_parameter", k, fmt.Sprintf("unknown parameter %s: a line has custom_id, method, url and body", contract.Echo(k))
		}
	}
	for _, k := range lineFields {
		v, ok := fields[k]
		if !ok || string(v) == "null" {
			return r, "missing_required_parameter", k, fmt.Sprintf("missing required parameter %s", k)
		}
		if k == "body" {
			if v[0] != '{' {
				return r, "invalid_value", "body", "body must be a JSON object"
			}
			r.Body = v
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			return r, "invalid_type", k, fmt.Sprintf("%s must be a string", k)
		}
		switch k {
		case "custom_id":
			r.CustomID = s
		case "method":
			r.Method = s
		case "url":
			r.URL = s
		}
	}
	switch {
	case r.CustomID == "":
		return r, "missing_required_parameter", "custom_id", "custom_id must not be empty"
	case len(r.CustomID) > 512:
		return r, "invalid_value", "custom_id", "custom_id is longer than 512 bytes"
	case r.Method != "POST":
		return r, "invalid_value", "method", fmt.Sprintf("method %s: only POST is supported", contract.Echo(r.Method))
	case !slices.Contains(Endpoints, r.URL):
		return r, "invalid_url", "url", fmt.Sprintf("url %s is not a batch endpoint (%s)", contract.Echo(r.URL), strings.Join(Endpoints, ", "))
	}
	return r, "", "", ""
}

// ReadBody reads a request's body as a live call's would be read: the
// model it names and whether it streams; an error says why the gateway
// would refuse it.
type ReadBody func(body []byte) (model string, stream bool, err error)

// Validate checks a batch's input file line by line, as the batch
// validates: ParseInput's checks, then each request's url against the
// batch's endpoint and its body as readBody reads it — a model, the same
// on every line, and no streaming. It returns the requests and their
// model, or the faults in line order, at most MaxLineErrors.
func Validate(content []byte, maxLines int, endpoint string, readBody ReadBody) (reqs []Request, model string, errs []LineError) {
	reqs, errs = ParseInput(content, maxLines)
	var firstLine int
	for _, r := range reqs {
		code, param, msg := "", "", ""
		m, stream, err := readBody(r.Body)
		switch {
		case r.URL != endpoint:
			code, param, msg = "url_mismatch", "url", fmt.Sprintf("url %s differs from the batch's endpoint %s", contract.Echo(r.URL), contract.Echo(endpoint))
		case err != nil:
			code, param, msg = "invalid_request", "body", "body: "+err.Error()
		case stream:
			code, param, msg = "invalid_value", "body.stream", "stream is not supported in a batch"
		case m == "":
			code, param, msg = "missing_required_parameter", "body.model", "missing required parameter body.model"
		case model == "":
			model, firstLine = m, r.Line
		case m != model:
			code, param, msg = "model_mismatch", "body.model", fmt.Sprintf("model %s differs from %s on line %d: a batch uses one model", contract.Echo(m), contract.Echo(model), firstLine)
		}
		if code != "" {
			errs = append(errs, LineError{Code: code, Line: r.Line, Param: param, Message: msg})
		}
	}
	if len(errs) == 0 {
		return reqs, model, nil
	}
	slices.SortStableFunc(errs, func(a, b LineError) int { return cmp.Compare(a.Line, b.Line) })
	if len(errs) > MaxLineErrors {
		errs = errs[:MaxLineErrors]
	}
	return nil, "", errs
}
