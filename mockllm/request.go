package mockllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxRequestBytes bounds a request body; a larger one is answered 413.
const MaxRequestBytes = 16 << 20

// charsPerToken is the usual rule of thumb for English text and BPE
// tokenizers. The mock has no tokenizer on purpose: usage only needs to be
// proportional to the prompt and stable, so that cost figures mean
// something.
const charsPerToken = 4

// api is one endpoint's vocabulary: how to read its request and how to
// write its answers, whole or streamed.
type api interface {
	dialect() dialect
	// decode reads the request body into c: model, stream flags, prompt
	// size and the requested maximum of output tokens.
	decode(body []byte, c *call) error
	// body is the whole answer of a non-streamed request.
	body(c *call, text string) any
	// head goes out with the first piece of a stream, delta with every
	// piece, tail after the last one; abort replaces the tail when the
	// server closes mid-stream.
	head(c *call) []event
	delta(c *call, piece string) []event
	tail(c *call) []event
	abort(c *call) []event
}

// call is one generation request, as read from its body. It belongs to the
// handler's goroutine.
type call struct {
	model        string
	spec         ModelSpec
	stream       bool
	includeUsage bool // OpenAI stream_options.include_usage

	promptChars int  // characters of prompt text, for tokensIn
	maxTokens   *int // the request's maximum of output tokens, if any
	maxField    string

	tokensIn  int
	tokensOut int // the whole answer's completion tokens: what it writes and bills

	embed embedRequest // embeddings only

	id      uint64        // per server, for the response ids
	created int64         // Unix seconds at service start
	service time.Duration // the service time drawn (or set by X-Mock-Latency-Ms)
	seq     int           // Responses API stream sequence number
	cut     bool          // X-Mock-Fault: cut: break the answer off halfway
}

// parse reads and checks the body of a generation request.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, a api) (*call, error) {
	// With w, an oversized body also makes the server close the connection
	// rather than drain it.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body: larger than %d bytes", MaxRequestBytes)}
		}
		return nil, &apiError{status: http.StatusBadRequest, msg: "request body: " + err.Error()}
	}
	c := &call{}
	if err := a.decode(body, c); err != nil {
		return nil, err
	}
	if c.model == "" {
		return nil, badRequest("model", "required: name the model to call")
	}
	c.spec = lookupModel(s.models, c.model)
	c.tokensIn = max(1, (c.promptChars+charsPerToken-1)/charsPerToken)
	if _, ok := a.(embeddingsAPI); ok {
		return c, nil // embeddings generate no tokens
	}
	switch {
	case c.maxTokens == nil:
		c.tokensOut = s.defaultOutputTokens()
	case *c.maxTokens < 1 || *c.maxTokens > MaxOutputTokens:
		return nil, badRequest(c.maxField, "must be in [1, %d], got %d", MaxOutputTokens, *c.maxTokens)
	default:
		c.tokensOut = *c.maxTokens
	}
	return c, nil
}

// defaultOutputTokens is the answer's length when the request names no
// maximum: Config.OutputTokens, or DefaultOutputTokens.
func (s *Server) defaultOutputTokens() int {
	if s.cfg.OutputTokens == 0 {
		return DefaultOutputTokens
	}
	return s.cfg.OutputTokens
}

// setLength makes the answer n tokens long, as a model that decides to
// stop there (X-Mock-Output-Tokens): never longer than the request's
// maximum, which the answer then reaches as it would without the header.
// Embeddings have no answer to shorten.
func (c *call) setLength(a api, n int) {
	if _, ok := a.(embeddingsAPI); ok {
		return
	}
	c.tokensOut = n
	if c.maxTokens != nil {
		c.tokensOut = min(n, *c.maxTokens)
	}
}

// reachedMax reports whether the answer ends because it reached the
// request's maximum (finish_reason "length") rather than on its own. The
// mock writes the whole maximum unless X-Mock-Output-Tokens asks for less.
func (c *call) reachedMax() bool {
	return c.maxTokens != nil && c.tokensOut >= *c.maxTokens
}

// decodeJSON unmarshals a request body and turns the decoder's errors into
// 400s that name the field when there is one.
func decodeJSON(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return &apiError{status: http.StatusBadRequest, msg: "request body: empty; expected a JSON object"}
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return badRequest(te.Field, "must be %s, got a JSON %s", jsonKind(te.Type.Kind().String()), te.Value)
	}
	return &apiError{status: http.StatusBadRequest,
		msg: "We could not parse the JSON body of your request: " + err.Error()}
}

// jsonKind names a Go kind the way an API user thinks of it.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "ptr", "interface":
		return "a value of another type"
	}
	return "a number"
}

// textChars counts the characters of prompt text in a JSON value: a
// string, or the strings under content-bearing keys of arrays and objects
// (text parts, nested content, tool outputs and arguments). A number is a
// token id of a pre-tokenized prompt and counts as one token. Images, audio
// and ids are not text and are not counted.
func textChars(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return 0 // the caller has already decoded raw once; unreachable
	}
	return walkText(v)
}

var textKeys = map[string]bool{"text": true, "content": true, "output": true, "arguments": true, "input": true}

func walkText(v any) int {
	switch v := v.(type) {
	case string:
		return utf8.RuneCountInString(v)
	case float64:
		return charsPerToken // a token id in a pre-tokenized prompt
	case []any:
		n := 0
		for _, e := range v {
			n += walkText(e)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range v {
			if textKeys[k] {
				n += walkText(e)
			}
		}
		return n
	}
	return 0
}

// fillerWords make up generated text: each is roughly one token, so that
// the text's size agrees with the usage the answer reports.
var fillerWords = [...]string{" the", " mock", " model", " says", " this", " text", " is", " made", " up", " and", " billed", " anyway."}

// tokenText is the text of generated tokens [from, to).
func tokenText(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(fillerWords[i%len(fillerWords)])
	}
	return b.String()
}
