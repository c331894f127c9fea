package mockllm

import (
	"net"
	"net/http"
	"strconv"
	"time"
)

// Per-request override headers. They let a test ask for one behaviour
// without configuring a whole server for it.
const (
	// HeaderFault forces a fault on this request, or none: "none",
	// "error" (500), "hang", "reset", "429" (with Retry-After), or "cut":
	// the answer starts, and the connection is dropped halfway through it
	// (a provider that breaks off a stream). It replaces the random draw
	// for this request.
	HeaderFault = "X-Mock-Fault"
	// HeaderLatencyMs sets this request's service time to exactly that many
	// milliseconds (a non-negative integer, at most MaxServiceTime),
	// bypassing Median, the per-token parts, Sigma, the model's factor and
	// the step. The request still needs a slot.
	HeaderLatencyMs = "X-Mock-Latency-Ms"
	// HeaderOutputTokens sets how many tokens this request's answer has
	// (an integer in [1, MaxOutputTokens]): the length a real model
	// decides by itself. The request's maximum (max_tokens,
	// max_completion_tokens, max_output_tokens) still caps it; an answer
	// shorter than the maximum ends on its own (finish_reason "stop",
	// stop_reason "end_turn", status "completed"). The rate limits still
	// charge the maximum, as the providers do; usage, billing and the
	// per-token service time follow the answer's length. Embeddings
	// ignore it.
	HeaderOutputTokens = "X-Mock-Output-Tokens"
)

type fault int

const (
	faultNone fault = iota
	faultError
	faultHang
	faultReset
	fault429
	// faultCut is not injected at arrival: the request is served, and
	// its answer broken off halfway (serveStream, serveBody).
	faultCut
)

var faultNames = map[string]fault{
	"none":  faultNone,
	"error": faultError,
	"hang":  faultHang,
	"reset": faultReset,
	"429":   fault429,
	"cut":   faultCut,
}

// overrides are what a request's X-Mock-* headers ask for.
type overrides struct {
	fault      fault
	faultSet   bool
	latency    time.Duration
	latencySet bool
	output     int // answer tokens; zero: not set
}

func (s *Server) overrides(r *http.Request) (overrides, error) {
	var o overrides
	if v := r.Header.Get(HeaderFault); v != "" {
		f, ok := faultNames[v]
		if !ok {
			return o, badRequest(HeaderFault, "must be one of none, error, hang, reset, 429, cut; got %q", v)
		}
		o.fault, o.faultSet = f, true
	}
	if v := r.Header.Get(HeaderLatencyMs); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 || ms > MaxServiceTime.Milliseconds() {
			return o, badRequest(HeaderLatencyMs, "must be an integer number of milliseconds in [0, %d]; got %q",
				MaxServiceTime.Milliseconds(), v)
		}
		o.latency, o.latencySet = time.Duration(ms)*time.Millisecond, true
	}
	if v := r.Header.Get(HeaderOutputTokens); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxOutputTokens {
			return o, badRequest(HeaderOutputTokens, "must be an integer number of tokens in [1, %d]; got %q",
				MaxOutputTokens, v)
		}
		o.output = n
	}
	return o, nil
}

// drawFault picks this request's random fault. No draw is made when every
// rate is zero, so a fault-free server consumes no randomness for it.
func (s *Server) drawFault() fault {
	c := s.cfg
	if c.ErrorRate == 0 && c.HangRate == 0 && c.ResetRate == 0 {
		return faultNone
	}
	u := s.rand.float64()
	switch {
	case u < c.ErrorRate:
		return faultError
	case u < c.ErrorRate+c.HangRate:
		return faultHang
	case u < c.ErrorRate+c.HangRate+c.ResetRate:
		return faultReset
	}
	return faultNone
}

// injectFault answers a faulted request. Faults happen before capacity: they
// take no slot and cost nothing, like failures in front of the model.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, a api, f fault) {
	switch f {
	case faultError:
		s.count(func(st *Stats) { st.Faults.Error++ })
		writeError(w, a.dialect(), &apiError{
			status: http.StatusInternalServerError,
			msg:    "The server had an error while processing your request (injected by the mock).",
		})
	case fault429:
		s.count(func(st *Stats) { st.Faults.RateLimit++ })
		writeRateLimited(w, a.dialect(), s.retryAfter(time.Now()), "Rate limit reached (injected by the mock).")
	case faultHang:
		s.hang(w, r, a)
	case faultReset:
		s.count(func(st *Stats) { st.Faults.Reset++ })
		reset(w)
	}
}

// hang holds the request without answering until the client leaves or the
// server closes.
func (s *Server) hang(w http.ResponseWriter, r *http.Request, a api) {
	s.count(func(st *Stats) { st.Faults.Hang++; st.Hanging++ })
	defer s.count(func(st *Stats) { st.Hanging-- })
	select {
	case <-r.Context().Done():
	case <-s.done:
		writeError(w, a.dialect(), errServerClosed())
	}
}

// reset drops the connection without an answer. On a TCP connection,
// lingering 0 makes close send RST, which is what clients see when a
// provider's load balancer kills a connection. Where the connection cannot
// be hijacked (HTTP/2, a ResponseRecorder), the handler aborts with
// http.ErrAbortHandler, which the server turns into a reset stream or a
// closed connection.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
