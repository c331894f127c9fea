package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// streamChunks is how many pieces a streamed answer is cut into (fewer when
// it has fewer tokens). Piece i of k goes out at start + d*(i+1)/k, so the
// first token arrives after d/k and the last exactly when the service time
// ends. Sixteen is enough for a client to see tokens trickle in without a
// timer per token.
const streamChunks = 16

// interruption is what cut a wait short.
type interruption int

const (
	notInterrupted interruption = iota
	clientGone                  // only under AbortOnDisconnect
	serverClosed
)

// pause waits d, the model "generating". Without AbortOnDisconnect a
// client leaving does not stop it: the provider keeps working, holding the
// slot. Close always does. No timer is started when d <= 0, so zero-latency
// servers never touch the timer heap.
func (s *Server) pause(ctx context.Context, d time.Duration) interruption {
	if d <= 0 {
		return notInterrupted
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var gone <-chan struct{}
	if s.cfg.AbortOnDisconnect {
		gone = ctx.Done()
	}
	select {
	case <-t.C:
		return notInterrupted
	case <-gone:
		return clientGone
	case <-s.done:
		return serverClosed
	}
}

// generatedBy is how many of the answer's tokens exist after elapsed of
// service time d: what an aborted request is billed for.
func (c *call) generatedBy(elapsed, d time.Duration) int {
	if d <= 0 || elapsed >= d {
		return c.tokensOut
	}
	return int(int64(c.tokensOut) * int64(elapsed) / int64(d))
}

// serveBody serves a non-streamed request: the whole service time, then
// the whole answer. The answer counts as delivered when it was handed to
// the connection (written and flushed without error) while the request's
// context was alive; a client that leaves after that counts as served,
// exactly as it would for the provider.
func (s *Server) serveBody(w http.ResponseWriter, r *http.Request, a api, c *call, start time.Time, d time.Duration) {
	ctx := r.Context()
	switch s.pause(ctx, d) {
	case clientGone:
		s.settle(c, aborted, time.Since(start))
		return
	case serverClosed:
		s.settle(c, aborted, time.Since(start))
		writeError(w, a.dialect(), errServerClosed())
		return
	}
	if ctx.Err() != nil {
		s.settle(c, wasted, d)
		return
	}
	if c.cut {
		b, _ := json.Marshal(a.body(c, tokenText(0, c.tokensOut)))
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
		_ = http.NewResponseController(w).Flush()
		s.breakOff(c, start)
	}
	s.settle(c, delivered, d)
	err := writeJSON(w, http.StatusOK, a.body(c, tokenText(0, c.tokensOut)))
	if err == nil {
		err = http.NewResponseController(w).Flush()
	}
	if err != nil {
		s.undeliver(c)
	}
}

// serveStream serves a streamed request: headers at once, then the pieces
// spread over the service time, each flushed as it is "generated". The
// client is gone when its context is done before a piece is written or a
// write or flush fails; from then on nothing is written, and the request
// either aborts (AbortOnDisconnect) or keeps its slot until the service
// time ends and is counted wasted.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, a api, c *call, start time.Time, d time.Duration) {
	ctx := r.Context()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	left := rc.Flush() != nil
	k := max(1, min(c.tokensOut, streamChunks))
	for i := 0; i < k && !left; i++ {
		switch s.pause(ctx, time.Until(start.Add(d*time.Duration(i+1)/time.Duration(k)))) {
		case clientGone:
			s.settle(c, aborted, time.Since(start))
			return
		case serverClosed:
			_ = writeEvents(w, a.abort(c))
			_ = rc.Flush()
			s.settle(c, aborted, time.Since(start))
			return
		}
		if ctx.Err() != nil {
			left = true
			break
		}
		var evs []event
		if i == 0 {
			evs = a.head(c)
		}
		evs = append(evs, a.delta(c, tokenText(c.tokensOut*i/k, c.tokensOut*(i+1)/k))...)
		last := i == k-1
		if last {
			evs = append(evs, a.tail(c)...)
			s.settle(c, delivered, d)
		}
		if c.cut && k > 1 && i+1 == k/2 {
			// Half the answer out, then the connection drops.
			_ = writeEvents(w, evs)
			_ = rc.Flush()
			s.breakOff(c, start)
		}
		if writeEvents(w, evs) != nil || rc.Flush() != nil {
			if last {
				// The service time is over: nothing left to wait for.
				s.undeliver(c)
				return
			}
			left = true
		}
	}
	if !left {
		return // settled as delivered with the last piece
	}
	if s.cfg.AbortOnDisconnect {
		s.settle(c, aborted, time.Since(start))
		return
	}
	// Nobody is listening, but the provider does not know it: it keeps
	// generating and billing until the service time ends.
	if s.pause(ctx, time.Until(start.Add(d))) == serverClosed {
		s.settle(c, aborted, time.Since(start))
		return
	}
	s.settle(c, wasted, d)
}

// breakOff drops the connection of a call whose answer is cut (X-Mock-Fault:
// cut) after what was written: the call settles as aborted, billed for
// what it generated, and the handler aborts, which closes the connection
// without ending the response.
func (s *Server) breakOff(c *call, start time.Time) {
	s.count(func(st *Stats) { st.Cut++ })
	s.settle(c, aborted, time.Since(start))
	panic(http.ErrAbortHandler) // generate's deferred release frees the slot

}

// event is one server-sent event: an optional event name and a JSON data
// payload, or a raw payload such as OpenAI's [DONE].
type event struct {
	name string
	data any
	raw  string
}

var doneEvent = event{raw: "[DONE]"}

// writeEvents writes events in one Write, so that a piece and its
// accompanying events (head, tail) leave together.
func writeEvents(w io.Writer, evs []event) error {
	var b bytes.Buffer
	for _, e := range evs {
		if e.name != "" {
			b.WriteString("event: ")
			b.WriteString(e.name)
			b.WriteByte('\n')
		}
		b.WriteString("data: ")
		if e.raw != "" {
			b.WriteString(e.raw)
		} else {
			data, err := json.Marshal(e.data)
			if err != nil {
				return err // values built in this package always marshal
			}
			b.Write(data)
		}
		b.WriteString("\n\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// modelList is the GET /v1/models answer: the table's models, without the
// default row, sorted by name.
func modelList(models map[string]ModelSpec, created int64) any {
	names := make([]string, 0, len(models))
	for name := range models {
		if name != DefaultModelKey {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	data := make([]map[string]any, len(names))
	for i, name := range names {
		data[i] = map[string]any{"id": name, "object": "model", "created": created, "owned_by": "sluice-mock"}
	}
	return map[string]any{"object": "list", "data": data}
}
