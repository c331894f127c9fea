package chain

import (
	"errors"
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

// order is the chain's order: every stage a chain may have, in the order a
// call is asked, each with the reason it stands where it does. A call a
// stage refuses costs nothing of the stages after it, and each stage sees
// the call as the earlier ones left it: both reasons decide every place.
// Adding a stage is one entry here and a type implementing [Stage].
//
// One refusal comes before every stage and is not the chain's: the
// gateway sheds a call when its own CPU is saturated (package
// gateway/saturation) before it reads the body or asks the chain — a
// chain asked at all would cost the CPU it lacks. The simulator has no
// such CPU, and no such step.
var order = [...]struct {
	name string
	// of is the chain's stage, nil when its configuration leaves it out.
	of func(*stages) Stage
}{
	// First: every later stage, and the gate, ask whose call it is — its
	// tenant, tier and class.
	{"identify", func(s *stages) Stage { return s.identify }},
	// Before the retry budgets: a retry it recognises is charged as one,
	// and ranked as one by the gate.
	{"recognise", func(s *stages) Stage { return orNil(s.seen) }},
	// Before degrade, spend and route: a retry its budget refuses is
	// refused before any pool is estimated or any spend reserved.
	{"retries", func(s *stages) Stage { return orNil(s.retries) }},
	// Before spend: spend reserves at the model the call will call, and
	// judges a call sent down a rung at the rung's price — no stage
	// reprices another's hold after the fact. It judges the model asked
	// at the rank the call has so far: spend's over-quota mark comes after.
	{"degrade", func(s *stages) Stage { return orNil(s.degrade) }},
	// Before route: it may move the call down its own ladder for money,
	// and its refusal takes nothing from a pool's buckets.
	{"spend", func(s *stages) Stage { return orNil(s.spend) }},
	// Last: the pool is chosen for the call as the earlier stages leave it
	// (its class, its model degraded or not, over quota), and a refusal by
	// any of them takes nothing from the pool's buckets.
	{"route", func(s *stages) Stage { return orNil(s.route) }},
}

// orNil is p as a Stage, or nil (not an interface holding a nil pointer)
// when p is nil.
func orNil[P interface {
	*T
	Stage
}, T any](p P) Stage {
	if p == nil {
		return nil
	}
	return p
}

// list returns the chain's stages before the gate, in order: the entries
// of order its configuration has (no retry budgets, recognition disabled,
// no spend section, no ladder leave theirs out).
func (s *stages) list() []Stage {
	l := make([]Stage, 0, len(order))
	for _, o := range order {
		if st := o.of(s); st != nil {
			l = append(l, st)
		}
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
//
// An observed call (Request.Observe) is refused by no stage: a stage's
// refusal is recorded (Request.Would) and the call goes on to the next,
// keeping what the refusing stage took for it nonetheless (a stage may
// return a hold with its refusal of an observed call: spend books what
// the call will cost, route the requests and tokens it will use).
func (hs *holds) admit(stages []Stage, now time.Time, r *Request) error {
	for _, st := range stages {
		h, err := st.Admit(now, r)
		if err != nil && r.Observe && isRefusal(err) {
			r.would(err)
			err = nil
		}
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

// isRefusal says err is a policy's refusal of a call — what observe mode
// records instead of enforcing — rather than bad input.
func isRefusal(err error) bool {
	var rej *admission.Rejection
	var ce *ClassError
	return errors.As(err, &rej) || errors.As(err, &ce)
}
