package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
)

// estimateHeaders are the estimate's query parameters that stand for
// request headers, and the headers.
var estimateHeaders = map[string]string{"priority": contract.HeaderPriority, "timeout_ms": contract.HeaderTimeoutMs, "attempt": contract.HeaderAttempt,
	"degrade": contract.HeaderDegrade}

// digits says s is plain decimal digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// serveEstimate answers contract.EstimatePath: what would happen to such a
// request now, so that a producer can decide whether to submit at all —
// asked of the whole chain, so that a call the spend ceiling, the tenant's
// budget or the retry budget would refuse is not told it would be admitted. On
// the API listener it answers a tenant about its own admission; the
// gateway's global figures (queue depth, in flight, slots, mode), which
// show every other tenant's load, are sent only with global set: on the
// admin listener, where the tenant is named by the tenant parameter.
func (g *Gateway) serveEstimate(w http.ResponseWriter, r *http.Request, global bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		wire.WriteError(w, http.StatusMethodNotAllowed, contract.ErrorTypeInvalidRequest, "method_not_allowed", "use GET")
		return
	}
	var tenant string
	var tier admission.Tier
	if global {
		tenant = r.URL.Query().Get("tenant")
		info, ok := g.tenantInfo(tenant)
		if !ok {
			g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_parameter",
				Msg: "tenant: " + contract.Echo(tenant) + " is not a configured tenant"})
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
	g.refreshLimits(time.Now()) // estimate against the recovered concurrency
	q := r.URL.Query()
	// The query parameters mirror the request headers, and are checked by
	// the same code.
	h := http.Header{}
	for param, header := range estimateHeaders {
		if v := q.Get(param); v != "" {
			h.Set(header, v)
		}
	}
	hdr, err := g.parseHeaders(h)
	if err != nil {
		// Name the query parameter, not the header it stands for.
		msg := err.Error()
		for param, header := range estimateHeaders {
			msg = strings.Replace(msg, header, param, 1)
		}
		g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_parameter", Msg: msg})
		return
	}
	// The call asked about, as serveCall would present it to the chain: the
	// estimate runs every stage (tenant, retry budgets, spend, the ladder)
	// and the gate, taking nothing.
	model := q.Get("model")
	// The call's shape, as the gate estimates a call by (chain.Request.Shape):
	// its caller (the key the request presents, with no tenants), its
	// endpoint (chat completions unless told) and its sizes below.
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		endpoint = "/v1/chat/completions"
	} else if !strings.HasPrefix(endpoint, "/") {
		g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_parameter",
			Msg: "endpoint: " + contract.Echo(endpoint) + " is not a path (e.g. /v1/chat/completions)"})
		return
	}
	var caller uint64
	if !global {
		caller = g.caller(r, tenant)
	}
	req := chain.Request{Tenant: tenant, Tier: tier, Class: hdr.class, Attempt: hdr.attempt, AttemptDeclared: hdr.declared,
		Deadline: time.Now().Add(hdr.timeout), Model: model, AllowDegrade: hdr.degrade, Caller: caller, Endpoint: endpoint}
	for _, f := range []struct {
		param string
		dst   *int64
	}{{"input_tokens", &req.InputTokens}, {"max_tokens", &req.MaxOutputTokens}} {
		v := q.Get(f.param)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || !digits(v) {
			g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_parameter",
				Msg: f.param + ": " + contract.Echo(v) + " is not a count of tokens (digits only)"})
			return
		}
		*f.dst = n
	}
	e, err := g.chain.Estimate(req)
	if err != nil {
		if br := chainBadInput(err, tenant, model, "priority"); br != nil {
			g.badInput(w, br)
			return
		}
		g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_parameter", Msg: err.Error()})
		return
	}
	d := e.Decision
	st := g.pools[e.Request.Pool].info.Gate.Stats() // the pool the call would go to
	est := contract.Estimate{
		Priority:        e.Request.Class,
		Rank:            d.Rank,
		EstimatedWaitMs: d.EstimatedWait.Milliseconds(),
		ServiceP50Ms:    d.ServiceP50.Milliseconds(),
		ServiceP95Ms:    d.ServiceP95.Milliseconds(),
		Admit:           d.Verdict != admission.Rejected,
		TimeoutMs:       hdr.timeout.Milliseconds(),
		Model:           model,
	}
	if e.Request.Degraded {
		est.ModelCalled = e.Request.Model
	}
	if len(g.pools) > 1 {
		est.Upstream = e.Request.Upstream
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
		est.RetryAfterMs = contract.RetryAfterMs(d.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(contract.HeaderEstimatedWaitMs, strconv.FormatInt(est.EstimatedWaitMs, 10))
	_ = json.NewEncoder(w).Encode(est)
}
