package mockllm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestBucketRefillsContinuously drives the limiter with explicit times: a
// 60 rpm limit lets 60 requests in at once, refuses the 61st for a second,
// and refills one request a second, not all at once on the minute.
func TestBucketRefillsContinuously(t *testing.T) {
	l := newModelLimiter(ModelSpec{RPM: 60})
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 60 {
		v := l.take(t0, 1)
		if !v.ok || v.requests.remaining != 59-i {
			t.Fatalf("request %d: ok=%v remaining=%d, want ok and %d", i, v.ok, v.requests.remaining, 59-i)
		}
	}
	v := l.take(t0, 1)
	if v.ok || v.retryAfter != time.Second || v.requests.remaining != 0 || v.requests.reset != time.Minute {
		t.Fatalf("61st: %+v (requests %+v), want refused for 1s, reset in 1m", v, *v.requests)
	}
	if v := l.take(t0.Add(999*time.Millisecond), 1); v.ok {
		t.Fatal("admitted before a whole request had refilled")
	}
	if v := l.take(t0.Add(time.Second), 1); !v.ok {
		t.Fatalf("refused after 1s: %+v", v)
	}
	// Half a minute later half the bucket is back.
	if v := l.take(t0.Add(31*time.Second), 1); !v.ok || v.requests.remaining != 29 {
		t.Fatalf("after 31s: ok=%v remaining=%d, want 29", v.ok, v.requests.remaining)
	}
}

// TestTokenBucketChargesPromptAndMaxTokens: a request is charged its
// prompt plus its maximum output; one that alone exceeds the limit is
// refused for good (a minute) and charges nothing.
func TestTokenBucketChargesPromptAndMaxTokens(t *testing.T) {
	l := newModelLimiter(ModelSpec{TPM: 1000})
	t0 := time.Unix(1_700_000_000, 0)
	if v := l.take(t0, 600); !v.ok || v.tokens.remaining != 400 || v.requests != nil {
		t.Fatalf("first: %+v", v)
	}
	v := l.take(t0, 500)
	if v.ok || v.retryAfter != 6*time.Second { // 100 tokens at 1000/min
		t.Fatalf("second: ok=%v retryAfter=%v, want refused for 6s", v.ok, v.retryAfter)
	}
	if v := l.take(t0, 1001); v.ok || !v.tooLarge || v.tokens.remaining != 400 {
		t.Fatalf("too large: %+v", v)
	}
	if v := l.take(t0.Add(6*time.Second), 500); !v.ok || v.tokens.remaining != 0 {
		t.Fatalf("after 6s: %+v", v)
	}
}

// limitedCfg is an instant provider whose model "m" allows 3 requests and
// 1000 tokens a minute.
func limitedCfg() Config {
	return Config{Models: map[string]ModelSpec{"m": {RPM: 3, TPM: 1000}, DefaultModelKey: {}}}
}

