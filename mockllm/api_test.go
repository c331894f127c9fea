package mockllm

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// These tests speak real HTTP over loopback to check the wire shapes.

func newHTTP(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s := newServer(t, cfg)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close) // runs before s.Close: cleanups are LIFO
	return s, ts
}

func TestChatJSONUsage(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	// 13 characters of prompt text → 4 tokens; the role is not text.
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions,
		`{"model":"gpt-4o-mini","max_tokens":7,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello"}]}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body := decode(t, resp.Body)
	if got := field(t, body, "object"); got != "chat.completion" {
		t.Errorf("object %v", got)
	}
	if got := field(t, body, "model"); got != "gpt-4o-mini" {
		t.Errorf("model %v, want the requested one", got)
	}
	if p, c, tot := num(t, body, "usage", "prompt_tokens"), num(t, body, "usage", "completion_tokens"), num(t, body, "usage", "total_tokens"); p != 4 || c != 7 || tot != 11 {
		t.Errorf("usage %d+%d=%d, want 4+7=11", p, c, tot)
	}
	if got := field(t, body, "choices", 0, "finish_reason"); got != "length" {
		t.Errorf("finish_reason %v, want length (max_tokens reached)", got)
	}
	if got := field(t, body, "choices", 0, "message", "content").(string); got != tokenText(0, 7) {
		t.Errorf("content %q", got)
	}
}

func TestDefaultOutputTokens(t *testing.T) {
	for _, tc := range []struct {
		cfg  int
		want int
	}{{0, DefaultOutputTokens}, {5, 5}} {
		_, ts := newHTTP(t, Config{OutputTokens: tc.cfg})
		resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 0, false))
		body := decode(t, resp.Body)
		resp.Body.Close()
		if got := num(t, body, "usage", "completion_tokens"); got != tc.want {
			t.Errorf("OutputTokens %d: completion tokens %d, want %d", tc.cfg, got, tc.want)
		}
		if got := field(t, body, "choices", 0, "finish_reason"); got != "stop" {
			t.Errorf("finish_reason %v, want stop", got)
		}
	}
}

func TestChatStreamEndsWithUsageThenDone(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("gpt-4o", "abcdefgh", 40, true))
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	evs := readEvents(t, resp.Body)
	if n := len(evs); n < 4 || evs[n-1].data != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %v", evs)
	}
	var text strings.Builder
	for i, ev := range evs[:len(evs)-2] {
		var chunk map[string]any
		if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if field(t, chunk, "object") != "chat.completion.chunk" || field(t, chunk, "model") != "gpt-4o" {
			t.Errorf("event %d: %v", i, chunk)
		}
		if c, ok := field(t, chunk, "choices", 0, "delta").(map[string]any)["content"].(string); ok {
			text.WriteString(c)
		}
	}
	if text.String() != tokenText(0, 40) {
		t.Errorf("streamed text %q, want 40 tokens of filler", text.String())
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(evs[len(evs)-2].data), &last); err != nil {
		t.Fatal(err)
	}
	if ch := field(t, last, "choices").([]any); len(ch) != 0 {
		t.Errorf("usage chunk has choices %v, want none", ch)
	}
	if p, c := num(t, last, "usage", "prompt_tokens"), num(t, last, "usage", "completion_tokens"); p != 2 || c != 40 {
		t.Errorf("final usage %d/%d, want 2/40", p, c)
	}
}

func TestChatStreamWithoutIncludeUsageHasNoUsageChunk(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions,
		`{"model":"m","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	for _, ev := range readEvents(t, resp.Body) {
		if strings.Contains(ev.data, `"usage"`) {
			t.Errorf("usage sent without stream_options.include_usage: %s", ev.data)
		}
	}
}

