package gateway

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/gateway/saturation"
	"github.com/sluicehq/sluice/gateway/wire"
)

// saturated is the gateway's shedding when its own CPU is the bottleneck
// (package saturation): nil when server.saturation.disabled.
type saturated struct {
	shedder *saturation.Shedder
	shed    *prometheus.CounterVec // class
	total   atomic.Uint64          // calls shed, every class
}

func newSaturated(cfg saturation.Config, reg prometheus.Registerer) *saturated {
	if cfg.Disabled {
		return nil
	}
	s := &saturated{
		shedder: saturation.New(cfg.Target()),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_saturation_shed_total",
			Help: "Calls refused (503 queue_full) before their bodies were read because the gateway's own CPU was saturated, by class.",
		}, []string{"class"}),
	}
	reg.MustRegister(s.shed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_scheduling_delay_seconds",
			Help: "The p99 of the time the gateway's runnable goroutines waited for a core, over the last window (100 ms): the saturation signal.",
		}, func() float64 { return s.shedder.State().Delay.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_saturation_admitted_ratio",
			Help: "The fraction of new calls the gateway admits while its own CPU is saturated: 1 when it sheds none.",
		}, func() float64 { return s.shedder.State().Admitted }),
	)
	return s
}

// run moves the shed fraction once a window until ctx ends.
func (s *saturated) run(ctx context.Context, g *Gateway) {
	if s != nil {
		s.shedder.Run(ctx, saturation.NewSampler(), func() int {
			st := g.stats()
			return st.InFlight + st.Queued
		})
	}
}

// refuse sheds the call when the gateway's CPU is saturated and its rank
// is among those shed, answering it; it says whether it did. It is asked
// before the body is read: the refusal costs the headers already read and
// a few hundred bytes of answer. The connection is kept: refusing is meant
// to be cheap, and a new connection for the caller's retry would cost the
// gateway more than the answer did.
//
// A call of a tenant in observe mode is not refused: would is the refusal
// it would have had, for the chain to record as its first (the chain's
// own stages would not have seen it).
func (s *saturated) refuse(g *Gateway, w http.ResponseWriter, hdr callHeaders, tier admission.Tier, tenant string) (refused bool, would *admission.Rejection) {
	if s == nil {
		return false, nil
	}
	rank, err := g.chain.Rank(admission.Request{Class: hdr.class, Attempt: hdr.attempt, Tier: tier})
	if err != nil || !s.shedder.Shed(rank) {
		return false, nil // an unknown class is the chain's to refuse, with its message
	}
	// A second, jittered over a second more: the callers refused in one
	// window come back spread over the next ten, not together.
	delay := s.shedder.State().Delay
	rej := &admission.Rejection{Reason: admission.ReasonQueueFull, RetryAfter: time.Second + rand.N(time.Second), Rank: rank, EstimatedWait: delay}
	if g.chain.Observes(tenant) {
		return false, rej
	}
	exchangeOf(w).refused(rej.Reason, hdr.class)
	g.metrics.rejections.WithLabelValues(reasonLabel(rej.Reason), hdr.class, tenant).Inc()
	s.shed.WithLabelValues(hdr.class).Inc()
	s.total.Add(1)
	wire.WriteSaturated(w, rej, delay, s.shedder.Target())
	return true, nil
}

// state is the shedding's part of the state dump; nil when it is off.
func (s *saturated) state() *SaturationState {
	if s == nil {
		return nil
	}
	st := s.shedder.State()
	return &SaturationState{
		SchedulingDelayMs: float64(st.Delay.Microseconds()) / 1000,
		TargetMs:          float64(s.shedder.Target().Microseconds()) / 1000,
		Busy:              st.Busy,
		Admitted:          st.Admitted,
		Shed:              s.total.Load(),
	}
}
