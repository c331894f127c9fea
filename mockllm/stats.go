package mockllm

import (
	"net/http"
	"time"
)

// Stats is a snapshot of what the server has done since New. It is the
// provider's own view: what it received, what it billed, and which of the
// answers it billed reached somebody.
//
// When no request is in flight the counters add up:
//
//	Received = BadRequests + Faults.Total() + Rejected429 + RateLimited + Outage + Abandoned + Dropped + Started
//	Started  = Delivered + Wasted + Aborted      (Completed = Delivered + Wasted)
//
// While requests are in flight, QueueDepth and InService hold the ones not
// yet settled.
type Stats struct {
	// Received counts POSTs to a generation endpoint (chat completions,
	// completions, embeddings, responses, messages), bad ones included.
	Received int64 `json:"received"`
	// BadRequests counts requests refused with 400 or 413 because of their
	// body or of a malformed X-Mock-* header. They never take a slot.
	BadRequests int64 `json:"bad_requests"`
	// Faults counts injected faults by kind (random or X-Mock-Fault).
	Faults FaultStats `json:"faults"`
	// Rejected429 counts refusals because every slot was busy (Mode429).
	Rejected429 int64 `json:"rejected_429"`
	// RateLimited counts refusals (429) by a model's RPM or TPM limit.
	RateLimited int64 `json:"rate_limited"`
	// Outage counts generation requests answered by an outage (see
	// SetOutage): reset, 500 or held.
	Outage int64 `json:"outage"`
	// Abandoned counts requests whose client went away while they waited in
	// the FIFO (or by the time a slot came free): removed, never billed.
	Abandoned int64 `json:"abandoned"`
	// Dropped counts requests still in the FIFO when Close was called: they
	// were answered 503 and never billed.
	Dropped int64 `json:"dropped"`

	// Started counts requests that took a slot. Every started request is
	// billed (in full, or pro rata when aborted).
	Started int64 `json:"started"`
	// Completed counts started requests whose service time ran to its end:
	// Delivered plus Wasted.
	Completed int64 `json:"completed"`
	// Delivered counts completed requests whose whole answer was handed to
	// the connection while the client was still there. It is counted just
	// before the last bytes are written (and moved to Wasted if writing them
	// fails), so a client that has read its answer finds it counted.
	Delivered int64 `json:"delivered"`
	// Wasted counts completed requests nobody received: the client had gone
	// (its request context was done) when the service time ended or while
	// the answer was streamed, or writing the answer failed. They were
	// billed in full. With AbortOnDisconnect false, every client that leaves
	// after its request started ends up here.
	Wasted int64 `json:"wasted"`
	// Aborted counts started requests stopped before their service time
	// ended: the client left and AbortOnDisconnect is set, or Close was
	// called. They were billed for the prompt and for the share of the
	// completion generated so far.
	Aborted int64 `json:"aborted"`
	// Cut counts answers the mock broke off halfway (X-Mock-Fault: cut),
	// the connection dropped after half the pieces (a stream) or half the
	// body. Each is also counted in Aborted, billed for what it generated.
	Cut int64 `json:"cut"`
	// ServiceSeconds is the slot time of settled requests, in seconds: the
	// whole service time of each completed request (as drawn, or as set by
	// X-Mock-Latency-Ms), and for each aborted one the time it was in
	// service before it stopped. An aborted request counts what it held,
	// not what it drew, because its slot went to the next request at once:
	// counting the draw would book those seconds twice, and the sum could
	// exceed Slots times the length of the run. The time spent writing an
	// answer after its service time is not counted.
	//
	// ServiceSeconds ÷ Completed is what a completed answer really cost in
	// slot time, aborts included, and Slots divided by that is the capacity
	// the provider realised in this run. It differs from the nominal
	// Slots ÷ (Median·e^(Sigma²/2)) by the sampling of the seed: at Sigma
	// 0.5, with no fault rates (faults draw from the same source), the
	// first thousand draws of seed 1 average 3.5% above the mean.
	ServiceSeconds float64 `json:"service_seconds"`

	// QueueDepth is the number of requests waiting in the FIFO now.
	QueueDepth int `json:"queue_depth"`
	// InService is the number of requests holding a slot now.
	InService int `json:"in_service"`
	// Hanging is the number of requests held by the hang fault now.
	Hanging int `json:"hanging"`
	// PeakInFlight is the most requests queued or in service at once
	// (QueueDepth + InService, which is the count now) since New: every
	// request the provider has accepted and not yet answered, which is what
	// a provider's concurrency limit counts. Requests turned away before
	// capacity never enter it: bad requests, faults, outages, RPM/TPM
	// limits, Mode429 refusals and requests whose client left before they
	// reached the queue. Nor do requests held by the hang fault or a hang
	// outage: they model a failure in front of the model, take no slot, and
	// would make the peak measure the fault rate rather than the load.
	PeakInFlight int64 `json:"peak_in_flight"`

	// TokensIn and TokensOut are the billed prompt and completion tokens of
	// settled requests (Delivered, Wasted and Aborted).
	TokensIn  int64 `json:"tokens_in"`
	TokensOut int64 `json:"tokens_out"`
	// CostUSD is what settled requests cost, from the model table.
	CostUSD float64 `json:"cost_usd"`
	// WastedCostUSD is the part of CostUSD spent on Wasted and Aborted
	// requests: money paid for answers nobody got.
	WastedCostUSD float64 `json:"wasted_cost_usd"`
}