func TestCompletionsJSONAndStream(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathCompletions, `{"model":"gpt-3.5-turbo-instruct","prompt":["abcd","efgh"],"max_tokens":5}`)
	body := decode(t, resp.Body)
	resp.Body.Close()
	if field(t, body, "object") != "text_completion" || num(t, body, "usage", "prompt_tokens") != 2 || num(t, body, "usage", "completion_tokens") != 5 {
		t.Errorf("completion %v", body)
	}
	// A pre-tokenized prompt counts one token per id.
	resp = post(t, ts.Client(), ts.URL+PathCompletions,
		`{"model":"m","prompt":[1,2,3],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
	evs := readEvents(t, resp.Body)
	resp.Body.Close()
	if evs[len(evs)-1].data != "[DONE]" || !strings.Contains(evs[len(evs)-2].data, `"prompt_tokens":3`) {
		t.Errorf("stream %v", evs)
	}
}

func TestEmbeddingsFloatAndBase64(t *testing.T) {
	s, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathEmbeddings, `{"model":"text-embedding-3-small","input":["abcd","efghijkl"],"dimensions":8}`)
	body := decode(t, resp.Body)
	resp.Body.Close()
	data := field(t, body, "data").([]any)
	if len(data) != 2 || len(field(t, data[1], "embedding").([]any)) != 8 || num(t, data[1], "index") != 1 {
		t.Errorf("embeddings %v", body)
	}
	if num(t, body, "usage", "prompt_tokens") != 3 || num(t, body, "usage", "total_tokens") != 3 {
		t.Errorf("usage %v, want 3 tokens", body["usage"])
	}
	resp = post(t, ts.Client(), ts.URL+PathEmbeddings, `{"model":"text-embedding-3-small","input":"abcd","encoding_format":"base64"}`)
	body = decode(t, resp.Body)
	resp.Body.Close()
	raw, err := base64.StdEncoding.DecodeString(field(t, body, "data", 0, "embedding").(string))
	if err != nil || len(raw) != 4*defaultEmbeddingDimensions {
		t.Errorf("base64 embedding: %d bytes, %v; want %d", len(raw), err, 4*defaultEmbeddingDimensions)
	}
	if st := s.Stats(); st.TokensOut != 0 || st.Delivered != 2 {
		t.Errorf("stats %+v: embeddings generate no output tokens", st)
	}
}

func TestResponsesJSONAndStream(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathResponses, `{"model":"gpt-4.1","instructions":"abcd","input":"efgh"}`)
	body := decode(t, resp.Body)
	resp.Body.Close()
	if field(t, body, "object") != "response" || field(t, body, "status") != "completed" ||
		num(t, body, "usage", "input_tokens") != 2 || num(t, body, "usage", "output_tokens") != DefaultOutputTokens {
		t.Errorf("response %v", body)
	}
	if got := field(t, body, "output", 0, "content", 0, "text"); got != tokenText(0, DefaultOutputTokens) {
		t.Errorf("output text %v", got)
	}

	resp = post(t, ts.Client(), ts.URL+PathResponses,
		`{"model":"gpt-4.1","stream":true,"max_output_tokens":20,"input":[{"role":"user","content":[{"type":"input_text","text":"abcd"}]}]}`)
	evs := readEvents(t, resp.Body)
	resp.Body.Close()
	var names []string
	var text strings.Builder
	for i, ev := range evs {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] != ev.name || num(t, m, "sequence_number") != i {
			t.Errorf("event %d %q: type %v, sequence %v", i, ev.name, m["type"], m["sequence_number"])
		}
		if ev.name == "response.output_text.delta" {
			text.WriteString(m["delta"].(string))
		}
		if len(names) == 0 || names[len(names)-1] != ev.name {
			names = append(names, ev.name)
		}
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.incomplete"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("events\n%s\nwant\n%s", got, want)
	}
	if text.String() != tokenText(0, 20) {
		t.Errorf("streamed text %q", text.String())
	}
	last := evs[len(evs)-1].data
	if !strings.Contains(last, `"output_tokens":20`) || !strings.Contains(last, `"input_tokens":1`) {
		t.Errorf("final event lacks usage: %s", last)
	}
}

func TestAnthropicMessagesJSONAndStream(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathMessages,
		`{"model":"claude-sonnet-4-0","max_tokens":9,"system":"abcd","messages":[{"role":"user","content":"efgh"}]}`)
	body := decode(t, resp.Body)
	resp.Body.Close()
	if field(t, body, "type") != "message" || field(t, body, "stop_reason") != "max_tokens" ||
		num(t, body, "usage", "input_tokens") != 2 || num(t, body, "usage", "output_tokens") != 9 ||
		field(t, body, "content", 0, "text") != tokenText(0, 9) {
		t.Errorf("message %v", body)
	}

	resp = post(t, ts.Client(), ts.URL+PathMessages,
		`{"model":"claude-sonnet-4-0","max_tokens":30,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"abcd"}]}]}`)
	evs := readEvents(t, resp.Body)
	resp.Body.Close()
	var names []string
	var text strings.Builder
	for _, ev := range evs {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] != ev.name {
			t.Errorf("event %q carries type %v", ev.name, m["type"])
		}
		if ev.name == "content_block_delta" {
			text.WriteString(field(t, m, "delta", "text").(string))
		} else {
			names = append(names, ev.name)
		}
		if ev.name == "message_start" && num(t, m, "message", "usage", "input_tokens") != 1 {
			t.Errorf("message_start usage %v", m)
		}
		if ev.name == "message_delta" && num(t, m, "usage", "output_tokens") != 30 {
			t.Errorf("message_delta usage %v", m)
		}
	}
	if got := strings.Join(names, " "); got != "message_start content_block_start ping content_block_stop message_delta message_stop" {
		t.Errorf("events %s", got)
	}
	if text.String() != tokenText(0, 30) {
		t.Errorf("streamed text %q", text.String())
	}
}

func TestBadRequestsNameTheField(t *testing.T) {
	s, ts := newHTTP(t, Config{})
	for _, tc := range []struct {
		path, body string
		header     []string
		status     int
		param      string // OpenAI's error.param; "" means null
		contains   string
	}{
		{PathChatCompletions, `{"model":"m","messages":[`, nil, 400, "", "could not parse the JSON body"},
		{PathChatCompletions, ``, nil, 400, "", "empty"},
		{PathChatCompletions, `{"model":"m"}`, nil, 400, "messages", "required"},
		{PathChatCompletions, `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, "model", "required"},
		{PathChatCompletions, `{"model":"m","messages":["x"]}`, nil, 400, "messages[0]", "object"},
		{PathChatCompletions, `{"model":"m","max_tokens":"many","messages":[{"content":"x"}]}`, nil, 400, "max_tokens", "a number"},
		{PathChatCompletions, `{"model":"m","max_tokens":0,"messages":[{"content":"x"}]}`, nil, 400, "max_tokens", "[1, 131072]"},
		{PathChatCompletions, `{"model":"m","max_completion_tokens":200000,"messages":[{"content":"x"}]}`, nil, 400, "max_completion_tokens", "got 200000"},
		{PathChatCompletions, `{"model":"m","n":2,"messages":[{"content":"x"}]}`, nil, 400, "n", "one choice"},
		{PathChatCompletions, chatBody("m", "x", 0, false), []string{HeaderFault, "boom"}, 400, HeaderFault, `"boom"`},
		{PathChatCompletions, chatBody("m", "x", 0, false), []string{HeaderLatencyMs, "-5"}, 400, HeaderLatencyMs, `"-5"`},
		{PathEmbeddings, `{"model":"e"}`, nil, 400, "input", "required"},
		{PathEmbeddings, `{"model":"e","input":"x","dimensions":0}`, nil, 400, "dimensions", "got 0"},
		{PathEmbeddings, `{"model":"e","input":"x","encoding_format":"hex"}`, nil, 400, "encoding_format", "hex"},
		{PathResponses, `{"model":"m","max_output_tokens":-1}`, nil, 400, "max_output_tokens", "got -1"},
		{PathChatCompletions, `{"model":"m","messages":[{"content":"` + strings.Repeat("x", MaxRequestBytes) + `"}]}`, nil, 413, "", "larger than"},
	} {
		resp := post(t, ts.Client(), ts.URL+tc.path, tc.body, tc.header...)
		body := decode(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %.60s: status %d, want %d", tc.path, tc.body, resp.StatusCode, tc.status)
			continue
		}
		msg, _ := field(t, body, "error", "message").(string)
		param, _ := field(t, body, "error", "param").(string)
		if param != tc.param || !strings.Contains(msg, tc.contains) {
			t.Errorf("%s %.60s: param %q message %q; want param %q, message containing %q", tc.path, tc.body, param, msg, tc.param, tc.contains)
		}
		if field(t, body, "error", "type") != "invalid_request_error" {
			t.Errorf("%s: error type %v", tc.path, body)
		}
	}
	if st := s.Stats(); st.BadRequests != st.Received || st.Started != 0 {
		t.Errorf("stats %+v: bad requests must not start", st)
	}
}

