package batch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/contract"
)

// Endpoints are the URLs a line may name: the gateway's gated APIs that
// OpenAI's Batch API takes.
var Endpoints = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}

// MaxLineErrors bounds the faults a failed batch lists: the first ones, by
// line. A batch's errors are read whole with every poll of it, so they are
// kept short; the first hundred are enough to fix a file from.
const MaxLineErrors = 100

// InputError is a file refused as a whole, at upload: Param is the field.
type InputError struct {
	Param string
	Msg   string
}

func (e *InputError) Error() string { return e.Msg }

// lineEnvelope is what a line may hold beyond its body: custom_id (512
// bytes), method, url and the JSON around them, with room to spare.
const lineEnvelope = 64 << 10

// DefaultMaxBodyBytes is the bound of a line's body when a Check or
// NewFileCheck is given none: the gateway's default limits.max_body_bytes.
const DefaultMaxBodyBytes = 10 << 20

// maxLineBytes is the longest line read whole for a body bound.
func maxLineBytes(maxBody int64) int {
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	return int(maxBody) + lineEnvelope
}

// fileCheck is NewFileCheck's reader.
type fileCheck struct {
	r         io.Reader
	maxLines  int
	maxFirst  int
	err       error
	carry     []byte // the bytes of a rune cut by the end of a read
	lines     int    // the lines that are not blank, so far
	nonBlank  bool   // the current line has a byte that is not space
	first     []byte // the first line that is not blank, while it is read
	long      bool   // the first line was too long to hold: its first byte alone checked
	notObject bool   // the first line does not start as a JSON object
}

// NewFileCheck reads r through what is checked of a batch file when it is
// uploaded, as it is read: that it is JSONL at all — UTF-8 text whose
// first line that is not blank is a JSON object — and holds between 1 and
// maxLines lines that are not blank. A fault is returned as the read's
// error, an *InputError, instead of the bytes that show it (or of io.EOF,
// for an empty file). Each line's content is checked later, by Validate,
// while a batch of it is validating: a bad line fails the batch with every
// bad line listed. Its memory is the first line, bounded as a line is
// (maxBody plus the line's other fields; zero means DefaultMaxBodyBytes):
// a first line longer than that is checked only for its first byte, the
// rest left to Validate. A fault of the first line is told when the line
// ends: a file over its bound first is refused for that.
func NewFileCheck(r io.Reader, maxLines int, maxBody int64) io.Reader {
	return &fileCheck{r: r, maxLines: maxLines, maxFirst: maxLineBytes(maxBody)}
}

