package mockllm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/workload"
)

// These tests cover the call's size: per-token service time and
// X-Mock-Output-Tokens.

// With per-token parts and Sigma 0 a call takes exactly Median plus its
// tokens' parts, times the model's factor: a short and a long answer to
// the same prompt take very different times, and the time is
// workload.ServiceModel's.
func TestPerTokenServiceTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Median: 50 * time.Millisecond, PerPromptToken: 20 * time.Microsecond, PerOutputToken: 2 * time.Millisecond,
			Models: map[string]ModelSpec{"slow": {LatencyFactor: 2}, DefaultModelKey: {}}}
		s := newServer(t, cfg)
		sm := workload.ServiceModel{Base: cfg.Median, PerPromptToken: cfg.PerPromptToken, PerOutputToken: cfg.PerOutputToken}
		prompt := strings.Repeat("x", 400) // 100 tokens
		for _, tc := range []struct {
			model     string
			maxTokens int
			header    []string
			want      time.Duration
		}{
			{"m", 10, nil, 72 * time.Millisecond},                                    // 50 + 100×0.02 + 10×2
			{"m", 1000, nil, 2052 * time.Millisecond},                                // 50 + 2 + 1000×2
			{"slow", 10, nil, 144 * time.Millisecond},                                // the factor multiplies the whole
			{"m", 1000, []string{HeaderOutputTokens, "100"}, 252 * time.Millisecond}, // the answer's length, not its maximum
			{"m", 10, []string{HeaderLatencyMs, "7"}, 7 * time.Millisecond},          // the override still wins
		} {
			r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody(tc.model, prompt, tc.maxTokens, false), tc.header...), time.Now())
			if r.rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", r.rec.Code, r.rec.Body)
			}
			if ms := r.rec.Header().Get("X-Mock-Service-Ms"); r.elapsed != tc.want || ms != strconv.FormatInt(tc.want.Milliseconds(), 10) {
				t.Errorf("%s, max_tokens %d, %v: took %v (X-Mock-Service-Ms %s), want %v", tc.model, tc.maxTokens, tc.header, r.elapsed, ms, tc.want)
			}
		}
		for _, out := range []int{10, 1000} {
			if got, want := s.serviceTime(ModelSpec{}, 100, out, s.start), sm.Time(100, out, 0); got != want {
				t.Errorf("%d answer tokens: %v, workload.ServiceModel says %v", out, got, want)
			}
		}
	})
}

// A zero Median with a per-token part has no fixed part, and is not the
// zero-latency fast path.
func TestPerTokenServiceTimeWithoutMedian(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{PerOutputToken: time.Millisecond})
		r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("m", "hi", 7, false)), time.Now())
		if r.elapsed != 7*time.Millisecond {
			t.Errorf("7 tokens at 1ms each took %v, want 7ms", r.elapsed)
		}
	})
}

// Without per-token parts the draws are those of a server that has none:
// the sequence of service times does not depend on the calls' sizes.
func TestNoPerTokenPartsKeepTheDraws(t *testing.T) {
	cfg := Config{Median: time.Second, Sigma: 0.5, Seed: 7}
	a, b := newServer(t, cfg), newServer(t, cfg)
	for i := range 50 {
		if da, db := a.serviceTime(ModelSpec{}, 1, 1, a.start), b.serviceTime(ModelSpec{}, 1000*i, 5000, b.start); da != db {
			t.Fatalf("draw %d: %v and %v", i, da, db)
		}
	}
}

// The default Retry-After is the median of an answer of the default
// length.
func TestRetryAfterCountsTheDefaultAnswer(t *testing.T) {
	s := newServer(t, Config{Median: 100 * time.Millisecond, PerOutputToken: 10 * time.Millisecond, OutputTokens: 20})
	if got := s.retryAfter(s.start); got != 300*time.Millisecond {
		t.Errorf("retry after %v, want 100ms + 20 × 10ms", got)
	}
}

