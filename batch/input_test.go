package batch_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/batch"
)

func TestParseInput(t *testing.T) {
	good := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`
	tests := []struct {
		name, in   string
		line       int
		param, msg string
	}{
		{"malformed", good + "\n{\"custom_id\":\"b\",\n", 2, "", "not a JSON object"},
		{"unknown field", good + "\n" + `{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{},"x":1}`, 2, "", "unknown field"},
		{"two values", `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}} {}`, 1, "", "more than one"},
		{"no custom_id", `{"method":"POST","url":"/v1/embeddings","body":{}}`, 1, "custom_id", "required"},
		{"GET", `{"custom_id":"a","method":"GET","url":"/v1/embeddings","body":{}}`, 1, "method", "only POST"},
		{"unknown url", good + "\n\n" + `{"custom_id":"b","method":"POST","url":"/v1/files","body":{}}`, 3, "url", "not a batch endpoint"},
		{"body not an object", `{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":"x"}`, 1, "body", "JSON object"},
		{"duplicate custom_id", good + "\n" + good, 2, "custom_id", "already used on line 1"},
		{"too many", good + "\n" + strings.Replace(good, `"a"`, `"b"`, 1) + "\n" + strings.Replace(good, `"a"`, `"c"`, 1), 3, "", "more than 2"},
		{"empty", "\n\n", 0, "", "no requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs, err := batch.ParseInput([]byte(tc.in), 2)
			if err == nil {
				t.Fatalf("accepted %d requests", len(reqs))
			}
			if err.Line != tc.line || err.Param != tc.param || !strings.Contains(err.Msg, tc.msg) {
				t.Fatalf("error %+v, want line %d param %q message with %q", err, tc.line, tc.param, tc.msg)
			}
		})
	}
	reqs, err := batch.ParseInput([]byte(good+"\r\n\n"+strings.Replace(good, `"a"`, `"b"`, 1)+"\n"), 2)
	if err != nil || len(reqs) != 2 || reqs[1].CustomID != "b" || string(reqs[0].Body) != `{"model":"m"}` {
		t.Fatalf("ParseInput = %+v, %v", reqs, err)
	}
	if e := batch.CheckEndpoint(reqs, "/v1/embeddings"); e == nil || e.Line != 1 || e.Param != "url" {
		t.Fatalf("CheckEndpoint = %v", e)
	}
	if e := batch.CheckEndpoint(reqs, "/v1/chat/completions"); e != nil {
		t.Fatalf("CheckEndpoint = %v", e)
	}
}
