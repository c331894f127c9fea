package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
)

// callHeaders is what the contract's request headers say.
type callHeaders struct {
	class   string
	timeout time.Duration
	// stated says the timeout is X-Sluice-Timeout-Ms: the caller's own
	// deadline for the whole call, which ends an answer still running at
	// it. The SDKs' X-Stainless-Timeout and the class's default decide
	// only whether the call starts and how long it waits (ending.go).
	stated  bool
	attempt int
	// declared says an attempt header was sent, 0 included: the chain
	// believes it and leaves the call out of retry recognition.
	declared bool
	// attemptBy names the header a retry (attempt ≥ 1) was declared by,
	// as sluice_retries_recognised_total's how: header
	// (X-Sluice-Attempt) or stainless (X-Stainless-Retry-Count).
	attemptBy string
	// degrade: X-Sluice-Degrade: allow — a cheaper model rather than a
	// refusal under load.
	degrade bool
}

// parseHeaders reads X-Sluice-Priority, the time budget (X-Sluice-Timeout-Ms,
// else the SDK's X-Stainless-Timeout, else the class's default) and the
// attempt headers. Every malformed value is an error naming its header: a default
// silently substituted for a typo would hide the caller's bug. A value is
// repeated in the error only up to contract.MaxEcho bytes.
func (g *Gateway) parseHeaders(h http.Header) (callHeaders, error) {
	var c callHeaders
	c.class = h.Get(contract.HeaderPriority)
	if c.class == "" {
		c.class = g.cfg.DefaultClass
	}
	cl, ok := g.cfg.Classes[c.class]
	if !ok {
		return c, wire.BadHeader(contract.HeaderPriority, "unknown priority %s (want one of %s)", contract.Echo(c.class), strings.Join(slices.Sorted(maps.Keys(g.cfg.Classes)), ", "))
	}
	c.timeout = cl.DefaultTimeout.D()
	if c.timeout == 0 {
		c.timeout = g.cfg.Limits.MaxTimeout.D()
	}
	if v := h.Get(contract.HeaderTimeoutMs); v != "" {
		limit := g.cfg.Limits.MaxTimeout.D().Milliseconds()
		ms, ok := parseDigits(v)
		switch {
		case !ok:
			return c, wire.BadHeader(contract.HeaderTimeoutMs, "%s is not a whole number of milliseconds (plain digits 0-9: no sign, exponent, fraction or inner space)", contract.Echo(v))
		case ms == 0:
			return c, wire.BadHeader(contract.HeaderTimeoutMs, "0: the time budget must be positive")
		case ms < 0 || ms > limit: // < 0: too many digits for an int64
			return c, wire.BadHeader(contract.HeaderTimeoutMs, "%s ms is above the limit of %d ms (limits.max_timeout)", contract.Echo(v), limit)
		}
		c.timeout, c.stated = time.Duration(ms)*time.Millisecond, true
	} else if d, ok := sdkTimeout(h.Get(contract.HeaderStainlessTimeout)); ok {
		// The official SDKs' own per-attempt timeout, sent unasked: the
		// caller gives up then, so waiting longer would serve nobody.
		c.timeout = min(d, g.cfg.Limits.MaxTimeout.D())
	}
	switch v := h.Get(contract.HeaderDegrade); v {
	case "":
	case contract.DegradeAllow:
		c.degrade = true
	default:
		return c, wire.BadHeader(contract.HeaderDegrade, "%s: the only value is %s (absent: the class's setting, degrade.classes)", contract.Echo(v), contract.DegradeAllow)
	}
	name, v := contract.HeaderAttempt, h.Get(contract.HeaderAttempt)
	if v == "" {
		name, v = contract.HeaderStainlessRetryCount, h.Get(contract.HeaderStainlessRetryCount)
	}
	if v != "" {
		n, ok := parseDigits(v)
		switch {
		case !ok:
			return c, wire.BadHeader(name, "%s is not a whole number (plain digits 0-9: no sign, exponent, fraction or inner space)", contract.Echo(v))
		case n < 0 || n > maxAttempt:
			return c, wire.BadHeader(name, "%s: an attempt number is at most %d", contract.Echo(v), maxAttempt)
		}
		c.attempt, c.declared = int(n), true
		if c.attempt > 0 {
			c.attemptBy = retryByHeader
			if name == contract.HeaderStainlessRetryCount {
				c.attemptBy = retryByStainless
			}
		}
	}
	return c, nil
}

