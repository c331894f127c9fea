package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
)

// The fuzz targets below run their seeds (f.Add and testdata/fuzz/) as part
// of go test; .ci/run fuzzes each for a few seconds. Each asserts what
// must hold for any input, not merely that nothing panics.

// fuzzGateway is a gateway that is never served: the fuzz targets call its
// parsers directly.
func fuzzGateway(f *testing.F, cfg config.Config) *Gateway {
	f.Helper()
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Getenv: func(string) string { return "sk-provider" }})
	if err != nil {
		f.Fatal(err)
	}
	return g
}

// checkBadRequest asserts err is a 4xx wire.BadRequest whose message
// stays short whatever the input: values are echoed up to maxEcho bytes,
// quoted.
func checkBadRequest(t *testing.T, err error, prefix string) {
	t.Helper()
	var br *wire.BadRequest
	if !errors.As(err, &br) {
		t.Fatalf("error %T %v is not a wire.BadRequest", err, err)
	}
	if br.Status < 400 || br.Status > 499 || br.Code == "" {
		t.Fatalf("error %+v: not a 4xx with a code", br)
	}
	if !strings.HasPrefix(br.Msg, prefix) || len(br.Msg) > 1024 || !utf8.ValidString(br.Msg) {
		t.Fatalf("error message %.2000q: want a short valid message starting with %q", br.Msg, prefix)
	}
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func FuzzParseHeaders(f *testing.F) {
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Limits.MaxTimeout = config.Duration(time.Minute)
	g := fuzzGateway(f, cfg)
	f.Add("", "", "", "")
	f.Add("batch", "5000", "1", "")
	f.Add("interactive", "+5000", "", "2")
	f.Add("speculative", "1e3", "-1", "x")
	f.Add(strings.Repeat("p", 200), " 60000 ", "01", "")
	f.Add("\xff", "60001", "99999999999999999999", "3")
	f.Fuzz(func(t *testing.T, priority, timeout, attempt, stainless string) {
		h := http.Header{}
		for k, v := range map[string]string{contract.HeaderPriority: priority, contract.HeaderTimeoutMs: timeout, contract.HeaderAttempt: attempt, contract.HeaderStainlessRetryCount: stainless} {
			if v != "" {
				h.Set(k, v)
			}
		}
		c, err := g.parseHeaders(h)
		if err != nil {
			checkBadRequest(t, err, "X-")
			return
		}
		if c.timeout <= 0 || c.timeout > time.Minute || c.attempt < 0 || c.attempt > maxAttempt {
			t.Fatalf("accepted out of range: %+v", c)
		}
		if _, ok := g.cfg.Classes[c.class]; !ok {
			t.Fatalf("accepted unknown class %q", c.class)
		}
		if timeout != "" && !isDigits(strings.Trim(timeout, " \t")) {
			t.Fatalf("timeout %q accepted: not plain digits", timeout)
		}
		if a := attempt; a != "" && !isDigits(strings.Trim(a, " \t")) {
			t.Fatalf("attempt %q accepted: not plain digits", a)
		}
	})
}

// exactKeys is what a provider reading keys byte for byte sees: a
// map[string] keeps keys as written.
func exactKeys(raw []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	return m, json.Unmarshal(raw, &m)
}

func FuzzDecodeBody(f *testing.F) {
	for _, s := range apiShapes {
		f.Add([]byte(strings.Replace(s.body, "%s", "", 1)))
		f.Add([]byte(strings.Replace(s.body, "%s", `,"MODEL":"o1-pro"`, 1)))
	}
	for _, s := range []string{
		`{"model":"a","model":"b"}`, `{"m\u006fdel":"a"}`, `{"ſtream":true,"stream":false}`,
		`{"model":"a"} x`, `{"max_tokens":1e3}`, `{}`, ` {"a":[{"model":"x"}]} `, `[1]`, `{"model":null,"stream":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := decodeBody(raw)
		// The fast path (topLevelFast) and topLevel read a body alike:
		// what the fast one takes, the other takes with the same fields.
		slow := callBody{raw: raw}
		slowErr := topLevel(raw, func(key string, value json.RawMessage) error {
			var v any
			_ = json.Unmarshal(value, &v)
			switch key {
			case "model":
				slow.model, _ = v.(string)
			case "stream":
				slow.stream, _ = v.(bool)
			}
			return nil
		})
		seen := map[string]json.RawMessage{}
		if ok, _ := topLevelFast(raw, func(key string, value json.RawMessage) error { seen[key] = value; return nil }); ok {
			if slowErr != nil {
				t.Fatalf("%q: the fast path took a body topLevel refuses: %v", raw, slowErr)
			}
			m, _ := exactKeys(raw)
			for k, v := range m {
				if bodyFields[k] && !bytes.Equal(seen[k], v) {
					t.Fatalf("%q: the fast path read %s as %q, want %q", raw, k, seen[k], v)
				}
			}
		}
		if err == nil && (slowErr != nil || b.model != slow.model && slow.model != "" || b.stream != slow.stream) {
			t.Fatalf("%q: decodeBody read %+v, topLevel %+v (%v)", raw, b, slow, slowErr)
		}
		if err != nil {
			checkBadRequest(t, err, "")
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		m, err := exactKeys(raw)
		if err != nil {
			t.Fatalf("accepted %q, which is not an object: %v", raw, err)
		}
		folded := map[string]bool{}
		for k := range m {
			f := strings.ToLower(strings.ToUpper(k))
			if folded[f] {
				t.Fatalf("accepted %q with keys differing only in case", raw)
			}
			folded[f] = true
		}
		var model string
		if v, ok := m["model"]; ok {
			_ = json.Unmarshal(v, &model)
		}
		var maxTokens int64
		for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
			var n int64
			if v, ok := m[k]; ok && json.Unmarshal(v, &n) == nil {
				maxTokens = max(maxTokens, n)
			}
		}
		if b.model != model || b.maxTokens != maxTokens {
			t.Fatalf("%q: the gateway read model %q max %d, an exact reader %q %d", raw, b.model, b.maxTokens, model, maxTokens)
		}
		// The degrade rewrite changes the model and nothing else.
		out, err := rewriteModel(raw, "cheaper")
		if err != nil {
			t.Fatalf("rewriteModel(%q): %v", raw, err)
		}
		after, err := exactKeys(out)
		if err != nil {
			t.Fatalf("rewriteModel(%q) = %q: %v", raw, out, err)
		}
		if string(after["model"]) != `"cheaper"` || len(after) != len(m)+btoi(m["model"] == nil) {
			t.Fatalf("rewriteModel(%q) = %q", raw, out)
		}
		for k, v := range m {
			if k != "model" && !bytes.Equal(after[k], v) {
				t.Fatalf("rewriteModel(%q) = %q: %s changed", raw, out, k)
			}
		}
		if b2, err := decodeBody(out); err != nil || b2.model != "cheaper" {
			t.Fatalf("the rewritten body %q reads as %+v, %v", out, b2, err)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func FuzzTenantKey(f *testing.F) {
	keys := map[string]string{"sk-alpha": "alpha", "sk-beta beta": "beta"}
	var cfgs []chain.TenantConfig
	for k, name := range keys {
		cfgs = append(cfgs, chain.TenantConfig{Name: name, APIKeysSHA256: []string{HashKey(k)}})
	}
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = cfgs
	g, err := New(cfg, Options{Getenv: func(string) string { return "sk-provider" }})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("Bearer sk-alpha", "")
	f.Add("bearer   sk-beta beta  ", "")
	f.Add("", "sk-alpha")
	f.Add("Basic sk-alpha", "sk-beta beta")
	f.Add("Bearer ", "sk-nope")
	f.Add("BEARER\tsk-alpha", "")
	f.Fuzz(func(t *testing.T, auth, apiKey string) {
		r := &http.Request{Header: http.Header{}}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if apiKey != "" {
			r.Header.Set("X-Api-Key", apiKey)
		}
		presented := bearer(auth)
		if presented != strings.TrimSpace(presented) {
			t.Fatalf("bearer(%q) = %q: not trimmed", auth, presented)
		}
		if presented != "" && !strings.EqualFold(auth[:7], "Bearer ") {
			t.Fatalf("bearer(%q) = %q without the Bearer scheme", auth, presented)
		}
		if presented == "" {
			presented = apiKey
		}
		got, _, found := g.identify(r)
		want, ok := keys[presented]
		switch {
		case ok && (!found || got != want):
			t.Fatalf("key %q: identified as %q, want %s", presented, got, want)
		case !ok && found:
			t.Fatalf("key %q is no tenant's, identified as %s", presented, got)
		}
	})
}