func TestAnthropicErrorsUseAnthropicShape(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	resp := post(t, ts.Client(), ts.URL+PathMessages, `{"model":"claude","messages":[{"role":"user","content":"x"}]}`)
	body := decode(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || field(t, body, "type") != "error" || field(t, body, "error", "type") != "invalid_request_error" ||
		!strings.HasPrefix(field(t, body, "error", "message").(string), "max_tokens:") {
		t.Errorf("status %d body %v", resp.StatusCode, body)
	}
	resp = post(t, ts.Client(), ts.URL+PathMessages, `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, HeaderFault, "429")
	body = decode(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || field(t, body, "error", "type") != "rate_limit_error" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("status %d body %v headers %v", resp.StatusCode, body, resp.Header)
	}
}

func TestRoutesModelsAndStats(t *testing.T) {
	s, ts := newHTTP(t, Config{Slots: 3})
	resp, err := ts.Client().Get(ts.URL + PathModels)
	if err != nil {
		t.Fatal(err)
	}
	body := decode(t, resp.Body)
	resp.Body.Close()
	data := field(t, body, "data").([]any)
	if len(data) != len(BuiltinModels())-1 || field(t, data[0], "object") != "model" {
		t.Errorf("models %v", body)
	}
	for _, m := range data {
		if field(t, m, "id") == DefaultModelKey {
			t.Error("the default row is listed as a model")
		}
	}

	resp = post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 3, false))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// In queue mode nothing is ever refused: no rate limit to report.
	if got := resp.Header.Get("x-ratelimit-limit-requests"); got != "" {
		t.Errorf("x-ratelimit-limit-requests %q in queue mode, want none", got)
	}

	resp, err = ts.Client().Get(ts.URL + PathStats)
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st != s.Stats() || st.Delivered != 1 || st.TokensOut != 3 {
		t.Errorf("stats endpoint %+v, Stats() %+v", st, s.Stats())
	}

	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/v2/nothing", 404},
		{http.MethodGet, PathChatCompletions, 405},
		{http.MethodPost, PathModels, 405},
		{http.MethodDelete, PathStats, 405},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := decode(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || field(t, body, "error", "message") == "" {
			t.Errorf("%s %s: %d %v, want %d with an error body", tc.method, tc.path, resp.StatusCode, body, tc.status)
		}
	}
}
