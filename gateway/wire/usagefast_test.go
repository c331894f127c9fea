package wire

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/mockllm"
)

// chatAnswer is a short chat completion as OpenAI writes it.
const chatAnswer = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The image shows a wooden boardwalk path running through a lush green field or meadow. The sky is bright blue with some scattered clouds, giving the scene a serene and peaceful atmosphere.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`

// merged is what a meter has merged.
type merged struct {
	usage             contract.Usage
	found, cacheApart bool
}

func mergedOf(m *UsageMeter) merged { return merged{m.usage, m.found, m.cacheApart} }

// readAndDecode reads b both ways: by hand (ok says readUsage took it)
// and with the decoder.
func readAndDecode(b []byte) (fast, slow merged, ok bool) {
	var f, s UsageMeter
	ok = f.readUsage(b)
	s.decode(b)
	return mergedOf(&f), mergedOf(&s), ok
}

// TestReadUsageTakesProviderAnswers: the answers and usage events of
// every API shape are read by hand, not decoded, and alike.
func TestReadUsageTakesProviderAnswers(t *testing.T) {
	bodies := []string{
		chatAnswer,
		`{"usage":{"input_tokens":10,"output_tokens":5,"input_tokens_details":{"cached_tokens":3}}}`,
		`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4","content":[{"type":"text","text":"Hi {\"usage\": 1}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"output_tokens":503,"cache_creation_input_tokens":0,"cache_read_input_tokens":1800,"service_tier":"standard"}}`,
		`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":9,"cache_read_input_tokens":4,"output_tokens":1}}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}`,
		`{"type":"response.completed","response":{"id":"resp_1","output":[],"usage":{"input_tokens":1,"output_tokens":2,"input_tokens_details":{"cached_tokens":null}}}}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":null}}`,
		` {"usage" : { "prompt_tokens" : -1 , "completion_tokens" : null } } `,
		`{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":-9223372036854775808}}`,
		`{"object":"list","data":[{"embedding":[0.1,-2e-3,[{}]]}],"usage":null}`,
		`{}`,
	}
	// And the real mock's answers and usage events.
	mock, err := mockllm.New(mockllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mock)
	defer srv.Close()
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":12}`},
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"hi"}`},
		{"/v1/responses", `{"model":"m","input":"hi","max_output_tokens":7}`},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi","max_output_tokens":3}`},
		{"/v1/messages", `{"model":"claude-3-5-haiku","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"claude-3-5-haiku","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			bodies = append(bodies, string(body))
			continue
		}
		for l := range bytes.Lines(body) {
			if data, ok := bytes.CutPrefix(bytes.TrimSpace(l), []byte("data:")); ok && carriesUsage(data) {
				bodies = append(bodies, string(bytes.TrimSpace(data)))
			}
		}
	}
	for _, b := range bodies {
		fast, slow, ok := readAndDecode([]byte(b))
		if !ok {
			t.Errorf("%s: left to the decoder, want read by hand", b)
		} else if fast != slow {
			t.Errorf("%s: read %+v, decoded %+v", b, fast, slow)
		}
	}
}

// TestReadUsageLeavesUnusualToDecoder: whatever the decoder reads in its
// own way — a refusal, a key in another case or with escapes, the last
// of duplicates — readUsage leaves to it, and parse then agrees with it.
func TestReadUsageLeavesUnusualToDecoder(t *testing.T) {
	for _, b := range []string{
		`{"usage":{"prompt_tokens":1}`,                              // not JSON
		`{"usage":{"prompt_tokens":1}} x`,                           // trailing bytes
		`[{"usage":{"prompt_tokens":1}}]`,                           // not an object
		`null`,                                                      // the decoder's no-op
		`{"Usage":{"prompt_tokens":1}}`,                             // another case
		`{"usage":{"PROMPT_TOKENS":1}}`,                             //
		`{"\u0075sage":{"prompt_tokens":1}}`,                        // an escape
		"{\"usage\":{\"\u212a\":1,\"prompt_to\u212aens\":1}}",       // Kelvin sign: k to the decoder
		"{\"u\u017fage\":{\"prompt_tokens\":1}}",                    // long s: s to the decoder
		`{"usage":{"prompt_tokens":1},"usage":{"output_tokens":2}}`, // merged by the decoder
		`{"usage":{"prompt_tokens":1,"prompt_tokens":null}}`,        // the last wins
		`{"usage":{"prompt_tokens":1.0}}`,                           // a fraction
		`{"usage":{"prompt_tokens":1e3}}`,                           // an exponent
		`{"usage":{"prompt_tokens":9223372036854775808}}`,           // an overflow
		`{"usage":{"prompt_tokens":"1"}}`,                           // another kind
		`{"usage":{"prompt_tokens_details":{"cached_tokens":true}}}`,
		`{"usage":[],"other":1}`,
		`{"message":"hello","usage":{"prompt_tokens":1}}`,
		`{"response":{"usage":{"input_tokens":1},"Usage":null}}`,
	} {
		fast, slow, ok := readAndDecode([]byte(b))
		if ok {
			t.Errorf("%s: read by hand (%+v; decoded %+v), want left to the decoder", b, fast, slow)
		}
		var m UsageMeter
		m.parse([]byte(b))
		if mergedOf(&m) != slow {
			t.Errorf("%s: parse %+v, decoder %+v", b, m, slow)
		}
	}
}

// FuzzReadUsage: on any body readUsage takes, it reads what the decoder
// reads. Its seeds run in go test; .ci/run fuzzes it briefly (1.4 million
// executions ran when it was written: go test -run '^$' -fuzz
// FuzzReadUsage -fuzztime 180s ./gateway/wire/).
func FuzzReadUsage(f *testing.F) {
	f.Add([]byte(chatAnswer))
	f.Add([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":9,"cache_read_input_tokens":4,"output_tokens":1}}}`))
	f.Add([]byte(`{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2,"input_tokens_details":{"cached_tokens":3}}},"usage":{"input_tokens":5}}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":-1,"completion_tokens":null,"x":[1,{"y":"\"}"}]},"z":"\\"}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":1},"usage":{"output_tokens":2}}`))
	f.Add([]byte(`{"message":{"usage":{"output_tokens":-0}},"response":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, slow, ok := readAndDecode(b)
		if ok && fast != slow {
			t.Fatalf("%q: read %+v, decoded %+v", b, fast, slow)
		}
		if !ok && fast != (merged{}) {
			t.Fatalf("%q: left to the decoder with %+v merged", b, fast)
		}
	})
}

// BenchmarkUsageJSONAnswer is reading the usage of a short chat answer:
// by hand (parse, as the meter does) and with the decoder alone.
func BenchmarkUsageJSONAnswer(b *testing.B) {
	body := []byte(chatAnswer)
	for _, c := range []struct {
		name string
		read func(m *UsageMeter, b []byte)
	}{{"parse", (*UsageMeter).parse}, {"decode", (*UsageMeter).decode}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var m UsageMeter
				c.read(&m, body)
				if !m.found {
					b.Fatal("no usage")
				}
			}
		})
	}
}
