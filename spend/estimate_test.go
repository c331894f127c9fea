package spend_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/spend"
)

func TestEstimateInputTokens(t *testing.T) {
	long := strings.Repeat("abcd", 1000) // 4000 bytes: 1000 tokens
	img := strings.Repeat("A", 100_000)  // base64 image data: not text
	for _, tc := range []struct {
		name string
		body string
		want int64
	}{
		{"chat", `{"model":"gpt-4o","messages":[{"role":"user","content":"` + long + `"}]}`, 1001}, // + "user"
		{"chat parts with an image", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + long +
			`"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}}]}]}`, 1005}, // 4000 + "user","text","image_url" = 4017 bytes
		{"completions prompt", `{"model":"m","prompt":"` + long + `","max_tokens":5}`, 1000},
		{"prompt list", `{"prompt":["abcd","abcd"]}`, 2},
		{"embeddings token ids", `{"input":[1,2,3,4,5]}`, 5},
		{"responses input and instructions", `{"instructions":"abcdabcd","input":[{"role":"user","content":[{"type":"input_text","text":"abcd"}]}]}`, 2 + 5},
		{"anthropic system and messages", `{"system":"abcdabcd","messages":[{"role":"user","content":"abcd"}],"max_tokens":100}`, 2 + 2},
		{"tools count as input", `{"messages":[],"tools":[{"type":"function","function":{"name":"abcd","description":"abcdabcd"}}]}`, 2 + 1 + 2},
		{"other fields do not count", `{"model":"` + long + `","user":"` + long + `","metadata":{"x":"` + long + `"}}`, 1},
		{"empty object", `{}`, 1},
		{"not JSON: counted whole", long, 1000},
		{"a JSON array: counted whole", `["abcd"]`, 2},
		{"truncated JSON: counted whole", `{"messages":[{"content":"abcdabcdabcd`, 10}, // 37 bytes
		{"empty body", ``, 1},
		{"escapes count as written", `{"prompt":"a\"bcd\n"}`, 2}, // a \" b c d \n: 8 bytes
		{"trailing garbage: counted whole", `{"prompt":"abcd"} xyz`, 6},
		{"nesting too deep: counted whole", `{"prompt":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, 503},
		{"literals and numbers outside input", `{"stream":true,"temperature":0.7,"stop":null,"prompt":"abcd"}`, 1},
		{"multi-byte text counts bytes", `{"prompt":"` + strings.Repeat("é", 8) + `"}`, 4},
	} {
		if got := spend.EstimateInputTokens([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzEstimateInputTokens: any body gets an estimate of at least 1 and at
// most the estimate of its whole length, doubled (a number counts a token
// and takes at least two bytes with its separator), without panicking.
func FuzzEstimateInputTokens(f *testing.F) {
	for _, seed := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `{"input":[1,2,3]}`, `{"prompt":"\"`, `[`, ``, `{"a":{"b":[`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n := spend.EstimateInputTokens(body)
		if n < 1 || n > int64(len(body))/2+1 {
			t.Fatalf("%d tokens for %d bytes", n, len(body))
		}
	})
}

func BenchmarkEstimateInputTokens(b *testing.B) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` +
		strings.Repeat("Summarise the following paragraph. ", 60) + `"}],"max_tokens":256}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		spend.EstimateInputTokens(body)
	}
}