// TestOpenAIRateLimitHeaders: the x-ratelimit-* headers count down with
// each request, reset as durations, and the request over the limit gets a
// 429 with Retry-After; a minute's share later the model answers again.
// Time is synctest's, so the values are exact.
func TestOpenAIRateLimitHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, limitedCfg())
		send := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			// 8 characters → 2 prompt tokens, plus 100 → 102 tokens.
			s.ServeHTTP(rec, newReq(t.Context(), PathChatCompletions, chatBody("m", "12345678", 100, false)))
			return rec
		}
		for i, want := range []struct{ req, tok, resetReq, resetTok string }{
			{"2", "898", "20s", "6.12s"},
			{"1", "796", "40s", "12.24s"},
			{"0", "694", "1m0s", "18.36s"},
		} {
			rec := send()
			h := rec.Result().Header
			if rec.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
			}
			got := []string{h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"),
				h.Get("x-ratelimit-reset-requests"), h.Get("x-ratelimit-limit-tokens"),
				h.Get("x-ratelimit-remaining-tokens"), h.Get("x-ratelimit-reset-tokens")}
			exp := []string{"3", want.req, want.resetReq, "1000", want.tok, want.resetTok}
			if strings.Join(got, " ") != strings.Join(exp, " ") {
				t.Fatalf("request %d headers %q, want %q", i, got, exp)
			}
		}
		rec := send()
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("4th request: %d, want 429", rec.Code)
		}
		h := rec.Result().Header
		if h.Get("Retry-After") != "20" || h.Get("retry-after-ms") != "20000" || h.Get("x-ratelimit-remaining-requests") != "0" {
			t.Fatalf("429 headers: %v", h)
		}
		if got := field(t, decode(t, rec.Body), "error", "code"); got != "rate_limit_exceeded" {
			t.Fatalf("429 code %v", got)
		}
		if st := s.Stats(); st.RateLimited != 1 || st.Started != 3 {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(20 * time.Second)
		if rec := send(); rec.Code != http.StatusOK || rec.Result().Header.Get("x-ratelimit-remaining-requests") != "0" {
			t.Fatalf("after 20s: %d %v", rec.Code, rec.Result().Header)
		}
		// Another model has limits of its own (here none).
		rec = httptest.NewRecorder()
		s.ServeHTTP(rec, newReq(t.Context(), PathChatCompletions, chatBody("other", "x", 1, false)))
		if rec.Code != http.StatusOK || rec.Result().Header.Get("x-ratelimit-limit-tokens") != "" {
			t.Fatalf("unlimited model: %d %v", rec.Code, rec.Result().Header)
		}
	})
}

