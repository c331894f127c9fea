package mockllm

import (
	"encoding/json"
	"net/http"
	"sync"
)

// Outage is what a provider in an outage does to every generation request,
// set at run time with SetOutage or POST /mock/v1/outage. Admin paths
// (/mock/v1/...) and GET /v1/models keep answering, so that a test can end
// the outage on the same address.
type Outage string

const (
	// OutageOff serves normally.
	OutageOff Outage = "off"
	// OutageRefuse resets every connection before any answer (a TCP RST):
	// what a caller sees of a provider whose load balancer has no backend.
	// The listener stays open, so that the outage can be ended on the same
	// port; to a client it is a connection failure before any byte, like a
	// refused connection.
	OutageRefuse Outage = "refuse"
	// Outage500 answers 500 in the endpoint's error shape.
	Outage500 Outage = "500"
	// OutageHang holds every request without an answer until the client
	// leaves, the outage ends or the server closes; the last two answer 503.
	OutageHang Outage = "hang"
)

// outageState is the current outage and a channel closed when it ends.
type outageState struct {
	mu   sync.Mutex
	mode Outage
	over chan struct{}
}

func newOutageState() outageState {
	return outageState{mode: OutageOff, over: make(chan struct{})}
}

// SetOutage starts or ends an outage. Requests held by OutageHang are
// answered 503 when the mode changes.
func (s *Server) SetOutage(m Outage) error {
	switch m {
	case OutageOff, OutageRefuse, Outage500, OutageHang:
	default:
		return badRequest("mode", "must be one of off, refuse, 500, hang; got %q", m)
	}
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	if m != s.outage.mode {
		close(s.outage.over)
		s.outage.mode, s.outage.over = m, make(chan struct{})
	}
	return nil
}

// CurrentOutage returns the outage in force (OutageOff when none).
func (s *Server) CurrentOutage() Outage {
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	return s.outage.mode
}

// inOutage answers r as the outage demands and reports whether it did.
func (s *Server) inOutage(w http.ResponseWriter, r *http.Request, a api) bool {
	s.outage.mu.Lock()
	mode, over := s.outage.mode, s.outage.over
	s.outage.mu.Unlock()
	if mode == OutageOff {
		return false
	}
	s.count(func(st *Stats) { st.Outage++ })
	switch mode {
	case OutageRefuse:
		reset(w)
	case Outage500:
		writeError(w, a.dialect(), &apiError{status: http.StatusInternalServerError,
			msg: "The server had an error while processing your request (mock outage)."})
	case OutageHang:
		select {
		case <-r.Context().Done():
		case <-over:
			writeError(w, a.dialect(), &apiError{status: http.StatusServiceUnavailable,
				msg: "The mock provider's outage changed while this request was held."})
		case <-s.done:
			writeError(w, a.dialect(), errServerClosed())
		}
	}
	return true
}

// serveOutage is GET (the mode in force) and POST {"mode": ...} on
// /mock/v1/outage.
func (s *Server) serveOutage(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		var req struct {
			Mode *Outage `json:"mode"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, openAI, badRequest("body", "want {\"mode\": \"off|refuse|500|hang\"}: %v", err))
			return
		}
		if req.Mode == nil {
			writeError(w, openAI, badRequest("mode", "required: one of off, refuse, 500, hang"))
			return
		}
		if err := s.SetOutage(*req.Mode); err != nil {
			writeError(w, openAI, asAPIError(err))
			return
		}
	default:
		writeMethodNotAllowed(w, "GET, POST")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"mode": string(s.CurrentOutage())})
}
