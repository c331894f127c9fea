package batch

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// FuzzParseInput: any bytes give either requests or one fault with a line
// inside the file, never a panic; what is accepted is what the Batch API
// promises — unique custom_ids, POST to a known endpoint, an object body,
// no more than the limit.
func FuzzParseInput(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n"))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}}` + "\n" + `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}}`))
	f.Add([]byte("\n\n{\"custom_id\":1}\n"))
	f.Add([]byte(`{"custom_id":"x","method":"GET","url":"/v1/models","body":null}`))
	f.Add([]byte{0xff, '\n', '{'})
	f.Fuzz(func(t *testing.T, content []byte) {
		const limit = 4
		reqs, ierr := ParseInput(content, limit)
		lines := bytes.Count(content, []byte("\n")) + 1
		if ierr != nil {
			if reqs != nil {
				t.Fatalf("a fault (%v) and %d requests", ierr, len(reqs))
			}
			if ierr.Line < 0 || ierr.Line > lines || ierr.Error() == "" {
				t.Fatalf("fault %q at line %d of a %d-line file", ierr.Error(), ierr.Line, lines)
			}
			return
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
			var body map[string]any
			if err := json.Unmarshal(r.Body, &body); err != nil || body == nil {
				t.Fatalf("accepted a body that is not an object: %s", r.Body)
			}
		}
	})
}
