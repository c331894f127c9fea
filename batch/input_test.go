package batch_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/batch"
)

const good = `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`

func line(id, url, body string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":%q,"body":%s}`, id, url, body)
}

// Each bad line is one fault with its line, code and param; the good
// lines around them are read.
func TestParseInput(t *testing.T) {
	tests := []struct {
		name, in         string
		line             int
		code, param, msg string
	}{
		{"malformed", good + "\n{\"custom_id\":\"b\",\n", 2, "invalid_json_line", "", "not a JSON object"},
		{"unknown field", good + "\n" + `{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{},"x":1}`, 2, "unknown_parameter", "x", `unknown parameter "x"`},
		{"two values", `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}} {}`, 1, "invalid_json_line", "", "more than one"},
		{"no custom_id", `{"method":"POST","url":"/v1/embeddings","body":{}}`, 1, "missing_required_parameter", "custom_id", "custom_id"},
		{"custom_id a number", `{"custom_id":1,"method":"POST","url":"/v1/embeddings","body":{}}`, 1, "invalid_type", "custom_id", "string"},
		{"GET", `{"custom_id":"a","method":"GET","url":"/v1/embeddings","body":{}}`, 1, "invalid_value", "method", `method "GET": only POST`},
		{"unknown url", good + "\n\n" + `{"custom_id":"b","method":"POST","url":"/v1/files","body":{}}`, 3, "invalid_url", "url", `url "/v1/files" is not a batch endpoint`},
		{"body not an object", `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":"x"}`, 1, "invalid_value", "body", "JSON object"},
		{"duplicate custom_id", good + "\n" + good, 2, "duplicate_custom_id", "custom_id", `"a" is already used on line 1`},
		{"too many", good + "\n" + strings.Replace(good, `"a"`, `"b"`, 1) + "\n" + strings.Replace(good, `"a"`, `"c"`, 1), 3, "too_many_tasks", "", "more than 2"},
		{"empty", "\n\n", 0, "empty_file", "", "no requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := batch.ParseInput([]byte(tc.in), 2)
			if len(errs) != 1 {
				t.Fatalf("faults %+v, want one", errs)
			}
			e := errs[0]
			if e.Line != tc.line || e.Code != tc.code || e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("fault %+v, want line %d code %s param %q message with %q", e, tc.line, tc.code, tc.param, tc.msg)
			}
			if strings.Contains(e.Message, `\"`) {
				t.Errorf("a value quoted twice: %s", e.Message)
			}
		})
	}
	reqs, errs := batch.ParseInput([]byte(good+"\r\n\n"+strings.Replace(good, `"a"`, `"b"`, 1)+"\n"), 2)
	if errs != nil || len(reqs) != 2 || reqs[1].CustomID != "b" || reqs[1].Line != 3 || string(reqs[0].Body) != `{"model":"m"}` {
		t.Fatalf("ParseInput = %+v, %v", reqs, errs)
	}
}

func readBody(body []byte) (string, bool, error) {
	switch {
	case strings.Contains(string(body), `"bad"`):
		return "", false, errors.New("messages is required")
	case strings.Contains(string(body), `"stream":true`):
		return "m", true, nil
	case strings.Contains(string(body), `"model":"other"`):
		return "other", false, nil
	case strings.Contains(string(body), `"model"`):
		return "m", false, nil
	}
	return "", false, nil
}

// Validate lists every bad line, in line order, whether ParseInput or the
// checks against the batch found it; it stops at MaxLineErrors.
func TestValidate(t *testing.T) {
	const ep = "/v1/chat/completions"
	lines := []string{
		line("0", ep, `{"model":"m"}`),
		line("1", "/v1/embeddings", `{"model":"m"}`), // url_mismatch
		`{"custom_id":`,                              // invalid_json_line
		line("3", ep, `{"model":"other"}`),           // model_mismatch
		line("4", ep, `{"bad":1}`),                   // invalid_request
		line("5", ep, `{"model":"m","stream":true}`), // body.stream
		line("6", ep, `{}`),                          // body.model
		line("0", ep, `{"model":"m"}`),               // duplicate_custom_id
		line("8", ep, `{"model":"m"}`),
	}
	check := batch.Check{MaxLines: 100, Endpoint: ep, ReadBody: readBody}
	model, n, errs, err := batch.Validate(strings.NewReader(strings.Join(lines, "\n")), check)
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%d:%s:%s", e.Line, e.Code, e.Param))
	}
	want := "[2:url_mismatch:url 3:invalid_json_line: 4:model_mismatch:body.model 5:invalid_request:body 6:invalid_value:body.stream 7:missing_required_parameter:body.model 8:duplicate_custom_id:custom_id]"
	if n != 0 || model != "" || err != nil || fmt.Sprint(got) != want {
		t.Fatalf("Validate = %d requests, %q, faults %v, %v; want %s", n, model, got, err, want)
	}

	model, n, errs, _ = batch.Validate(strings.NewReader(lines[0]+"\n"+lines[8]), check)
	if errs != nil || model != "m" || n != 2 {
		t.Fatalf("good file: %d requests, %q, %v", n, model, errs)
	}

	var many []string
	for i := range 300 {
		many = append(many, line(fmt.Sprint(i), "/v1/embeddings", `{"model":"m"}`))
	}
	check.MaxLines = 1000
	if _, _, errs, _ = batch.Validate(strings.NewReader(strings.Join(many, "\n")), check); len(errs) != batch.MaxLineErrors || errs[99].Line != 100 {
		t.Fatalf("%d faults (last on line %d), want the first %d", len(errs), errs[len(errs)-1].Line, batch.MaxLineErrors)
	}
}

