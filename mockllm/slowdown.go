package mockllm

import (
	"encoding/json"
	"net/http"
	"sync"
)

// PathSlowdown sets a model's slowdown at run time: POST {"model": "m",
// "factor": 4} makes every call to model m that starts from then on take
// four times as long; "model" empty or "*" slows every model; factor 1 ends
// it. GET answers the factors in force. It is how a test slows one model of
// a deployment mid-run while the others keep their speed.
const PathSlowdown = "/mock/v1/slowdown"

// slowdowns are the run-time factors by model ("*": every model).
type slowdowns struct {
	mu sync.Mutex
	by map[string]float64
}

// SetSlowdown multiplies the service time of model's calls (every model's
// when model is "" or "*") by factor from now on; 1 ends a slowdown.
// The factor must be in (0, 1000].
func (s *Server) SetSlowdown(model string, factor float64) error {
	if !(factor > 0 && factor <= 1000) {
		return badRequest("factor", "must be in (0, 1000], got %v", factor)
	}
	if model == "" {
		model = DefaultModelKey
	}
	s.slow.mu.Lock()
	defer s.slow.mu.Unlock()
	if s.slow.by == nil {
		s.slow.by = map[string]float64{}
	}
	if factor == 1 {
		delete(s.slow.by, model)
	} else {
		s.slow.by[model] = factor
	}
	return nil
}

// slowdown is the run-time factor of model's calls.
func (s *Server) slowdown(model string) float64 {
	s.slow.mu.Lock()
	defer s.slow.mu.Unlock()
	f := 1.0
	if v, ok := s.slow.by[DefaultModelKey]; ok {
		f *= v
	}
	if v, ok := s.slow.by[model]; ok && model != DefaultModelKey {
		f *= v
	}
	return f
}

func (s *Server) serveSlowdown(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		var req struct {
			Model  string   `json:"model"`
			Factor *float64 `json:"factor"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, openAI, badRequest("body", "want {\"model\": \"name or *\", \"factor\": 4}: %v", err))
			return
		}
		if req.Factor == nil {
			writeError(w, openAI, badRequest("factor", "required: a number in (0, 1000]"))
			return
		}
		if err := s.SetSlowdown(req.Model, *req.Factor); err != nil {
			writeError(w, openAI, asAPIError(err))
			return
		}
	default:
		writeMethodNotAllowed(w, "GET, POST")
		return
	}
	s.slow.mu.Lock()
	out := map[string]float64{}
	for k, v := range s.slow.by {
		out[k] = v
	}
	s.slow.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"slowdowns": out})
}
