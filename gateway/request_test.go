package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// postPath sends body to one of the gateway's API paths.
func postPath(t *testing.T, ctx context.Context, url, path, body string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// apiShapes are the API paths the gateway admits, each with a valid body
// written as %s for the members after the model and the name of its
// token-limit field ("" when the API has none).
var apiShapes = []struct {
	path, body, limit string
}{
	{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"which model are you? MODEL"}],"max_completion_tokens":16%s}`, "max_completion_tokens"},
	{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"model"}],"max_tokens":16%s}`, "max_tokens"},
	{"/v1/completions", `{"model":"gpt-4o-mini","prompt":"say model","max_tokens":16%s}`, "max_tokens"},
	{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"model MODEL Model"%s}`, ""},
	{"/v1/responses", `{"model":"gpt-4o-mini","input":"the model","max_output_tokens":16%s}`, "max_output_tokens"},
	{"/v1/messages", `{"model":"claude-3-5-haiku","max_tokens":16,"messages":[{"role":"user","content":"model"}]%s}`, "max_tokens"},
}

// TestDuplicateTopLevelKeysAreRefused: a body whose top-level keys repeat,
// in any case, is refused with a 400 naming the key, on every API the
// gateway admits, and the provider never sees it; keys that merely look
// alike below the top level are forwarded. Without the exact-key decoder,
// {"model":…,"MODEL":…} is admitted and priced as the last one while the
// provider runs the first.
func TestDuplicateTopLevelKeysAreRefused(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{})
	g, gw := startGateway(t, baseConfig(up.URL))
	received := int64(0)
	for _, shape := range apiShapes {
		fill := func(extra string) string { return strings.Replace(shape.body, "%s", extra, 1) }
		ok := []string{
			fill(""),
			// Alike only below the top level, or differing by more than case.
			fill(`,"metadata":{"model":"o1-pro","MODEL":"x"}`),
			fill(`,"user":"model","model_hint":"o1-pro"`),
		}
		for _, body := range ok {
			resp := postPath(t, t.Context(), gw.URL, shape.path, body, nil)
			if b := readAll(t, resp); resp.StatusCode != 200 {
				t.Fatalf("%s %s: %d %s", shape.path, body, resp.StatusCode, b)
			}
			received++
		}
		bad := []struct{ extra, key string }{
			{`,"MODEL":"o1-pro"`, `"MODEL"`},
			{`,"model":"o1-pro"`, `"model"`},
			{`,"Model":"o1-pro"`, `"Model"`},
			{`,"m\u006fdel":"o1-pro"`, `"model"`}, // the same key, escaped
			{`,"stream":false,"Stream":true`, `"Stream"`},
		}
		if shape.limit != "" {
			bad = append(bad,
				struct{ extra, key string }{`,"` + strings.ToUpper(shape.limit) + `":1`, `"` + strings.ToUpper(shape.limit) + `"`},
				struct{ extra, key string }{`,"` + shape.limit + `":100000`, `"` + shape.limit + `"`})
		}
		for _, tc := range bad {
			body := fill(tc.extra)
			resp := postPath(t, t.Context(), gw.URL, shape.path, body, nil)
			b := readAll(t, resp)
			if resp.StatusCode != 400 {
				t.Fatalf("%s %s: status %d, want 400: %s", shape.path, body, resp.StatusCode, b)
			}
			if e := decodeError(t, b); !strings.Contains(e.Message, tc.key) || e.Type != "invalid_request_error" {
				t.Fatalf("%s %s: error %+v does not name %s", shape.path, body, e, tc.key)
			}
		}
	}
	if st := mock.Stats(); st.Received != received {
		t.Fatalf("the provider received %d requests, want the %d valid ones", st.Received, received)
	}
	if st := g.Gate().Stats(); st.InFlight != 0 {
		t.Fatalf("a refused body holds a slot: %+v", st)
	}
}

// TestDecodeBodyReadsExactKeys: what the gateway reads is what a reader
// that matches keys byte for byte reads; json.Unmarshal into a struct
// would take MODEL for model.
func TestDecodeBodyReadsExactKeys(t *testing.T) {
	for _, tc := range []struct {
		body      string
		model     string
		maxTokens int64
		stream    bool
		err       string // "" means accepted
	}{
		{`{"model":"a","max_tokens":5}`, "a", 5, false, ""},
		{` {"Model_":"b","model":"a"} `, "a", 0, false, ""},
		{`{"MODEL":"gpt-4o-mini"}`, "", 0, false, `"MODEL": write the key as "model"`},
		{`{"Max_Tokens":1}`, "", 0, false, `"Max_Tokens": write the key as "max_tokens"`},
		{`{"ſtream":true,"stream":false}`, "", 0, false, `"ſtream": write the key as "stream"`},
		{`{"stream":true,"ſtream":false}`, "", 0, false, `"ſtream": the key appears twice at the top level (also as "stream")`},
		{`{"model":"a","max_tokens":5,"max_completion_tokens":9}`, "a", 9, false, ""},
		{`{"model":"a","stream":true,"messages":[{"model":"b","MODEL":"c"}]}`, "a", 0, true, ""},
		{`{"model":"a","model":"b"}`, "", 0, false, `"model": the key appears twice`},
		{`{"model":"a","MODEL":"b"}`, "", 0, false, `"MODEL": the key appears twice at the top level (also as "model")`},
		{`{"max_tokens":1,"MAX_TOKENS":90000}`, "", 0, false, `"MAX_TOKENS"`},
		{`{"m\u006fdel":"a"}`, "", 0, false, `"model": a top-level key must be written without escapes`},
		{`{"model":"a"} {"model":"b"}`, "", 0, false, "nothing after it"},
		{`{"model":"a"}]`, "", 0, false, "nothing after it"},
		{`{"model":"a",}`, "", 0, false, "not valid JSON"},
		{`{"model":"a"`, "", 0, false, "not valid JSON"},
		{`["model"]`, "", 0, false, "JSON object"},
		{`{"model":"` + strings.Repeat("m", 257) + `"}`, "", 0, false, "… (257 bytes) is longer than 256 bytes"},
		{`{"max_tokens":1e3}`, "", 0, false, "max_tokens: must be a non-negative integer"},
		{`{"model":"` + strings.Repeat("m", 200) + `","` + strings.Repeat("k", 100) + `":1,"` + strings.Repeat("K", 100) + `":2}`, "", 0, false, "… (100 bytes)"},
	} {
		b, err := decodeBody([]byte(tc.body))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %s", tc.body, err, tc.err)
		case tc.err == "" && (b.model != tc.model || b.maxTokens != tc.maxTokens || b.stream != tc.stream):
			t.Errorf("%s: read %+v", tc.body, b)
		}
		if err != nil {
			if br, ok := err.(*wire.BadRequest); !ok || br.Status != http.StatusBadRequest {
				t.Errorf("%s: error %#v is not a 400", tc.body, err)
			}
		}
	}
}

// TestRewriteModelKeepsTheBody: the degraded body differs from the original
// in the model's value only — member order, spacing and every other byte
// are kept (re-marshalling through a map sorted the keys).
func TestRewriteModelKeepsTheBody(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"messages":[{"model":"x"}], "model" : "gpt-4o" ,"max_tokens":16}`, `{"messages":[{"model":"x"}], "model" : "gpt-4o-mini" ,"max_tokens":16}`},
		{`{"model":"gpt-4o"}`, `{"model":"gpt-4o-mini"}`},
		{`{"z":1}`, `{"model":"gpt-4o-mini","z":1}`},
		{` { } `, ` {"model":"gpt-4o-mini" } `},
	} {
		got, err := rewriteModel([]byte(tc.in), "gpt-4o-mini")
		if err != nil || string(got) != tc.want {
			t.Errorf("rewriteModel(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestHeaderValuesAreNotEchoedWhole: a long header value is cut at 64
// bytes in the error, which says how long it was; the timeout and attempt
// headers take plain digits only.
func TestHeaderValuesAreNotEchoedWhole(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	_, gw := startGateway(t, baseConfig(up.URL))
	long := strings.Repeat("p", 10<<10)
	for _, tc := range []struct{ header, value, want string }{
		{contract.HeaderPriority, long, `"` + strings.Repeat("p", 64) + `"… (10240 bytes)`},
		{contract.HeaderTimeoutMs, long, "(10240 bytes)"},
		{contract.HeaderTimeoutMs, "+5000", `"+5000" is not a whole number`},
		{contract.HeaderTimeoutMs, "1e3", `"1e3" is not a whole number`},
		{contract.HeaderTimeoutMs, "5 000", `"5 000" is not a whole number`},
		{contract.HeaderTimeoutMs, "5000.0", `"5000.0" is not a whole number`},
		{contract.HeaderTimeoutMs, "٥٠٠٠", "is not a whole number"}, // Arabic-Indic digits
		{contract.HeaderTimeoutMs, "99999999999999999999999", "above the limit"},
		{contract.HeaderAttempt, "+1", `"+1" is not a whole number`},
		{contract.HeaderAttempt, "1e0", `"1e0" is not a whole number`},
		{contract.HeaderAttempt, "99999999999999999999999", "at most"},
		{contract.HeaderStainlessRetryCount, long, "(10240 bytes)"},
	} {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{tc.header: tc.value})
		b := readAll(t, resp)
		if resp.StatusCode != 400 {
			t.Fatalf("%s: %.80s: status %d", tc.header, tc.value, resp.StatusCode)
		}
		e := decodeError(t, b)
		if !strings.HasPrefix(e.Message, tc.header+": ") || !strings.Contains(e.Message, tc.want) || len(e.Message) > 400 {
			t.Errorf("%s: %.80s: message %.500q, want it to contain %q and stay short", tc.header, tc.value, e.Message, tc.want)
		}
	}
	for _, v := range []string{"5000", " 5000", "05000"} {
		resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderTimeoutMs: v, contract.HeaderAttempt: "0"})
		if b := readAll(t, resp); resp.StatusCode != 200 {
			t.Errorf("timeout %q: %d %s", v, resp.StatusCode, b)
		}
	}
}

func TestEcho(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"short", `"short"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{strings.Repeat("a", 65), `"` + strings.Repeat("a", 64) + `"… (65 bytes)`},
		// A rune across the cut is left out whole, not split.
		{strings.Repeat("a", 63) + "é" + "b", `"` + strings.Repeat("a", 63) + `"… (66 bytes)`},
	} {
		if got := contract.Echo(tc.in); got != tc.want {
			t.Errorf("contract.Echo(%.70q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestBodyFieldIsBodyFields: the fast path's switch (bodyField) names
// exactly the fields of bodyFields.
func TestBodyFieldIsBodyFields(t *testing.T) {
	for k := range bodyFields {
		if got := bodyField([]byte(k)); got != k {
			t.Errorf("bodyField(%q) = %q", k, got)
		}
	}
	for _, k := range []string{"", "Model", "messages", "max_token"} {
		if got := bodyField([]byte(k)); got != "" {
			t.Errorf("bodyField(%q) = %q, want none", k, got)
		}
	}
}
