package mockllm

import (
	"container/list"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Paths served by a Server.
const (
	PathChatCompletions = "/v1/chat/completions"
	PathCompletions     = "/v1/completions"
	PathEmbeddings      = "/v1/embeddings"
	PathResponses       = "/v1/responses"
	PathMessages        = "/v1/messages" // Anthropic
	PathModels          = "/v1/models"
	PathStats           = "/mock/v1/stats"
	PathOutage          = "/mock/v1/outage"
)

// Server is a fake LLM provider. It is an http.Handler and is safe for
// concurrent use.
type Server struct {
	cfg    Config
	models map[string]ModelSpec
	start  time.Time
	rand   *source
	ids    atomic.Uint64

	// done is closed by Close: every wait in the server selects on it.
	done      chan struct{}
	closeOnce sync.Once
	// handlers counts generation requests in flight, so Close can wait for
	// them. Add happens under mu and only while !mu.closed, so it never
	// races with Wait.
	handlers sync.WaitGroup

	// limiters holds each model row's RPM/TPM buckets, by model name (or
	// DefaultModelKey for the models the table does not list).
	limMu    sync.Mutex
	limiters map[string]*modelLimiter

	outage outageState
	slow   slowdowns // run-time factors by model (slowdown.go)

	mu struct {
		sync.Mutex
		closed    bool
		inService int
		queue     list.List // of *waiter, FIFO
		// held is the slot time of settled requests, behind
		// Stats.ServiceSeconds. Summed in nanoseconds, it is exact (a test
		// can compare it with the service times it set) and cannot drift
		// as a float sum of millions of requests would; it overflows only
		// after 292 years of slot time.
		held  time.Duration
		stats Stats
	}
}

var _ http.Handler = (*Server)(nil)

// New returns a Server for cfg, or the *ConfigError of the first invalid
// field. StepAt is measured from the moment New is called.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeQueue
	}
	models := cfg.Models
	if models == nil {
		models = BuiltinModels()
	} else {
		models = maps.Clone(models) // the caller may keep editing its map
	}
	return &Server{
		cfg:      cfg,
		models:   models,
		start:    time.Now(),
		rand:     newSource(cfg.Seed),
		done:     make(chan struct{}),
		limiters: make(map[string]*modelLimiter),
		outage:   newOutageState(),
	}, nil
}

// Close ends everything in flight and waits for the handlers to return:
// queued requests are answered 503 (counted Dropped), requests in service
// are stopped (counted Aborted, answered 503 or, mid-stream, with an error
// event), hanging requests are answered 503. Requests arriving afterwards
// get 503. Close is safe to call more than once; it does not close the
// listener, which belongs to whoever serves the handler.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		close(s.done)
	})
	s.handlers.Wait()
}

// enter registers a generation handler, or reports that the server is
// closed.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}

// ServeHTTP routes a request to one of the endpoints listed in the package
// documentation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var a api
	switch r.URL.Path {
	case PathOutage:
		s.serveOutage(w, r)
		return
	case PathSlowdown:
		s.serveSlowdown(w, r)
		return
	}
	switch r.URL.Path {
	case PathChatCompletions:
		a = chatAPI{}
	case PathCompletions:
		a = completionsAPI{}
	case PathEmbeddings:
		a = embeddingsAPI{}
	case PathResponses:
		a = responsesAPI{}
	case PathMessages:
		a = messagesAPI{}
	case PathModels:
		s.serveModels(w, r)
		return
	case PathStats:
		s.serveStats(w, r)
		return
	default:
		writeError(w, openAI, &apiError{
			status: http.StatusNotFound, code: "unknown_url",
			msg: fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path),
		})
		return
	}
	if r.Method != http.MethodPost {
		writeMethodNotAllowed(w, http.MethodPost)
		return
	}
	if !s.enter() {
		writeError(w, a.dialect(), errServerClosed())
		return
	}
	defer s.handlers.Done()
	s.generate(w, r, a)
}

// generate is the life of one generation request: parse, fault, capacity,
// service.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, a api) {
	s.count(func(st *Stats) { st.Received++ })
	if s.inOutage(w, r, a) {
		return
	}
	c, err := s.parse(w, r, a)
	if err != nil {
		s.count(func(st *Stats) { st.BadRequests++ })
		writeError(w, a.dialect(), asAPIError(err))
		return
	}
	o, err := s.overrides(r)
	if err != nil {
		s.count(func(st *Stats) { st.BadRequests++ })
		writeError(w, a.dialect(), asAPIError(err))
		return
	}
	if o.fault == faultNone && !o.faultSet {
		o.fault = s.drawFault()
	}
	if o.fault != faultNone && o.fault != faultCut {
		s.injectFault(w, r, a, o.fault)
		return
	}
	c.cut = o.fault == faultCut

	now := time.Now()
	v := s.checkRateLimit(c, now)
	setLimitHeaders(w.Header(), a.dialect(), v, now)
	if !v.ok {
		s.count(func(st *Stats) { st.RateLimited++ })
		writeRateLimited(w, a.dialect(), v.retryAfter, rateLimitMessage(c, v))
		return
	}
	// The limiter has charged the request's maximum, as the providers'
	// estimate does; the length the answer really has is decided now.
	if o.output > 0 {
		c.setLength(a, o.output)
	}

	waited, err := s.acquire(r.Context())
	switch {
	case errors.Is(err, errBusy):
		writeRateLimited(w, a.dialect(), s.retryAfter(time.Now()),
			fmt.Sprintf("Rate limit reached: all %d slots of the mock provider are busy.", s.cfg.Slots))
		return
	case errors.Is(err, errGone):
		return // nobody to answer
	case errors.Is(err, errClosed):
		writeError(w, a.dialect(), errServerClosed())
		return
	}
	defer s.release()

	start := time.Now()
	d := capServiceTime(float64(s.serviceTime(c.spec, c.tokensIn, c.tokensOut, start)) * s.slowdown(c.model))
	if o.latencySet {
		d = o.latency
	}
	h := w.Header()
	h.Set("X-Mock-Queue-Ms", strconv.FormatInt(waited.Milliseconds(), 10))
	h.Set("X-Mock-Service-Ms", strconv.FormatInt(d.Milliseconds(), 10))
	if v.requests == nil {
		s.setRateLimitHeaders(h)
	}
	c.id = s.ids.Add(1)
	if h.Get("X-Request-Id") == "" { // as OpenAI names every answer; a wrapper's own id stays
		h.Set("X-Request-Id", fmt.Sprintf("req_mock_%d", c.id))
	}
	c.created = start.Unix()
	c.service = d
	if c.stream {
		s.serveStream(w, r, a, c, start, d)
	} else {
		s.serveBody(w, r, a, c, start, d)
	}
}

// setRateLimitHeaders adds the x-ratelimit-* request headers OpenAI sends,
// computed from the slots, so that clients that read them see the real
// headroom.
func (s *Server) setRateLimitHeaders(h http.Header) {
	// Only a provider that refuses when full has a rate limit to report:
	// in queue mode nothing is ever refused, and a remaining count of zero
	// would tell a client (such as sluice's concurrency controller) that
	// the next call will be refused when it will merely wait.
	if s.cfg.Slots == 0 || s.cfg.Mode != Mode429 {
		return
	}
	s.mu.Lock()
	free := s.cfg.Slots - s.mu.inService
	s.mu.Unlock()
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(s.cfg.Slots))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(max(free, 0)))
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeMethodNotAllowed(w, http.MethodGet)
		return
	}
	writeJSON(w, http.StatusOK, modelList(s.models, s.start.Unix()))
}