// sdkTimeout reads X-Stainless-Timeout: the per-attempt timeout the
// official SDKs send in seconds — whole and truncated (the TypeScript and
// Go SDKs: "600"), or with a fraction (the Python SDK: "600.0"). It is not
// sluice's header, so a value it cannot read is ignored rather than
// refused, and so is 0: the Go SDK sends 0 for any timeout under a second,
// whose length it does not say.
func sdkTimeout(v string) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	whole, frac, _ := strings.Cut(v, ".")
	secs, ok := parseDigits(whole)
	if !ok || secs < 0 || secs > 1e6 {
		return 0, false
	}
	d := time.Duration(secs) * time.Second
	if frac != "" {
		f, ok := parseDigits(frac)
		if !ok || len(frac) > 9 {
			return 0, false
		}
		for range 9 - len(frac) {
			f *= 10
		}
		d += time.Duration(f)
	}
	return d, d > 0
}

// maxAttempt bounds X-Sluice-Attempt: no client retries a call a million
// times, and a bound keeps the number an int on every platform.
const maxAttempt = 1_000_000

// parseDigits reads a header value that must be a whole number written in
// ASCII digits, allowing only the spaces or tabs HTTP permits around a
// value. strconv.ParseInt would also take a sign ("+5000"), and callers
// of other parsers send exponents ("1e3"); accepting one spelling and not
// the other would be a guess either way. ok is false for anything but
// digits; n is -1 when the digits overflow an int64.
func parseDigits(v string) (n int64, ok bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		d := v[i]
		if d < '0' || d > '9' {
			return 0, false
		}
		if n >= 0 {
			if n > (math.MaxInt64-int64(d-'0'))/10 {
				n = -1
			} else {
				n = n*10 + int64(d-'0')
			}
		}
	}
	return n, true
}

// callBody is what the gateway reads of a JSON request body.
type callBody struct {
	raw       []byte
	model     string
	stream    bool
	maxTokens int64
}

// bodyFields are the top-level fields the gateway reads, in every API's
// spelling; every other field is forwarded unread.
var bodyFields = map[string]bool{
	"model": true, "stream": true,
	"max_tokens": true, "max_completion_tokens": true, "max_output_tokens": true,
}

// readBody reads a JSON body up to the limit: too large is 413 (at once
// when its Content-Length says so, else when the limit is passed), malformed or
// not an object is 400, nothing is forwarded in either case.
// A body that is not billed (a pass-through call) is read, bounded, and
// forwarded as it is.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, billed bool) (callBody, error) {
	limit := g.cfg.Limits.MaxBodyBytes
	if r.ContentLength > limit {
		// Refused before a byte is read: the declared size is enough,
		// and net/http closes the connection rather than drain it.
		return callBody{}, wire.BodyTooLarge("limits.max_body_bytes", limit)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		// A fixed message: err may name both socket addresses.
		return callBody{}, wire.BodyError(err, "limits.max_body_bytes", limit)
	}
	if !billed {
		return callBody{raw: raw}, nil
	}
	return decodeBody(raw)
}

// maxModelBytes bounds the model's name, which the gateway repeats in
// errors, headers and per-model statistics; real names are under 100.
const maxModelBytes = 256