// FaultStats counts injected faults by kind.
type FaultStats struct {
	Error     int64 `json:"error"`
	Hang      int64 `json:"hang"`
	Reset     int64 `json:"reset"`
	RateLimit int64 `json:"429"`
}

// Total is the number of injected faults of every kind.
func (f FaultStats) Total() int64 { return f.Error + f.Hang + f.Reset + f.RateLimit }

// Stats returns a consistent snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.QueueDepth = s.mu.queue.Len()
	st.InService = s.mu.inService
	st.ServiceSeconds = s.mu.held.Seconds()
	return st
}

// outcome is how a started request ended.
type outcome int

const (
	delivered outcome = iota
	wasted
	aborted
)

// settle books a started request: its tokens, its cost, its slot time and
// its outcome. held is how long it was in service: c.service when it
// completed, less when it was aborted, and then only the completion tokens
// generated by that time are billed.
func (s *Server) settle(c *call, o outcome, held time.Duration) {
	held = min(held, c.service)
	tokensOut := c.generatedBy(held, c.service)
	cost := c.spec.Cost(int64(c.tokensIn), int64(tokensOut))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.held += held
	st := &s.mu.stats
	st.TokensIn += int64(c.tokensIn)
	st.TokensOut += int64(tokensOut)
	st.CostUSD += cost
	switch o {
	case delivered:
		st.Completed++
		st.Delivered++
	case wasted:
		st.Completed++
		st.Wasted++
		st.WastedCostUSD += cost
	case aborted:
		st.Aborted++
		st.WastedCostUSD += cost
	}
}

// undeliver moves a request settled as delivered to wasted, when writing
// its last bytes failed after all. Answers are booked as delivered just
// before those bytes go out, so that a client holding its whole answer
// always finds it counted.
func (s *Server) undeliver(c *call) {
	cost := c.spec.Cost(int64(c.tokensIn), int64(c.tokensOut))
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.mu.stats
	st.Delivered--
	st.Wasted++
	st.WastedCostUSD += cost
}

// notePeakLocked raises PeakInFlight to the requests queued or in service
// now. acquire calls it wherever that number can grow: when a request
// takes a free slot and when one joins the queue. A slot handed from a
// leaving request to a waiter leaves the sum as it was.
func (s *Server) notePeakLocked() {
	st := &s.mu.stats
	st.PeakInFlight = max(st.PeakInFlight, int64(s.mu.inService+s.mu.queue.Len()))
}

// count applies f to the counters under the lock.
func (s *Server) count(f func(st *Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.mu.stats)
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeMethodNotAllowed(w, http.MethodGet)
		return
	}
	writeJSON(w, http.StatusOK, s.Stats())
}
