package spend

// bytesPerToken is the usual rule of thumb for English text with the
// tokenizers of current LLM APIs. It overestimates code and underestimates
// nothing badly; for text in scripts of several bytes per character it
// counts bytes, which errs high too. A reservation should err high: the
// actual cost replaces it when the response ends.
const bytesPerToken = 4

// inputKeys are the top-level request fields whose text is sent to the
// model as input, in the spellings of the OpenAI chat, completions,
// embeddings and responses APIs and Anthropic's messages API. Tool
// definitions are input too.
var inputKeys = map[string]bool{
	"messages": true, "prompt": true, "input": true, "system": true,
	"instructions": true, "tools": true, "functions": true,
}

// binaryKeys hold images, audio and files: base64 data whose length says
// nothing about tokens (an image costs a few hundred tokens whatever its
// size in bytes), so their text is not counted.
var binaryKeys = map[string]bool{
	"image_url": true, "image": true, "source": true, "input_audio": true,
	"audio": true, "file": true, "file_data": true, "data": true,
}

// maxDepth bounds nesting, so a hostile body cannot exhaust the stack.
const maxDepth = 256

// EstimateInputTokens estimates the input tokens of an LLM API request
// body: the length of the text under messages, prompt, input, system,
// instructions and tools (string contents as they appear in the JSON),
// divided by four and rounded up, plus one token per number under them
// (embeddings may send token ids). Image, audio and file data are skipped.
// A body that is not a well-formed JSON object is counted whole. The
// result is at least 1.
//
// It is deliberately a tokenizer-free estimate: exact counts need the
// model's tokenizer, and the reservation it feeds is replaced by the
// reported usage when the response ends. It scans the body once without
// allocating (about a microsecond per kilobyte).
func EstimateInputTokens(body []byte) int64 {
	s := scanner{b: body}
	s.ws()
	units, ok := int64(0), s.peek() == '{'
	if ok {
		units, ok = s.object(false, true, 0)
		s.ws()
		ok = ok && s.i == len(s.b)
	}
	if !ok {
		units = int64(len(body))
	}
	return max(1, (units+bytesPerToken-1)/bytesPerToken)
}

// scanner is a minimal JSON reader that counts text, nothing more: it
// checks structure enough to tell a JSON object from anything else, and
// does not decode escapes or numbers.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str reads a string and returns its raw contents.
func (s *scanner) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		switch s.b[i] {
		case '\\':
			i++
		case '"':
			s.i = i + 1
			return s.b[start:i], true
		}
	}
	return nil, false
}

// object reads an object from its '{'. At the top level a member counts
// when its key is an input key; below, when its parent counts and its key
// is not binary.
func (s *scanner) object(count, top bool, depth int) (int64, bool) {
	if depth > maxDepth {
		return 0, false
	}
	s.i++ // '{'
	var n int64
	s.ws()
	if s.peek() == '}' {
		s.i++
		return 0, true
	}
	for {
		s.ws()
		key, ok := s.str()
		if !ok {
			return n, false
		}
		s.ws()
		if s.peek() != ':' {
			return n, false
		}
		s.i++
		child := count && !binaryKeys[string(key)]
		if top {
			child = inputKeys[string(key)]
		}
		v, ok := s.value(child, depth+1)
		n += v
		if !ok {
			return n, false
		}
		if end, ok := s.next('}'); !ok || end {
			return n, ok
		}
	}
}

func (s *scanner) array(count bool, depth int) (int64, bool) {
	s.i++ // '['
	var n int64
	s.ws()
	if s.peek() == ']' {
		s.i++
		return 0, true
	}
	for {
		v, ok := s.value(count, depth+1)
		n += v
		if !ok {
			return n, false
		}
		if end, ok := s.next(']'); !ok || end {
			return n, ok
		}
	}
}

// next reads what follows a member or an element: ',' (more follow) or
// closer (end is true). Anything else is malformed (ok is false).
func (s *scanner) next(closer byte) (end, ok bool) {
	s.ws()
	switch s.peek() {
	case ',':
		s.i++
		return false, true
	case closer:
		s.i++
		return true, true
	}
	return false, false
}

func (s *scanner) value(count bool, depth int) (int64, bool) {
	s.ws()
	switch c := s.peek(); {
	case c == '{':
		return s.object(count, false, depth)
	case c == '[':
		if depth > maxDepth {
			return 0, false
		}
		return s.array(count, depth)
	case c == '"':
		v, ok := s.str()
		if !count {
			return 0, ok
		}
		return int64(len(v)), ok
	case c == '-' || (c >= '0' && c <= '9'):
		for s.i < len(s.b) && isNumberByte(s.b[s.i]) {
			s.i++
		}
		if count {
			return bytesPerToken, true
		}
		return 0, true
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return 0, true
			}
		}
		return 0, false
	}
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}