// decodeBody reads the fields the gateway prices, admits and books by, in
// one pass over the top-level object, exactly as a provider that matches
// keys byte for byte reads them. json.Unmarshal into a struct would match
// keys case-insensitively and keep the last of duplicates, so that
// {"model":"o1-pro","MODEL":"gpt-4o-mini"} would be priced as one model and
// run as the other; here a top-level key that appears twice, in any case,
// is refused, so is a field the gateway reads spelled in another case
// ("MODEL" alone), and so is a key written with escapes ("m\u006fdel"),
// which the spend estimate's byte-level scanner would not recognise.
//
// The common body (a well-formed object of plain ASCII keys, each once)
// takes topLevelFast, which allocates nothing; anything else, and every
// body refused, takes topLevel, which says what is wrong. Both read the
// same fields the same way.
func decodeBody(raw []byte) (callBody, error) {
	b := callBody{raw: raw}
	visit := func(key string, value json.RawMessage) error {
		if !bodyFields[key] || string(value) == "null" {
			return nil
		}
		switch key {
		case "model":
			if s, ok := plainString(value); ok {
				b.model = s
			} else if err := json.Unmarshal(value, &b.model); err != nil {
				return invalidBody("model: must be a string")
			}
			if len(b.model) > maxModelBytes {
				return invalidBody(fmt.Sprintf("model: %s is longer than %d bytes", contract.Echo(b.model), maxModelBytes))
			}
		case "stream":
			switch string(value) {
			case "true":
				b.stream = true
			case "false":
				b.stream = false
			default:
				if err := json.Unmarshal(value, &b.stream); err != nil {
					return invalidBody("stream: must be a boolean")
				}
			}
		default:
			n, ok := parseDigits(string(value))
			if !ok || n < 0 || value[0] == '0' && len(value) > 1 {
				// Anything but plain digits (and an overflow, n < 0)
				// is decoded as JSON decodes it, which refuses a
				// fraction, an exponent and a sign alike.
				if err := json.Unmarshal(value, &n); err != nil || n < 0 {
					return invalidBody(key + ": must be a non-negative integer")
				}
			}
			// Of several token limits the largest is reserved: a
			// reservation errs high, and the books settle on usage.
			b.maxTokens = max(b.maxTokens, n)
		}
		return nil
	}
	ok, err := topLevelFast(raw, visit)
	if !ok {
		b = callBody{raw: raw}
		err = topLevel(raw, visit)
	}
	if err != nil {
		return callBody{raw: raw}, err
	}
	return b, nil
}

// plainString is the value of a JSON string written without escapes, in
// valid UTF-8 (value is a well-formed JSON value): the one allocation of
// the string itself, where json.Unmarshal takes several. Anything else is
// left to json.Unmarshal, which also replaces invalid UTF-8.
func plainString(value []byte) (string, bool) {
	if len(value) < 2 || value[0] != '"' || bytes.IndexByte(value, '\\') >= 0 || !utf8.Valid(value) {
		return "", false
	}
	return string(value[1 : len(value)-1]), true
}

// maxFastKeys is the most top-level keys topLevelFast compares pairwise;
// a body with more takes topLevel and its map.
const maxFastKeys = 32

// topLevelFast is topLevel for the common body, without allocating: a
// well-formed JSON object (json.Valid, which pools its scanner) whose
// top-level keys are ASCII without escapes, none twice in any case and no
// field of bodyFields in another case. It visits, as topLevel does, the
// members whose key is a field of bodyFields (the others are forwarded
// unread either way); ok is false, with nothing visited, for any
// other body, which the caller gives to topLevel to be read or refused
// with its reason.
func topLevelFast(raw []byte, visit func(key string, value json.RawMessage) error) (ok bool, err error) {
	if !json.Valid(raw) {
		return false, nil
	}
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false, nil
	}
	// Two passes: the keys are checked before any is visited, so that a
	// body topLevel must refuse has had nothing visited.
	var keys [maxFastKeys][2]int
	n := 0
	for pass := 0; pass < 2; pass++ {
		j := skipSpace(raw, i+1)
		for raw[j] != '}' {
			// raw[j] is '"': the object is well-formed.
			ks := j + 1
			ke := ks
			for raw[ke] != '"' {
				c := raw[ke]
				if c == '\\' || c >= 0x80 {
					return false, nil
				}
				ke++
			}
			if pass == 0 {
				if n == maxFastKeys {
					return false, nil
				}
				key := raw[ks:ke]
				for _, prev := range keys[:n] {
					if wire.EqualFoldASCII(raw[prev[0]:prev[1]], key) {
						return false, nil
					}
				}
				if foldedBodyField(key) {
					return false, nil
				}
				keys[n] = [2]int{ks, ke}
				n++
			}
			j = skipSpace(raw, ke+1) + 1 // past ':'
			j = skipSpace(raw, j)
			vs := j
			j = skipValue(raw, j)
			if name := bodyField(raw[ks:ke]); pass == 1 && name != "" {
				if err := visit(name, raw[vs:j]); err != nil {
					return true, err
				}
			}
			j = skipSpace(raw, j)
			if raw[j] == ',' {
				j = skipSpace(raw, j+1)
			}
		}
	}
	return true, nil
}

