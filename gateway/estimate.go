package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// serveEstimate answers contract.EstimatePath: what would happen to such a
// request now, so that a producer can decide whether to submit at all. On
// the API listener it answers a tenant about its own admission; the
// gateway's global figures (queue depth, in flight, slots, mode), which
// show every other tenant's load, are sent only with global set: on the
// admin listener, where the tenant is named by the tenant parameter.
func (g *Gateway) serveEstimate(w http.ResponseWriter, r *http.Request, global bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, contract.ErrorTypeInvalidRequest, "method_not_allowed", "use GET")
		return
	}
	var tenant string
	var tier admission.Tier
	if global {
		tenant = r.URL.Query().Get("tenant")
		info, ok := g.tenantInfo(tenant)
		if !ok {
			g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_parameter",
				msg: "tenant: " + echo(tenant) + " is not a configured tenant"})
			return
		}
		tenant, tier = info.Name, info.Tier
	} else {
		var ok bool
		if tenant, tier, ok = g.identify(r); !ok {
			g.unauthorized(w)
			return
		}
	}
	g.limit.refresh(time.Now(), g) // estimate against the recovered concurrency
	q := r.URL.Query()
	// The query parameters mirror the request headers, and are checked by
	// the same code.
	h := http.Header{}
	for param, header := range map[string]string{"priority": contract.HeaderPriority, "timeout_ms": contract.HeaderTimeoutMs, "attempt": contract.HeaderAttempt} {
		if v := q.Get(param); v != "" {
			h.Set(header, v)
		}
	}
	hdr, err := g.parseHeaders(h)
	if err != nil {
		// Name the query parameter, not the header it stands for.
		msg := err.Error()
		for param, header := range map[string]string{"priority": contract.HeaderPriority, "timeout_ms": contract.HeaderTimeoutMs, "attempt": contract.HeaderAttempt} {
			msg = strings.Replace(msg, header, param, 1)
		}
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_parameter", msg: msg})
		return
	}
	model := q.Get("model")
	req := admission.Request{Class: hdr.class, Tenant: tenant, Tier: tier, Attempt: hdr.attempt,
		Deadline: time.Now().Add(hdr.timeout), Key: model}
	d, err := g.gate.Estimate(req)
	if err != nil {
		g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_parameter", msg: err.Error()})
		return
	}
	st := g.gate.Stats()
	est := contract.Estimate{
		Priority:        hdr.class,
		Rank:            d.Rank,
		EstimatedWaitMs: d.EstimatedWait.Milliseconds(),
		ServiceP50Ms:    d.ServiceP50.Milliseconds(),
		ServiceP95Ms:    d.ServiceP95.Milliseconds(),
		Admit:           d.Verdict != admission.Rejected,
		TimeoutMs:       hdr.timeout.Milliseconds(),
		Model:           model,
	}
	if global {
		est.QueueDepth, est.InFlight, est.Concurrency, est.Mode = &st.Queued, &st.InFlight, &st.Concurrency, st.Mode.String()
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
	w.Header().Set(contract.HeaderEstimatedWaitMs, strconv.FormatInt(est.EstimatedWaitMs, 10))
	_ = json.NewEncoder(w).Encode(est)
}
