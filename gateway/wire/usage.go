package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"

	"github.com/sluicehq/sluice/contract"
)

// UsageMeter watches a response body go by and finds the provider's usage
// in it: in a JSON body (OpenAI chat/completions/embeddings, Responses,
// Anthropic messages) or in the events of an SSE stream (OpenAI's final
// usage chunk, Responses' response.completed, Anthropic's message_start and
// message_delta). It keeps a bounded amount of the body, so a huge answer
// costs no more memory than a small one.
type UsageMeter struct {
	sse   bool
	buf   []byte // a JSON body so far, or the current partial SSE line
	over  bool   // the JSON body outgrew the limit
	usage contract.Usage
	found bool
	// Anthropic counts cache reads apart from input_tokens; OpenAI counts
	// cached tokens inside prompt_tokens. Usage.Input is always the total.
	cacheApart bool
}

// maxUsageBody bounds how much of a JSON body is kept to read its usage.
const maxUsageBody = 4 << 20

// NewUsageMeter is a meter for a body of contentType: an SSE stream when
// it is text/event-stream, else JSON.
func NewUsageMeter(contentType string) *UsageMeter {
	return &UsageMeter{sse: strings.HasPrefix(contentType, "text/event-stream")}
}

// Stream says the body is an SSE stream.
func (m *UsageMeter) Stream() bool { return m.sse }

// Feed feeds the next bytes of the body.
func (m *UsageMeter) Feed(p []byte) {
	if !m.sse {
		if m.over || len(m.buf)+len(p) > maxUsageBody {
			m.over, m.buf = true, nil
			return
		}
		m.buf = append(m.buf, p...)
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(m.buf)+len(p) <= maxUsageBody {
				m.buf = append(m.buf, p...)
			}
			return
		}
		if len(m.buf) == 0 {
			m.line(p[:i]) // a whole line in p: read where it is
		} else {
			m.line(append(m.buf, p[:i]...))
			m.buf = m.buf[:0]
		}
		p = p[i+1:]
	}
}

// line reads one SSE line; only data lines that carry a usage object are
// parsed. OpenAI's chunks with stream_options.include_usage say
// "usage":null in every chunk but the last, and the Responses API's
// events before response.completed too: a scan for a "usage" key whose
// value is an object keeps the JSON parse to the one or two events that
// carry one, rather than every chunk of the stream.
func (m *UsageMeter) line(l []byte) {
	l = bytes.TrimSpace(l)
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok || !carriesUsage(data) {
		return
	}
	m.parse(bytes.TrimSpace(data))
}

// carriesUsage says data has a "usage" key whose value is an object: the
// cheap test before parsing. It may say yes wrongly (the text inside a
// string value), which costs a parse and nothing else; it never says no
// to an event with a usage object, whose key JSON writes as "usage":
// followed by optional white space and '{'.
func carriesUsage(data []byte) bool {
	key := []byte(`"usage"`)
	for {
		i := bytes.Index(data, key)
		if i < 0 {
			return false
		}
		data = data[i+len(key):]
		j := skipJSONSpace(data, 0)
		if j < len(data) && data[j] == ':' {
			j = skipJSONSpace(data, j+1)
			if j < len(data) && data[j] == '{' {
				return true
			}
		}
	}
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// Done reports the usage found once the body has ended.
func (m *UsageMeter) Done() (contract.Usage, bool) {
	if !m.sse && !m.over && len(m.buf) > 0 {
		m.parse(m.buf)
		m.buf = nil
	}
	u := m.usage
	if m.cacheApart {
		u.Input = satAdd(u.Input, u.CachedInput)
	}
	// A cached count above the input cannot be true, and the books refuse
	// such a usage (and would then keep nothing of the call): bill every
	// input token at the full price instead, which errs high.
	if u.CachedInput > u.Input {
		u.CachedInput = 0
	}
	return u, m.found
}

// satAdd is a + b for non-negative counts, at most math.MaxInt64: a
// provider's absurd count must not wrap to a negative one.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// wireUsage is every provider's spelling of usage.
type wireUsage struct {
	PromptTokens        *int64         `json:"prompt_tokens"`
	CompletionTokens    *int64         `json:"completion_tokens"`
	InputTokens         *int64         `json:"input_tokens"`
	OutputTokens        *int64         `json:"output_tokens"`
	CacheReadInput      *int64         `json:"cache_read_input_tokens"`
	PromptTokensDetails *cachedDetails `json:"prompt_tokens_details"`
	InputTokensDetails  *cachedDetails `json:"input_tokens_details"`
}

type cachedDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

type wireEnvelope struct {
	Usage   *wireUsage `json:"usage"`
	Message *struct {  // Anthropic message_start
		Usage *wireUsage `json:"usage"`
	} `json:"message"`
	Response *struct { // Responses API events
		Usage *wireUsage `json:"usage"`
	} `json:"response"`
}

// parse merges the usage objects of one JSON body or event: read by hand
// when the body is a common one (readUsage), else decoded.
func (m *UsageMeter) parse(b []byte) {
	if !m.readUsage(b) {
		m.decode(b)
	}
}

// decode merges the usage objects of b as encoding/json reads them: with
// any error, none.
func (m *UsageMeter) decode(b []byte) {
	var env wireEnvelope
	if json.Unmarshal(b, &env) != nil {
		return
	}
	for _, u := range []*wireUsage{env.Usage, msgUsage(env), respUsage(env)} {
		if u != nil {
			m.merge(u)
		}
	}
}

func msgUsage(e wireEnvelope) *wireUsage {
	if e.Message == nil {
		return nil
	}
	return e.Message.Usage
}

func respUsage(e wireEnvelope) *wireUsage {
	if e.Response == nil {
		return nil
	}
	return e.Response.Usage
}

// merge takes the counts a usage object carries. Later events win for the
// fields they carry: Anthropic sends input tokens first (message_start) and
// the cumulative output count last (message_delta).
func (m *UsageMeter) merge(u *wireUsage) {
	set := func(dst *int64, v *int64) {
		if v != nil && *v >= 0 {
			*dst = *v
			m.found = true
		}
	}
	set(&m.usage.Input, u.PromptTokens)
	set(&m.usage.Input, u.InputTokens)
	set(&m.usage.Output, u.CompletionTokens)
	set(&m.usage.Output, u.OutputTokens)
	if u.CacheReadInput != nil {
		m.cacheApart = true
	}
	set(&m.usage.CachedInput, u.CacheReadInput)
	if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens >= 0 {
		m.usage.CachedInput = u.PromptTokensDetails.CachedTokens
	}
	if u.InputTokensDetails != nil && u.InputTokensDetails.CachedTokens >= 0 {
		m.usage.CachedInput = u.InputTokensDetails.CachedTokens
	}
}
