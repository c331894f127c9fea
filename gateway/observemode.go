package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/contract"
)

// Observe mode (chain.ModeObserve; mode: in the configuration, globally or
// per tenant): the chain decides every call as it would enforce it and
// enforces nothing, and the gateway forwards the call at once. What would
// have been done is counted here, stamped on the answer
// (X-Sluice-Would-*), and written on the access line (would_refuse=…).

// wouldMetrics count what observe mode let through that enforce mode
// would not have.
type wouldMetrics struct {
	observed *prometheus.CounterVec // tenant
	refuse   *prometheus.CounterVec // reason, class, tenant
	degrade  *prometheus.CounterVec // tenant
}

func newWouldMetrics(reg prometheus.Registerer) *wouldMetrics {
	m := &wouldMetrics{
		observed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_observed_requests_total",
			Help: "Calls decided in observe mode (mode: observe, the gateway's or the tenant's) and forwarded whatever the decision, by tenant.",
		}, []string{"tenant"}),
		refuse: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_would_refuse_total",
			Help: "Calls observe mode forwarded that enforce mode would have refused, by the reason it would have given (as sluice_rejections_total's, or class_not_allowed), class and tenant.",
		}, []string{"reason", "class", "tenant"}),
		degrade: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_would_degrade_total",
			Help: "Calls observe mode forwarded with their own model that enforce mode would have sent one rung down the ladder (for spend or under load), by tenant.",
		}, []string{"tenant"}),
	}
	reg.MustRegister(m.observed, m.refuse, m.degrade)
	return m
}

// wouldReason is the reason an observed call would have been refused
// with, "" when it would not have been.
func wouldReason(r *chain.Request) string {
	if r.Would == nil {
		return ""
	}
	if rej := r.WouldRejection(); rej != nil {
		return reasonLabel(rej.Reason)
	}
	return "class_not_allowed"
}

// count counts an observed call's would-be decisions.
func (m *wouldMetrics) count(r *chain.Request, class string) {
	m.observed.WithLabelValues(r.Tenant).Inc()
	if reason := wouldReason(r); reason != "" {
		m.refuse.WithLabelValues(reason, class, r.Tenant).Inc()
	}
	if r.WouldDegrade != "" {
		m.degrade.WithLabelValues(r.Tenant).Inc()
	}
}

// stampWould says on an observed call's answer what enforce mode would
// have done with it.
func stampWould(h http.Header, r *chain.Request) {
	if reason := wouldReason(r); reason != "" {
		h.Set(contract.HeaderWouldRefuse, reason)
	} else if r.WouldWait > 0 {
		h.Set(contract.HeaderWouldQueueMs, strconv.FormatInt(r.WouldWait.Milliseconds(), 10))
	}
	if r.WouldDegrade != "" {
		h.Set(contract.HeaderWouldModel, r.WouldDegrade)
	}
}

// wouldQueue is how long an observed call would have waited, zero when it
// would have been refused.
func wouldQueue(r *chain.Request) time.Duration {
	if r.Would != nil {
		return 0
	}
	return r.WouldWait
}