// bodyField is key as the field of bodyFields it is, or "" when none.
func bodyField(key []byte) string {
	switch string(key) {
	case "model":
		return "model"
	case "stream":
		return "stream"
	case "max_tokens":
		return "max_tokens"
	case "max_completion_tokens":
		return "max_completion_tokens"
	case "max_output_tokens":
		return "max_output_tokens"
	}
	return ""
}

// foldedBodyField says key is a field of bodyFields spelled in another
// case (ASCII key).
func foldedBodyField(key []byte) bool {
	upper := false
	for _, c := range key {
		if 'A' <= c && c <= 'Z' {
			upper = true
			break
		}
	}
	if !upper {
		return false
	}
	var buf [32]byte
	if len(key) > len(buf) {
		return false // longer than every field of bodyFields
	}
	low := buf[:len(key)]
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	return bodyFields[string(low)]
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the index just past the JSON value starting at
// raw[i], which json.Valid has checked is well-formed.
func skipValue(raw []byte, i int) int {
	depth := 0
	for ; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			for i++; raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the enclosing object's end
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		case ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

func invalidBody(msg string) *wire.BadRequest {
	return &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_json", Msg: msg}
}

// topLevel walks the members of the JSON object raw, calling visit with
// each key and the exact bytes of its value, and checks the whole body is
// one well-formed JSON object. It refuses a key that appears twice when
// keys are compared case-insensitively (Go's encoding/json reads them so,
// providers byte for byte), a field of bodyFields spelled in another case,
// and a key written with escapes.
func topLevel(raw []byte, visit func(key string, value json.RawMessage) error) error {
	notObject := invalidBody("request body must be a JSON object")
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return notObject
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	syntax := func(err error) error {
		return wire.InvalidJSON(err)
	}
	if _, err := dec.Token(); err != nil { // '{'
		return syntax(err)
	}
	seen := map[string]string{} // folded key → key as written
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return syntax(err)
		}
		key, ok := tok.(string)
		if !ok {
			return invalidBody(fmt.Sprintf("request body is not valid JSON: malformed at byte %d (an object key that is not a string)", before))
		}
		if bytes.IndexByte(raw[before:dec.InputOffset()], '\\') >= 0 {
			return invalidBody(fmt.Sprintf("%s: a top-level key must be written without escapes", contract.Echo(key)))
		}
		// Upper then lower folds what simple case folding folds, "ſ" and
		// the Kelvin sign included, as Go's own case-insensitive match does.
		folded := strings.ToLower(strings.ToUpper(key))
		if prev, dup := seen[folded]; dup {
			if prev == key {
				return invalidBody(fmt.Sprintf("%s: the key appears twice at the top level", contract.Echo(key)))
			}
			return invalidBody(fmt.Sprintf("%s: the key appears twice at the top level (also as %s); keys differing only in case are refused, since readers disagree on which one counts",
				contract.Echo(key), contract.Echo(prev)))
		}
		seen[folded] = key
		// A field the gateway reads, spelled in another case, is a model
		// or a limit for a reader that folds case and none for one that
		// does not: refused too, rather than guessed at.
		if bodyFields[folded] && key != folded {
			return invalidBody(fmt.Sprintf("%s: write the key as %q (keys are read case-sensitively)", contract.Echo(key), folded))
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return syntax(err)
		}
		if err := visit(key, value); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return syntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidBody("request body must be one JSON object, with nothing after it")
	}
	return nil
}

// rewriteModel replaces the top-level "model" of a body that decodeBody
// accepted, splicing the new value over the old bytes: the other members
// keep their order and bytes, and nothing is re-marshalled through a map. A
// body without a model gets one as its first member.
func rewriteModel(raw []byte, model string) ([]byte, error) {
	v, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if tok != "model" {
			continue
		}
		end := int(dec.InputOffset())
		start := end - len(value)
		if start < 0 || !bytes.Equal(raw[start:end], value) {
			return nil, errors.New("model: cannot locate the value to rewrite")
		}
		return slices.Concat(raw[:start], v, raw[end:]), nil
	}
	open := bytes.IndexByte(raw, '{') + 1
	member := slices.Concat([]byte(`"model":`), v)
	if bytes.TrimSpace(raw[open:])[0] != '}' {
		member = append(member, ',')
	}
	return slices.Concat(raw[:open], member, raw[open:]), nil
}
