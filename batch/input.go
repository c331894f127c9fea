package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Endpoints are the URLs a line may name: the gateway's gated APIs that
// OpenAI's Batch API takes.
var Endpoints = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}

// InputError is a bad input file: Line is the 1-based line at fault (0
// for the file as a whole), Param the field.
type InputError struct {
	Line  int
	Param string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ParseInput validates a whole input file and returns its requests, or
// the first fault by line: a line that is not a JSON object with
// custom_id, method POST, a url among Endpoints and an object body; a
// custom_id seen before; more than maxLines lines. Blank lines are
// skipped (a trailing newline is usual); nothing is accepted unless every
// line is.
func ParseInput(content []byte, maxLines int) ([]Request, *InputError) {
	var reqs []Request
	seen := map[string]int{}
	n := 0
	for raw := range bytes.Lines(content) {
		n++
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		if len(reqs) == maxLines {
			return nil, &InputError{Line: n, Msg: fmt.Sprintf("more than %d requests in one file", maxLines)}
		}
		var r Request
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, &InputError{Line: n, Msg: "not a JSON object of custom_id, method, url and body: " + err.Error()}
		}
		if dec.More() {
			return nil, &InputError{Line: n, Msg: "more than one JSON value on the line"}
		}
		switch {
		case r.CustomID == "":
			return nil, &InputError{Line: n, Param: "custom_id", Msg: "custom_id is required"}
		case len(r.CustomID) > 512:
			return nil, &InputError{Line: n, Param: "custom_id", Msg: "custom_id is longer than 512 bytes"}
		case r.Method != "POST":
			return nil, &InputError{Line: n, Param: "method", Msg: fmt.Sprintf("method %q: only POST is supported", r.Method)}
		case !slices.Contains(Endpoints, r.URL):
			return nil, &InputError{Line: n, Param: "url", Msg: fmt.Sprintf("url %q is not a batch endpoint (%v)", r.URL, Endpoints)}
		case len(r.Body) == 0 || r.Body[0] != '{':
			return nil, &InputError{Line: n, Param: "body", Msg: "body must be a JSON object"}
		}
		if first, dup := seen[r.CustomID]; dup {
			return nil, &InputError{Line: n, Param: "custom_id", Msg: fmt.Sprintf("custom_id %q already used on line %d", r.CustomID, first)}
		}
		seen[r.CustomID] = n
		reqs = append(reqs, r)
	}
	if len(reqs) == 0 {
		return nil, &InputError{Msg: "the file has no requests"}
	}
	return reqs, nil
}

// CheckEndpoint returns the first request whose url is not endpoint.
func CheckEndpoint(reqs []Request, endpoint string) *InputError {
	for i, r := range reqs {
		if r.URL != endpoint {
			return &InputError{Line: i + 1, Param: "url", Msg: fmt.Sprintf("url %q differs from the batch's endpoint %q", r.URL, endpoint)}
		}
	}
	return nil
}