// X-Mock-Output-Tokens shortens the answer below the request's maximum,
// which then ends on its own; it cannot lengthen it past the maximum.
// Usage and billing count what was written, in every API and in streams.
func TestOutputTokensHeader(t *testing.T) {
	s, ts := newHTTP(t, Config{})
	var billed int64
	check := func(path, body, n string, wantTokens int, usage func(map[string]any) int, reason func(map[string]any) any, wantReason any) {
		t.Helper()
		resp := post(t, ts.Client(), ts.URL+path, body, HeaderOutputTokens, n)
		got := decode(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: status %d %v", path, n, resp.StatusCode, got)
		}
		if u, r := usage(got), reason(got); u != wantTokens || r != wantReason {
			t.Errorf("%s %s: %d tokens, end %v; want %d, %v", path, body, u, r, wantTokens, wantReason)
		}
		billed += int64(wantTokens)
	}
	chatUsage := func(m map[string]any) int { return num(t, m, "usage", "completion_tokens") }
	chatReason := func(m map[string]any) any { return field(t, m, "choices", 0, "finish_reason") }
	check(PathChatCompletions, chatBody("m", "x", 50, false), "7", 7, chatUsage, chatReason, "stop")
	check(PathChatCompletions, chatBody("m", "x", 50, false), "50", 50, chatUsage, chatReason, "length")
	check(PathChatCompletions, chatBody("m", "x", 50, false), "80", 50, chatUsage, chatReason, "length")
	check(PathChatCompletions, chatBody("m", "x", 0, false), "200", 200, chatUsage, chatReason, "stop") // no maximum: longer than the default
	check(PathChatCompletions, `{"model":"m","max_completion_tokens":9,"messages":[{"content":"x"}]}`, "12", 9, chatUsage, chatReason, "length")
	check(PathCompletions, `{"model":"m","prompt":"x","max_tokens":50}`, "7", 7, chatUsage, chatReason, "stop")

	msgUsage := func(m map[string]any) int { return num(t, m, "usage", "output_tokens") }
	msgReason := func(m map[string]any) any { return field(t, m, "stop_reason") }
	messages := `{"model":"claude","max_tokens":50,"messages":[{"role":"user","content":"x"}]}`
	check(PathMessages, messages, "7", 7, msgUsage, msgReason, "end_turn")
	check(PathMessages, messages, "60", 50, msgUsage, msgReason, "max_tokens")

	respReason := func(m map[string]any) any { return field(t, m, "status") }
	check(PathResponses, `{"model":"m","input":"x","max_output_tokens":50}`, "7", 7, msgUsage, respReason, "completed")
	check(PathResponses, `{"model":"m","input":"x","max_output_tokens":50}`, "50", 50, msgUsage, respReason, "incomplete")

	// Streams: the text, the finish and the usage agree with the length.
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 50, true), HeaderOutputTokens, "7")
	evs := readEvents(t, resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var finish any
	for _, ev := range evs[:len(evs)-2] {
		var chunk map[string]any
		if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil {
			t.Fatal(err)
		}
		if c, ok := field(t, chunk, "choices", 0, "delta").(map[string]any)["content"].(string); ok {
			text.WriteString(c)
		}
		if fr := field(t, chunk, "choices", 0, "finish_reason"); fr != nil {
			finish = fr
		}
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(evs[len(evs)-2].data), &last); err != nil {
		t.Fatal(err)
	}
	if text.String() != tokenText(0, 7) || finish != "stop" || num(t, last, "usage", "completion_tokens") != 7 {
		t.Errorf("stream: text %q, finish %v, usage %v; want 7 tokens ending with stop", text.String(), finish, last["usage"])
	}
	billed += 7

	resp = post(t, ts.Client(), ts.URL+PathMessages,
		`{"model":"claude","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"x"}]}`, HeaderOutputTokens, "7")
	evs = readEvents(t, resp.Body)
	resp.Body.Close()
	for _, ev := range evs {
		if ev.name != "message_delta" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatal(err)
		}
		if field(t, m, "delta", "stop_reason") != "end_turn" || num(t, m, "usage", "output_tokens") != 7 {
			t.Errorf("message_delta %v, want end_turn after 7 tokens", m)
		}
	}
	billed += 7

	// Embeddings have no answer: the header changes nothing.
	resp = post(t, ts.Client(), ts.URL+PathEmbeddings, `{"model":"e","input":"x"}`, HeaderOutputTokens, "7")
	resp.Body.Close()
	if st := s.Stats(); st.TokensOut != billed || st.Delivered != st.Received {
		t.Errorf("stats %+v: want %d output tokens billed, every call delivered", st, billed)
	}
}

// The rate limits charge the request's maximum, as the providers'
// estimate does, however short the answer turns out.
func TestOutputTokensHeaderIsChargedTheMaximum(t *testing.T) {
	_, ts := newHTTP(t, Config{Models: map[string]ModelSpec{"m": {TPM: 1000}}})
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 100, false), HeaderOutputTokens, "5")
	resp.Body.Close()
	if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != "899" { // 1 prompt token + 100
		t.Errorf("remaining tokens %s, want 899", got)
	}
}

// A malformed X-Mock-Output-Tokens is a 400 in the endpoint's error shape
// naming the header, and starts nothing.
func TestOutputTokensHeaderMalformed(t *testing.T) {
	s, ts := newHTTP(t, Config{})
	for _, v := range []string{"many", "0", "-3", "1.5", "131073", "5x"} {
		resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 0, false), HeaderOutputTokens, v)
		body := decode(t, resp.Body)
		resp.Body.Close()
		msg, _ := field(t, body, "error", "message").(string)
		if resp.StatusCode != 400 || field(t, body, "error", "param") != HeaderOutputTokens ||
			!strings.HasPrefix(msg, HeaderOutputTokens+": ") || !strings.Contains(msg, "[1, 131072]") {
			t.Errorf("%q: status %d body %v, want a 400 naming %s", v, resp.StatusCode, body, HeaderOutputTokens)
		}
	}
	resp := post(t, ts.Client(), ts.URL+PathMessages,
		`{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, HeaderOutputTokens, "0")
	body := decode(t, resp.Body)
	resp.Body.Close()
	if msg, _ := field(t, body, "error", "message").(string); resp.StatusCode != 400 || field(t, body, "type") != "error" ||
		field(t, body, "error", "type") != "invalid_request_error" || !strings.HasPrefix(msg, HeaderOutputTokens+": ") {
		t.Errorf("Anthropic: status %d body %v", resp.StatusCode, body)
	}
	if st := s.Stats(); st.BadRequests != 7 || st.Started != 0 {
		t.Errorf("stats %+v: want 7 bad requests, none started", st)
	}
}
