package chain

import (
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Stage is one step of the chain before the gate. Admit is asked about a
// call at now and may refuse it (an error: a *admission.Rejection for a
// refusal the caller can act on, anything else is bad input), change it
// (tier, over quota, model), or let it pass. What it took — a retry token, a
// spend reservation — comes back as a Hold, which the chain gives back with
// Cancel if the call never reaches the provider, or settles with the
// call's outcome. A Stage must be safe for concurrent use: the real-time
// shell asks stages outside any lock of its own.
type Stage interface {
	Admit(now time.Time, r *Request) (Hold, error)
}

// Hold is what a stage took for one call. Exactly one of Cancel and Settle
// is called, once.
type Hold interface {
	// Cancel gives back what was taken: the call never went upstream.
	// cause says why: the *admission.Rejection that refused it, the
	// context's error when its caller left, nil when the shell dropped a
	// call it had admitted.
	Cancel(now time.Time, cause error)
	// Settle books the call's outcome. An error is a broken book (the
	// shell logs it, the simulator fails the run); the hold is settled
	// anyway.
	Settle(now time.Time, o Outcome) error
}

// GateView is what stages may ask of the gate: the rank a call would get
// and the service-time statistics of a model. admission.Gate and
// admission.Core both provide it.
type GateView interface {
	Rank(admission.Request) (int, error)
	KeyStats(key string) admission.KeyStats
}

// list returns the chain's stages before the gate, in the order they are
// asked. This list is the chain's order: a call refused by one stage costs
// nothing of the stages after it. Stages a configuration leaves out (no
// retry budgets, recognition disabled, no spend section) are not in it.
func (s *stages) list() []Stage {
	var l []Stage
	l = append(l, s.identify)
	if s.seen != nil {
		// Before the retry budgets: a retry it recognises is charged as
		// one, and ranked as one by the gate.
		l = append(l, s.seen)
	}
	if s.retries != nil {
		l = append(l, s.retries)
	}
	if s.spend != nil {
		l = append(l, s.spend)
	}
	if s.route != nil {
		// Last: the pool is chosen for the call as the earlier stages
		// leave it (its class, its model degraded for spend or not), and a
		// refusal by them takes nothing from the pool's buckets.
		l = append(l, s.route)
	}
	return l
}

// maxStages bounds the holds a call keeps; a call's holds live in a fixed
// array so that admission allocates none for them.
const maxStages = 8

// holds are the holds of one call, in stage order.
type holds struct {
	h [maxStages]Hold
	n int
}

// admit asks every stage in turn. On a refusal or an error, what the
// earlier stages took is given back, newest first, and the error returned.
func (hs *holds) admit(stages []Stage, now time.Time, r *Request) error {
	for _, st := range stages {
		h, err := st.Admit(now, r)
		if err != nil {
			hs.cancel(now, err)
			return err
		}
		if h != nil {
			hs.h[hs.n] = h
			hs.n++
		}
	}
	return nil
}

// cancel gives back every hold, newest first, telling each why (see
// Hold.Cancel).
func (hs *holds) cancel(now time.Time, cause error) {
	for i := hs.n - 1; i >= 0; i-- {
		hs.h[i].Cancel(now, cause)
		hs.h[i] = nil
	}
	hs.n = 0
}

// settle books the outcome with every hold, newest first, and returns the
// first error.
func (hs *holds) settle(now time.Time, o Outcome) error {
	var first error
	for i := hs.n - 1; i >= 0; i-- {
		if err := hs.h[i].Settle(now, o); err != nil && first == nil {
			first = err
		}
		hs.h[i] = nil
	}
	hs.n = 0
	return first
}
