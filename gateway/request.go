package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// callHeaders is what the contract's request headers say.
type callHeaders struct {
	class   string
	timeout time.Duration
	attempt int
}

// parseHeaders reads X-Sluice-Priority, X-Sluice-Timeout-Ms and the attempt
// headers. Every malformed value is an error naming its header: a default
// silently substituted for a typo would hide the caller's bug.
func (g *Gateway) parseHeaders(h http.Header) (callHeaders, error) {
	var c callHeaders
	c.class = h.Get(contract.HeaderPriority)
	if c.class == "" {
		c.class = g.cfg.DefaultClass
	}
	cl, ok := g.cfg.Classes[c.class]
	if !ok {
		return c, badHeader(contract.HeaderPriority, "unknown priority %q (want one of %s)", c.class, strings.Join(sortedKeys(g.cfg.Classes), ", "))
	}
	c.timeout = cl.DefaultTimeout.D()
	if c.timeout == 0 {
		c.timeout = g.cfg.Limits.MaxTimeout.D()
	}
	if v := h.Get(contract.HeaderTimeoutMs); v != "" {
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case err != nil:
			return c, badHeader(contract.HeaderTimeoutMs, "%q is not a whole number of milliseconds", v)
		case ms <= 0:
			return c, badHeader(contract.HeaderTimeoutMs, "%d: the time budget must be positive", ms)
		case ms > g.cfg.Limits.MaxTimeout.D().Milliseconds():
			return c, badHeader(contract.HeaderTimeoutMs, "%d ms is above the limit of %d ms", ms, g.cfg.Limits.MaxTimeout.D().Milliseconds())
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	name, v := contract.HeaderAttempt, h.Get(contract.HeaderAttempt)
	if v == "" {
		name, v = contract.HeaderStainlessRetryCount, h.Get(contract.HeaderStainlessRetryCount)
	}
	if v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
			return c, badHeader(name, "%q is not a whole number", v)
		case n < 0:
			return c, badHeader(name, "%d: an attempt number cannot be negative", n)
		}
		c.attempt = n
	}
	return c, nil
}

// callBody is what the gateway reads of a JSON request body.
type callBody struct {
	raw       []byte
	model     string
	stream    bool
	maxTokens int64
}

// bodyFields are the fields of interest, in every API's spelling.
type bodyFields struct {
	Model               json.RawMessage `json:"model"`
	Stream              json.RawMessage `json:"stream"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
}

// readBody reads a JSON body up to the limit: too large is 413, malformed or
// not an object is 400, nothing is forwarded in either case.
// A body that is not billed (a pass-through call) is read, bounded, and
// forwarded as it is.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, billed bool) (callBody, error) {
	var b callBody
	limit := g.cfg.Limits.MaxBodyBytes
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return b, &badRequest{status: http.StatusRequestEntityTooLarge, code: "body_too_large",
				msg: "request body is larger than limits.max_body_bytes (" + strconv.FormatInt(limit, 10) + " bytes)"}
		}
		return b, &badRequest{status: http.StatusBadRequest, code: "invalid_body", msg: "reading the request body: " + err.Error()}
	}
	b.raw = raw
	if !billed {
		return b, nil
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return b, &badRequest{status: http.StatusBadRequest, code: "invalid_json", msg: "request body must be a JSON object"}
	}
	var f bodyFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return b, &badRequest{status: http.StatusBadRequest, code: "invalid_json", msg: "request body is not valid JSON: " + err.Error()}
	}
	if len(f.Model) > 0 && string(f.Model) != "null" {
		if err := json.Unmarshal(f.Model, &b.model); err != nil {
			return b, &badRequest{status: http.StatusBadRequest, code: "invalid_json", msg: "model: must be a string"}
		}
	}
	if len(f.Stream) > 0 && string(f.Stream) != "null" {
		if err := json.Unmarshal(f.Stream, &b.stream); err != nil {
			return b, &badRequest{status: http.StatusBadRequest, code: "invalid_json", msg: "stream: must be a boolean"}
		}
	}
	for _, m := range []struct {
		name string
		raw  json.RawMessage
	}{{"max_tokens", f.MaxTokens}, {"max_completion_tokens", f.MaxCompletionTokens}, {"max_output_tokens", f.MaxOutputTokens}} {
		if len(m.raw) == 0 || string(m.raw) == "null" {
			continue
		}
		var n int64
		if err := json.Unmarshal(m.raw, &n); err != nil || n < 0 {
			return b, &badRequest{status: http.StatusBadRequest, code: "invalid_json", msg: m.name + ": must be a non-negative integer"}
		}
		b.maxTokens = n
	}
	return b, nil
}