// The checks of a live call at validation: the model as the tenant's call
// would be checked (here, not priced), and a body over the live bound —
// each bad line with its number, read a line at a time.
func TestValidateAsALiveCall(t *testing.T) {
	const ep = "/v1/chat/completions"
	big := `{"model":"m","pad":"` + strings.Repeat("x", 200) + `"}`
	huge := `{"model":"m","pad":"` + strings.Repeat("y", 70<<10) + `"}` // past the line's envelope too
	lines := []string{line("0", ep, `{"model":"m"}`), line("1", ep, big), "", line("3", ep, huge), line("4", ep, `{"model":"m"}`)}
	check := batch.Check{MaxLines: 100, MaxBodyBytes: 100, Endpoint: ep, ReadBody: readBody,
		Model: func(m string) (string, string) { return "model_not_priced", "model " + m + " has no price" }}
	_, _, errs, err := batch.Validate(strings.NewReader(strings.Join(lines, "\n")), check)
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%d:%s:%s", e.Line, e.Code, e.Param))
	}
	want := "[1:model_not_priced:body.model 2:body_too_large:body 4:body_too_large:body 5:model_not_priced:body.model]"
	if err != nil || fmt.Sprint(got) != want {
		t.Fatalf("faults %v, %v; want %s", got, err, want)
	}
	// Requests reads the good file's lines again, one at a time, in order.
	var ids []string
	for r, err := range batch.Requests(strings.NewReader(lines[0]+"\n\n"+lines[4]+"\n"), 0) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, fmt.Sprintf("%s@%d", r.CustomID, r.Line))
	}
	if fmt.Sprint(ids) != "[0@1 4@3]" {
		t.Fatalf("Requests = %v", ids)
	}
}

// At upload only the file as a whole is checked.
func TestCheckFile(t *testing.T) {
	for _, tc := range []struct{ name, in, msg string }{
		{"not UTF-8", "\xff\xfe", "not UTF-8"},
		{"CSV", "custom_id,method\na,POST\n", "not JSONL"},
		{"pretty JSON", "{\n  \"custom_id\": \"a\"\n}\n", "not JSONL"},
		{"array", "[" + good + "]", "not JSONL"},
		{"empty", "\n \n", "no requests"},
		{"too many", good + "\n" + good + "\n" + good, "more than 2"},
	} {
		if err := batch.CheckFile([]byte(tc.in), 2); err == nil || err.Param != "file" || !strings.Contains(err.Msg, tc.msg) {
			t.Errorf("%s: %v, want a fault with %q", tc.name, err, tc.msg)
		}
	}
	// Read in small pieces, a rune cut between two reads is still UTF-8.
	text := good + "\n" + strings.Replace(good, `"m"`, `"mé€😀"`, 1) + "\n"
	if _, err := io.Copy(io.Discard, batch.NewFileCheck(iotest.OneByteReader(strings.NewReader(text)), 2, 0)); err != nil {
		t.Errorf("UTF-8 read a byte at a time: %v", err)
	}
	if _, err := io.Copy(io.Discard, batch.NewFileCheck(iotest.HalfReader(strings.NewReader(text+"\xe2\x82")), 2, 0)); err == nil {
		t.Error("a cut rune at the end passed")
	}
	// A first line too long to hold (past the body's bound and a line's
	// other fields) is checked for its first byte only: an object is left
	// to validation, anything else refused when the line ends.
	long := `{"custom_id":"a","pad":"` + strings.Repeat("x", 70<<10) + `"}` + "\n"
	if _, err := io.Copy(io.Discard, batch.NewFileCheck(strings.NewReader(long+good+"\n"), 2, 1)); err != nil {
		t.Errorf("a long first line that starts as an object: %v", err)
	}
	if _, err := io.Copy(io.Discard, batch.NewFileCheck(strings.NewReader("x"+long), 2, 1)); err == nil || !strings.Contains(err.Error(), "not JSONL") {
		t.Errorf("a long first line that is no object: %v", err)
	}
	// Bad lines after a good first one are the batch's to list.
	if err := batch.CheckFile([]byte(good+"\n{\"custom_id\":\n"), 2); err != nil {
		t.Errorf("a bad second line refused at upload: %v", err)
	}
}
