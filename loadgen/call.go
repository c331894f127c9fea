package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/workload"
)

// call is the runner's record of one logical request: its attempts and the
// in-flight slots they hold. Its methods are safe for concurrent use, since a
// policy may read bodies or hedge attempts on goroutines of its own.
type call struct {
	rn    *runner
	r     *Request
	class int
	// trace is the trace call it replays, or nil in a Poisson run.
	trace *workload.Call

	mu struct {
		sync.Mutex
		// events holds every attempt in order, including unsent ones the
		// runner refused (client_overflow), which can end a request.
		events []*Attempt
		sent   int
		// preSlot is an in-flight slot taken at the arrival instant for the
		// first attempt (see runner.dispatch).
		preSlot bool
	}
}

// start records a new attempt and takes its in-flight slot, or refuses it.
func (c *call) start(now time.Time) (*Attempt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.sent >= c.r.MaxAttempts {
		return nil, ErrMaxAttempts
	}
	if c.mu.preSlot {
		c.mu.preSlot = false
	} else if !c.rn.acquire() {
		c.mu.events = append(c.mu.events, &Attempt{Number: c.mu.sent, Reason: ReasonClientOverflow, Start: now, End: now})
		return nil, ErrClientOverflow
	}
	a := &Attempt{Number: c.mu.sent, Start: now, sent: true}
	c.mu.sent++
	c.mu.events = append(c.mu.events, a)
	return a, nil
}

// respond records a's response headers.
func (c *call) respond(a *Attempt, resp *http.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.rn.clk.Now()
	a.Status = resp.StatusCode
	a.HeadersAt = now
	readHeaders(a, resp.Header, now)
	a.refused = isRefusal(resp.StatusCode, resp.Header)
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		a.Reason = resp.Header.Get(contract.HeaderReason)
		if a.Reason == "" {
			a.Reason = strconv.Itoa(resp.StatusCode)
		}
	}
}

// isRefusal reports whether a response is a refusal for Report.RefusalTime:
// the statuses a server sheds load with, or any response carrying sluice's
// reason header.
func isRefusal(status int, h http.Header) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable ||
		h.Get(contract.HeaderReason) != ""
}

// finish ends attempt a, once: err is nil at EOF, errClosedEarly when the
// body was closed first, or the transport's error. It frees a's slot.
func (c *call) finish(a *Attempt, actx context.Context, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finishLocked(a, actx, err)
}

func (c *call) finishLocked(a *Attempt, actx context.Context, err error) {
	if !a.End.IsZero() {
		return
	}
	a.End = c.rn.clk.Now()
	c.rn.release()
	if err == nil || a.Reason != "" {
		return // an answer, or a rejection whose reason is already known
	}
	switch {
	case a.Status == 0:
		a.Reason = c.rn.errReason(actx, err)
	case err == errClosedEarly:
		a.Reason = ReasonAbandoned
	default:
		a.Reason = c.rn.errReason(actx, err)
		if a.Reason == ReasonConnectionError {
			a.Reason = ReasonStreamError
		}
	}
}

// last returns a copy of the latest attempt, sent or refused, or nil.
func (c *call) last() *Attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.events) == 0 {
		return nil
	}
	cp := *c.mu.events[len(c.mu.events)-1]
	return &cp
}

// close frees whatever the logical request still holds once the policy has
// returned: an unused first-attempt slot, and the slots of attempts whose
// bodies a policy failed to close (so a buggy policy cannot wedge the run).
func (c *call) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.preSlot {
		c.mu.preSlot = false
		c.rn.release()
	}
	for _, a := range c.mu.events {
		if a.sent && a.End.IsZero() {
			c.finishLocked(a, c.rn.runCtx, errClosedEarly)
		}
	}
}

// attempts returns a snapshot of the events, for the collector.
func (c *call) attempts() []*Attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Attempt, len(c.mu.events))
	for i, a := range c.mu.events {
		cp := *a
		out[i] = &cp
	}
	return out
}

// chatMessage and chatRequest are the small OpenAI chat-completion body.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

// streamOptions asks for a final usage chunk, as billing-aware clients do, so
// that a gateway can reconcile the cost of streamed answers.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

func chatBody(model, prompt string, maxTokens int, stream bool) ([]byte, error) {
	req := chatRequest{
		Model:     model,
		Messages:  []chatMessage{{Role: "user", Content: prompt}},
		MaxTokens: maxTokens,
		Stream:    stream,
	}
	if stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return json.Marshal(req)
}

// fillerText is what a replayed trace call's prompt is made of: plain
// English, about CharsPerToken characters a token to a real tokenizer too,
// and nothing JSON would escape, so that it is copied into bodies as it is.
const fillerText = "Rivers carry water from the hills to the sea, cutting valleys as they go. " +
	"Along their banks towns grew where the water was calm enough to cross. "

// traceBody builds the bodies of a trace's calls. What they share is
// encoded once; each call's prompt is a prefix of one long filler string,
// so a call's body is one allocation and a few copies, whatever its size,
// built once per logical request (its attempts resend the same bytes).
type traceBody struct {
	head   []byte // {"model":…,"messages":[{"role":"user","content":"
	filler string // at least as long as the longest prompt
	tail   []byte // the stream fields, when streaming
}

func newTraceBody(model string, stream bool, longest int) (*traceBody, error) {
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	tb := &traceBody{
		head:   append(append([]byte(`{"model":`), m...), `,"messages":[{"role":"user","content":"`...),
		filler: strings.Repeat(fillerText, longest/len(fillerText)+1)[:longest],
	}
	if stream {
		// As chatBody: a final usage chunk, as billing-aware clients ask.
		tb.tail = []byte(`,"stream":true,"stream_options":{"include_usage":true}`)
	}
	return tb, nil
}

// build is the body of trace call seq: a prompt of promptChars characters,
// its max_tokens, and the "seed" that makes its bytes its own (see
// requestBody).
func (tb *traceBody) build(promptChars, maxTokens, seq int) []byte {
	b := make([]byte, 0, len(tb.head)+promptChars+len(tb.tail)+64)
	b = append(b, tb.head...)
	b = append(b, tb.filler[:promptChars]...)
	b = append(b, `"}],"max_tokens":`...)
	b = strconv.AppendInt(b, int64(maxTokens), 10)
	b = append(b, tb.tail...)
	b = append(b, `,"seed":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	return append(b, '}')
}
