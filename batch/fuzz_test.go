package batch

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// FuzzParseInput: any bytes give requests and faults, never a panic; each
// fault names a line inside the file, in line order, at most
// MaxLineErrors; what is accepted is what the Batch API promises — unique
// custom_ids, POST to a known endpoint, an object body, no more than the
// limit — and each line is either a request or a fault, never both.
func FuzzParseInput(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n"))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}}` + "\n" + `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}}`))
	f.Add([]byte("\n\n{\"custom_id\":1}\n"))
	f.Add([]byte(`{"custom_id":"x","method":"GET","url":"/v1/models","body":null}`))
	f.Add([]byte{0xff, '\n', '{'})
	f.Fuzz(func(t *testing.T, content []byte) {
		const limit = 4
		reqs, errs := ParseInput(content, limit)
		lines := bytes.Count(content, []byte("\n")) + 1
		if len(errs) > MaxLineErrors {
			t.Fatalf("%d faults, bound %d", len(errs), MaxLineErrors)
		}
		if len(reqs)+len(errs) > limit+1 {
			t.Fatalf("%d requests and %d faults past a limit of %d", len(reqs), len(errs), limit)
		}
		at := map[int]bool{}
		prev := -1
		for _, e := range errs {
			if e.Line < 0 || e.Line > lines || e.Line < prev || e.Code == "" || e.Message == "" || at[e.Line] {
				t.Fatalf("fault %+v (after line %d) in a %d-line file", e, prev, lines)
			}
			if e.Line > 0 {
				at[e.Line] = true
			}
			prev = e.Line
		}
		if len(reqs) > limit {
			t.Fatalf("%d requests accepted, limit %d", len(reqs), limit)
		}
		seen := map[string]bool{}
		for _, r := range reqs {
			if r.CustomID == "" || seen[r.CustomID] {
				t.Fatalf("custom_id %q empty or seen twice", r.CustomID)
			}
			seen[r.CustomID] = true
			if r.Method != "POST" || !slices.Contains(Endpoints, r.URL) {
				t.Fatalf("accepted %s %s", r.Method, r.URL)
			}
			if at[r.Line] || r.Line < 1 || r.Line > lines {
				t.Fatalf("line %d is a request and a fault, or outside the file", r.Line)
			}
			var body map[string]any
			if err := json.Unmarshal(r.Body, &body); err != nil || body == nil {
				t.Fatalf("accepted a body that is not an object: %s", r.Body)
			}
		}
	})
}

// FuzzFileCheck: whether NewFileCheck refuses a file does not depend on
// how its reads cut it (a rune, a line, the first line split anywhere) —
// which fault it names may, when there are two: the first one read — and
// it refuses what the whole file shows: not UTF-8, no requests, too many.
func FuzzFileCheck(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a"}` + "\n"))
	f.Add([]byte("\xe2\x82\xac{\n"))
	f.Add([]byte(" \n\t{\"a\":\"é\"}\r\n{}\n{}\n"))
	f.Add([]byte("[1]\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		verdict := func(r io.Reader) string {
			_, err := io.Copy(io.Discard, NewFileCheck(r, 2, 0))
			if err == nil {
				return ""
			}
			return err.Error()
		}
		whole := verdict(bytes.NewReader(content))
		for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(content)), iotest.HalfReader(bytes.NewReader(content))} {
			if got := verdict(r); (got == "") != (whole == "") {
				t.Fatalf("read in pieces: %q; whole: %q", got, whole)
			}
		}
		if !utf8.Valid(content) && whole == "" {
			t.Fatalf("accepted text that is not UTF-8")
		}
		n := 0
		for l := range bytes.Lines(content) {
			if len(bytes.Trim(l, " \t\r\v\f\n")) > 0 {
				n++
			}
		}
		if whole == "" && (n == 0 || n > 2) {
			t.Fatalf("accepted %d requests, bound 2", n)
		}
	})
}