func (c *fileCheck) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	if ierr := c.check(p[:n]); ierr != nil {
		c.err = ierr
		return 0, ierr
	}
	if err == io.EOF {
		if ierr := c.end(); ierr != nil {
			c.err = ierr
			return n, ierr
		}
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

func (c *fileCheck) check(b []byte) *InputError {
	// UTF-8, across reads: a rune cut at the end waits for the next.
	head := b
	if len(c.carry) > 0 {
		need := len(c.carry)
		for k := 0; k < len(b) && !utf8.FullRune(c.carry); k++ {
			c.carry = append(c.carry, b[k])
		}
		if !utf8.FullRune(c.carry) {
			return c.lineBytes(b)
		}
		if !utf8.Valid(c.carry) {
			return notUTF8()
		}
		head = b[len(c.carry)-need:]
		c.carry = c.carry[:0]
	}
	cut := len(head)
	for k := 1; k <= utf8.UTFMax-1 && k <= len(head); k++ {
		if utf8.RuneStart(head[len(head)-k]) {
			if !utf8.FullRune(head[len(head)-k:]) {
				cut = len(head) - k
			}
			break
		}
	}
	if !utf8.Valid(head[:cut]) {
		return notUTF8()
	}
	c.carry = append(c.carry, head[cut:]...)
	return c.lineBytes(b)
}

func notUTF8() *InputError {
	return &InputError{Param: "file", Msg: "the file is not UTF-8 text: a batch file is JSONL, one JSON object a line"}
}

// lineBytes counts the lines that are not blank and checks the first.
func (c *fileCheck) lineBytes(b []byte) *InputError {
	for _, x := range b {
		if x == '\n' {
			if c.nonBlank {
				if ierr := c.endLine(); ierr != nil {
					return ierr
				}
			}
			c.nonBlank = false
			continue
		}
		if !c.nonBlank && !isSpace(x) {
			c.nonBlank = true
			if c.lines == 0 {
				c.notObject = x != '{' // a CSV, a JSON array: told at the line's end
			}
		}
		if c.nonBlank && c.lines == 0 && !c.long {
			if len(c.first) == c.maxFirst {
				// Too long to hold: a line no live call could send, which
				// validation lists as such, by its number, if it starts
				// as an object.
				c.long, c.first = true, nil
				continue
			}
			c.first = append(c.first, x)
		}
	}
	return nil
}

func notJSONL() *InputError {
	return &InputError{Param: "file", Msg: "the file is not JSONL: its first line is not a JSON object (a batch file is one JSON object a line)"}
}

func isSpace(x byte) bool { return x == ' ' || x == '\t' || x == '\r' || x == '\v' || x == '\f' }

// endLine ends a line that is not blank.
func (c *fileCheck) endLine() *InputError {
	if c.lines++; c.lines == 1 {
		var v map[string]json.RawMessage
		if c.notObject || !c.long && (json.Unmarshal(c.first, &v) != nil || v == nil) {
			return notJSONL()
		}
		c.first = nil
	}
	if c.lines > c.maxLines {
		return &InputError{Param: "file", Msg: fmt.Sprintf("the file has more than %d requests (batch.max_requests): split it", c.maxLines)}
	}
	return nil
}

// end checks what only the end shows.
func (c *fileCheck) end() *InputError {
	if len(c.carry) > 0 {
		return notUTF8()
	}
	if c.nonBlank {
		if ierr := c.endLine(); ierr != nil {
			return ierr
		}
		c.nonBlank = false
	}
	if c.lines == 0 {
		return &InputError{Param: "file", Msg: "the file has no requests"}
	}
	return nil
}

// CheckFile is NewFileCheck's verdict on content.
func CheckFile(content []byte, maxLines int) *InputError {
	_, err := io.Copy(io.Discard, NewFileCheck(bytes.NewReader(content), maxLines, 0))
	var ierr *InputError
	if errors.As(err, &ierr) {
		return ierr
	}
	return nil
}

// lineReader reads a file a line at a time, each within max bytes: a
// longer line is read past, not kept.
type lineReader struct {
	r   *bufio.Reader
	max int
	n   int // lines read
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line, without its newline, and its 1-based
// number; long says it was over max (and line is empty). err is io.EOF
// after the last line.
func (l *lineReader) next() (line []byte, long bool, err error) {
	l.buf = l.buf[:0]
	read := false
	for {
		frag, err := l.r.ReadSlice('\n')
		read = read || len(frag) > 0
		if !long {
			if len(l.buf)+len(frag) > l.max+1 {
				long, l.buf = true, l.buf[:0]
			} else {
				l.buf = append(l.buf, frag...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && !read:
			return nil, false, io.EOF
		case err != nil && err != io.EOF:
			return nil, false, err
		}
		l.n++
		return bytes.TrimSuffix(l.buf, []byte("\n")), long, nil
	}
}

// lineFields are the fields of a line, in the order they are checked.
var lineFields = []string{"custom_id", "method", "url", "body"}

// ParseInput reads every line of an input file: the requests of the lines
// that are a JSON object of custom_id, method POST, a url among Endpoints
// and an object body, with a custom_id not seen before; and a fault for
// each other line, in line order, up to MaxLineErrors. Blank lines are
// skipped (a trailing newline is usual). The file is good only when there
// is no fault.
func ParseInput(content []byte, maxLines int) (reqs []Request, errs []LineError) {
	errs, _ = scan(bytes.NewReader(content), maxLines, 0, func(r Request) *LineError {
		reqs = append(reqs, r)
		return nil
	})
	return reqs, errs
}

// scan reads r a line at a time and calls good with each line that is a
// request by ParseInput's rules, within maxBody; its fault, if any, is
// listed as the line's. It returns the faults in line order, up to
// MaxLineErrors, and an error reading r. Its memory is one line and a hash
// of each custom_id.
func scan(r io.Reader, maxLines int, maxBody int64, good func(Request) *LineError) (errs []LineError, err error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	seen := map[[16]byte]int{}
	fault := func(e LineError) bool {
		errs = append(errs, e)
		return len(errs) < MaxLineErrors
	}
	lines := newLineReader(r, maxLineBytes(maxBody))
	n := 0
	for {
		raw, long, err := lines.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errs, err
		}
		line := lines.n
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 && !long {
			continue
		}
		if n++; n > maxLines {
			fault(LineError{Code: "too_many_tasks", Line: line, Message: fmt.Sprintf("more than %d requests in one file", maxLines)})
			return errs, nil
		}
		if long {
			if !fault(LineError{Code: "body_too_large", Line: line, Param: "body",
				Message: fmt.Sprintf("this line is longer than %d bytes: its body is over limits.max_body_bytes (%d bytes), which a live call may not pass", maxLineBytes(maxBody), maxBody)}) {
				return errs, nil
			}
			continue
		}
		rq, code, param, msg := parseLine(raw)
		if code == "" && int64(len(rq.Body)) > maxBody {
			code, param, msg = "body_too_large", "body", fmt.Sprintf("the body is %d bytes, over limits.max_body_bytes (%d bytes), which a live call may not pass", len(rq.Body), maxBody)
		}
		var h [16]byte
		if code == "" {
			sum := sha256.Sum256([]byte(rq.CustomID))
			copy(h[:], sum[:])
			if first, dup := seen[h]; dup {
				code, param, msg = "duplicate_custom_id", "custom_id", fmt.Sprintf("custom_id %s is already used on line %d", contract.Echo(rq.CustomID), first)
			}
		}
		if code != "" {
			if !fault(LineError{Code: code, Line: line, Param: param, Message: msg}) {
				return errs, nil
			}
			continue
		}
		seen[h] = line
		rq.Line = line
		if e := good(rq); e != nil {
			if !fault(*e) {
				return errs, nil
			}
		}
	}
	if n == 0 {
		errs = append(errs, LineError{Code: "empty_file", Message: "the file has no requests"})
	}
	return errs, nil
}

// parseLine reads one line; code is empty when it is a good request.
func parseLine(raw []byte) (r Request, code, param, msg string) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return r, "invalid_json_line", "", "this line is not a JSON object"
	}
	if dec.More() {
		return r, "invalid_json_line", "", "this line holds more than one JSON value"
	}
	for k := range fields {
		if !slices.Contains(lineFields, k) {
			return r, "unknown_parameter", k, fmt.Sprintf("unknown parameter %s: a line has custom_id, method, url and body", contract.Echo(k))
		}
	}
	for _, k := range lineFields {
		v, ok := fields[k]
		if !ok || string(v) == "null" {
			return r, "missing_required_parameter", k, fmt.Sprintf("missing required parameter %s", k)
		}
		if k == "body" {
			if v[0] != '{' {
				return r, "invalid_value", "body", "body must be a JSON object"
			}
			r.Body = v
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			return r, "invalid_type", k, fmt.Sprintf("%s must be a string", k)
		}
		switch k {
		case "custom_id":
			r.CustomID = s
		case "method":
			r.Method = s
		case "url":
			r.URL = s
		}
	}
	switch {
	case r.CustomID == "":
		return r, "missing_required_parameter", "custom_id", "custom_id must not be empty"
	case len(r.CustomID) > 512:
		return r, "invalid_value", "custom_id", "custom_id is longer than 512 bytes"
	case r.Method != "POST":
		return r, "invalid_value", "method", fmt.Sprintf("method %s: only POST is supported", contract.Echo(r.Method))
	case !slices.Contains(Endpoints, r.URL):
		return r, "invalid_url", "url", fmt.Sprintf("url %s is not a batch endpoint (%s)", contract.Echo(r.URL), strings.Join(Endpoints, ", "))
	}
	return r, "", "", ""
}

// ReadBody reads a request's body as a live call's would be read: the
// model it names and whether it streams; an error says why the gateway
// would refuse it.
type ReadBody func(body []byte) (model string, stream bool, err error)

// Check is what Validate checks a batch's lines against.
type Check struct {
	// MaxLines bounds the requests of the file (batch.max_requests).
	MaxLines int
	// MaxBodyBytes bounds a request's body, as a live call's
	// (limits.max_body_bytes). Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Endpoint is the batch's: every line's url.
	Endpoint string
	// ReadBody reads each body.
	ReadBody ReadBody
	// Model checks the batch's model as a live call's would be checked for
	// the batch's tenant and class — known, priced when the spend policy
	// rejects unknown models, the class allowed — and returns the fault's
	// code and message, or an empty code. Nil means no check.
	Model func(model string) (code, msg string)
}

// Validate checks a batch's input file line by line, read from r with one
// line in memory at a time, as the batch validates: ParseInput's checks
// and the body's size, then each request's url against the batch's
// endpoint and its body as c.ReadBody reads it — a model, the same on
// every line, that c.Model takes, and no streaming. It returns the model
// and the requests' count, or the faults in line order, at most
// MaxLineErrors; err is an error reading r.
func Validate(r io.Reader, c Check) (model string, n int, errs []LineError, err error) {
	var firstLine int
	var modelCode, modelMsg string
	errs, err = scan(r, c.MaxLines, c.MaxBodyBytes, func(rq Request) *LineError {
		code, param, msg := "", "", ""
		m, stream, err := c.ReadBody(rq.Body)
		switch {
		case rq.URL != c.Endpoint:
			code, param, msg = "url_mismatch", "url", fmt.Sprintf("url %s differs from the batch's endpoint %s", contract.Echo(rq.URL), contract.Echo(c.Endpoint))
		case err != nil:
			code, param, msg = "invalid_request", "body", "body: "+err.Error()
		case stream:
			code, param, msg = "invalid_value", "body.stream", "stream is not supported in a batch"
		case m == "":
			code, param, msg = "missing_required_parameter", "body.model", "missing required parameter body.model"
		case model == "":
			model, firstLine = m, rq.Line
			if c.Model != nil {
				modelCode, modelMsg = c.Model(m)
			}
			code, param, msg = modelCode, "body.model", modelMsg
		case m != model:
			code, param, msg = "model_mismatch", "body.model", fmt.Sprintf("model %s differs from %s on line %d: a batch uses one model", contract.Echo(m), contract.Echo(model), firstLine)
		default:
			code, param, msg = modelCode, "body.model", modelMsg
		}
		if code != "" {
			return &LineError{Code: code, Line: rq.Line, Param: param, Message: msg}
		}
		n++
		return nil
	})
	if err != nil {
		return "", 0, errs, err
	}
	if len(errs) > 0 {
		return "", 0, errs, nil
	}
	return model, n, nil, nil
}

// Requests reads the requests of a file that Validate found good, a line
// at a time, for Start; a line that is no longer good (the file changed)
// ends it with an error.
func Requests(r io.Reader, maxBody int64) iter.Seq2[Request, error] {
	return func(yield func(Request, error) bool) {
		lines := newLineReader(r, maxLineBytes(maxBody))
		for {
			raw, long, err := lines.next()
			if err == io.EOF {
				return
			}
			if err == nil && long {
				err = fmt.Errorf("batch: line %d is longer than %d bytes", lines.n, maxLineBytes(maxBody))
			}
			if err != nil {
				yield(Request{}, err)
				return
			}
			if raw = bytes.TrimSpace(raw); len(raw) == 0 {
				continue
			}
			rq, code, _, msg := parseLine(raw)
			if code != "" {
				yield(Request{}, fmt.Errorf("batch: line %d: %s", lines.n, msg))
				return
			}
			rq.Line = lines.n // its body is a copy (json.RawMessage's), not the line's buffer
			if !yield(rq, nil) {
				return
			}
		}
	}
}

// CountLines counts the lines of r that are not blank and their bytes,
// reading it 64 KiB at a time: what a batch's file will queue, for the
// backlog's bounds before it validates.
func CountLines(r io.Reader) (n int, size int64, err error) {
	buf := make([]byte, 64<<10)
	var line int64
	nonBlank := false
	for {
		k, err := r.Read(buf)
		for _, x := range buf[:k] {
			if x == '\n' {
				if nonBlank {
					n++
					size += line
				}
				line, nonBlank = 0, false
				continue
			}
			line++
			nonBlank = nonBlank || !isSpace(x)
		}
		if err == io.EOF {
			if nonBlank {
				n++
				size += line
			}
			return n, size, nil
		}
		if err != nil {
			return n, size, err
		}
	}
}
