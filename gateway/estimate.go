package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// EstimatePath answers "what would happen to such a request now", so a
// producer can decide whether to submit at all.
const EstimatePath = "/sluice/v1/estimate"

// Estimate is the JSON answer of EstimatePath. Its field names are part of
// the HTTP contract.
type Estimate struct {
	Priority        string `json:"priority"`
	Rank            int    `json:"rank"`
	EstimatedWaitMs int64  `json:"estimated_wait_ms"`
	ServiceP50Ms    int64  `json:"service_p50_ms"`
	ServiceP95Ms    int64  `json:"service_p95_ms"`
	// Admit says whether a request with the given timeout would be
	// admitted now (run at once or queued); Reason and RetryAfterMs say
	// why not and when to ask again.
	Admit        bool   `json:"admit"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	QueueDepth   int    `json:"queue_depth"`
	InFlight     int    `json:"in_flight"`
	Concurrency  int    `json:"concurrency"`
	Mode         string `json:"mode"`
	TimeoutMs    int64  `json:"timeout_ms"`
	Model        string `json:"model,omitempty"`
}

func (g *Gateway) serveEstimate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "use GET")
		return
	}
	t := g.tenants.identify(r)
	if t == nil {
		g.unauthorized(w)
		return
	}
	g.limit.refresh(time.Now(), g) // estimate against the recovered concurrency
	q := r.URL.Query()
	// The query parameters mirror the request headers, and are checked by
	// the same code.
	h := http.Header{}
	for param, header := range map[string]string{"priority": HeaderPriority, "timeout_ms": HeaderTimeoutMs, "attempt": HeaderAttempt} {
		if v := q.Get(param); v != "" {
			h.Set(header, v)
		}
	}
	hdr, err := g.parseHeaders(h)
	if err != nil {
		// Name the query parameter, not the header it stands for.
		msg := err.Error()
		for param, header := range map[string]string{"priority": HeaderPriority, "timeout_ms": HeaderTimeoutMs, "attempt": HeaderAttempt} {
			msg = strings.Replace(msg, header, param, 1)
		}
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_parameter", msg: msg})
		return
	}
	model := q.Get("model")
	req := admission.Request{Class: hdr.class, Tenant: t.name, Tier: t.tier, Attempt: hdr.attempt,
		Deadline: time.Now().Add(hdr.timeout), Key: model}
	d, err := g.gate.Estimate(req)
	if err != nil {
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_parameter", msg: err.Error()})
		return
	}
	st := g.gate.Stats()
	est := Estimate{
		Priority:        hdr.class,
		Rank:            d.Rank,
		EstimatedWaitMs: d.EstimatedWait.Milliseconds(),
		ServiceP50Ms:    d.ServiceP50.Milliseconds(),
		ServiceP95Ms:    d.ServiceP95.Milliseconds(),
		Admit:           d.Verdict != admission.Rejected,
		QueueDepth:      st.Queued,
		InFlight:        st.InFlight,
		Concurrency:     st.Concurrency,
		Mode:            st.Mode.String(),
		TimeoutMs:       hdr.timeout.Milliseconds(),
		Model:           model,
	}
	if g.draining.Load() {
		d.Verdict, d.Reason, d.RetryAfter = admission.Rejected, admission.ReasonDraining, g.cfg.ShutdownGrace.D()
		est.Admit = false
	}
	if d.Verdict == admission.Rejected {
		est.Reason = d.Reason.String()
		est.RetryAfterMs = ceilMs(d.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(HeaderEstimatedWait, strconv.FormatInt(est.EstimatedWaitMs, 10))
	_ = json.NewEncoder(w).Encode(est)
}