// TestAnthropicRateLimitHeaders: on /v1/messages the limits are reported
// in anthropic-ratelimit-* headers with RFC 3339 resets, and a refusal is
// a 429 rate_limit_error with retry-after.
func TestAnthropicRateLimitHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, limitedCfg())
		body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"12345678"}]}`
		var rec *httptest.ResponseRecorder
		for i := range 3 {
			rec = httptest.NewRecorder()
			s.ServeHTTP(rec, newReq(t.Context(), PathMessages, body))
			if rec.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
			}
		}
		now := time.Now()
		h := rec.Result().Header
		want := map[string]string{
			"anthropic-ratelimit-requests-limit":     "3",
			"anthropic-ratelimit-requests-remaining": "0",
			"anthropic-ratelimit-requests-reset":     now.Add(time.Minute).UTC().Format(time.RFC3339),
			"anthropic-ratelimit-tokens-limit":       "1000",
			"anthropic-ratelimit-tokens-remaining":   "694",
			"anthropic-ratelimit-tokens-reset":       now.Add(18360 * time.Millisecond).UTC().Format(time.RFC3339),
		}
		for k, v := range want {
			if h.Get(k) != v {
				t.Errorf("%s = %q, want %q", k, h.Get(k), v)
			}
		}
		if h.Get("x-ratelimit-limit-requests") != "" {
			t.Errorf("OpenAI headers on /v1/messages: %v", h)
		}
		rec = httptest.NewRecorder()
		s.ServeHTTP(rec, newReq(t.Context(), PathMessages, body))
		if rec.Code != http.StatusTooManyRequests || rec.Result().Header.Get("retry-after") != "20" {
			t.Fatalf("4th: %d %v", rec.Code, rec.Result().Header)
		}
		m := decode(t, rec.Body)
		if field(t, m, "type") != "error" || field(t, m, "error", "type") != "rate_limit_error" {
			t.Fatalf("body %v", m)
		}
	})
}

// TestTokenLimitRefuses: a model with only a token limit refuses a request
// that does not fit, and one larger than the whole limit.
func TestTokenLimitRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Models: map[string]ModelSpec{"m": {TPM: 1000}}})
		send := func(maxTokens int) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, newReq(t.Context(), PathChatCompletions, chatBody("m", "12345678", maxTokens, false)))
			return rec
		}
		if rec := send(598); rec.Code != http.StatusOK || rec.Result().Header.Get("x-ratelimit-remaining-tokens") != "400" {
			t.Fatalf("first: %d %v", rec.Code, rec.Result().Header)
		}
		rec := send(498) // 500 tokens, 100 short: 6s
		if rec.Code != http.StatusTooManyRequests || rec.Result().Header.Get("retry-after-ms") != "6000" ||
			rec.Result().Header.Get("x-ratelimit-remaining-tokens") != "400" {
			t.Fatalf("second: %d %v", rec.Code, rec.Result().Header)
		}
		if rec := send(1000); rec.Code != http.StatusTooManyRequests ||
			!strings.Contains(rec.Body.String(), "Request too large") {
			t.Fatalf("too large: %d %s", rec.Code, rec.Body)
		}
	})
}

func TestNegativeLimitsAreConfigErrors(t *testing.T) {
	for _, m := range []ModelSpec{{RPM: -1}, {TPM: -5}} {
		_, err := New(Config{Models: map[string]ModelSpec{"m": m}})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, `Models["m"].`) {
			t.Fatalf("%+v: %v", m, err)
		}
	}
}

func setOutage(t *testing.T, url string, mode string) int {
	t.Helper()
	resp, err := http.Post(url+PathOutage, "application/json", strings.NewReader(`{"mode":"`+mode+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestOutageModes: over real HTTP, each outage mode does what it says to
// generation requests, the admin endpoint keeps answering, and "off"
// brings the provider back.
func TestOutageModes(t *testing.T) {
	s, ts := newHTTP(t, Config{})
	body := chatBody("gpt-4o-mini", "hi", 1, false)
	do := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+PathChatCompletions, strings.NewReader(body))
		return ts.Client().Do(req)
	}
	if code := setOutage(t, ts.URL, "refuse"); code != http.StatusOK {
		t.Fatalf("POST outage: %d", code)
	}
	if resp, err := do(t.Context()); err == nil {
		resp.Body.Close()
		t.Fatalf("refuse: got %d, want a connection error", resp.StatusCode)
	}

	setOutage(t, ts.URL, "500")
	resp, err := do(t.Context())
	if err != nil || resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("500: %v %v", resp, err)
	}
	resp.Body.Close()

	setOutage(t, ts.URL, "hang")
	held := make(chan int, 1)
	go func() {
		resp, err := do(context.Background())
		if err != nil {
			held <- -1
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Outage < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the hanging request never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case code := <-held:
		t.Fatalf("hang answered %d", code)
	default:
	}
	setOutage(t, ts.URL, "off")
	if code := <-held; code != http.StatusServiceUnavailable {
		t.Fatalf("held request answered %d when the outage ended, want 503", code)
	}
	resp, err = do(t.Context())
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("off: %v %v", resp, err)
	}
	resp.Body.Close()
	if s.CurrentOutage() != OutageOff {
		t.Fatal(s.CurrentOutage())
	}
}

func TestOutageBadInput(t *testing.T) {
	_, ts := newHTTP(t, Config{})
	for _, b := range []string{`{"mode":"down"}`, `{}`, `{"mode":"off","x":1}`, `nope`} {
		resp, err := http.Post(ts.URL+PathOutage, "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d", b, resp.StatusCode)
		}
	}
}

// TestUnlistedModelsShareTheDefaultRowsLimit: models the table does not
// list share the "*" row's buckets, so that a caller cannot escape a limit
// (or grow the server's memory) by inventing model names.
func TestUnlistedModelsShareTheDefaultRowsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Models: map[string]ModelSpec{DefaultModelKey: {RPM: 2}, "listed": {RPM: 1}}})
		for i, tc := range []struct {
			model string
			want  int
		}{{"a", 200}, {"b", 200}, {"c", 429}, {"listed", 200}, {"listed", 429}} {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, newReq(t.Context(), PathChatCompletions, chatBody(tc.model, "hi", 1, false)))
			if rec.Code != tc.want {
				t.Fatalf("call %d (%s): %d, want %d", i, tc.model, rec.Code, tc.want)
			}
		}
		if n := len(s.limiters); n != 2 {
			t.Fatalf("%d limiters, want 2", n)
		}
	})
}
