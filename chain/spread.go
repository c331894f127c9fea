package chain

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// DefaultRefusalSpread is how far past its base recovery a refusal's
// Retry-After is spread by default (Config.RefusalSpread).
const DefaultRefusalSpread = 30 * time.Second

// spread is the chain's retry calendar. Callers refused together and told
// the same Retry-After — the time the backlog, or a budget, needs to
// recover — come back as one wave, since the official SDKs honour
// retry-after-ms to the millisecond with no jitter of their own: one of
// them is admitted and the rest are refused again. The calendar hands
// refusals of one resource times one Interval apart (the gate's time per
// completion, or what a budget's refill affords one call), from the base
// recovery on, so that their retries arrive at the rate they can be
// admitted.
//
// Each resource has its own line of times: the gate's slots per rank of the
// caller's retry (the reasons queue_wait, queue_full, evicted and expired
// share it), the spend ceiling per rank likewise, and each tenant's own
// retry budget and spend budget.
//
// A refusal at now with base recovery b is handed the line's next free
// time, or now+b if that is later (plus half an Interval on the gate's
// lines: see at), and the line moves on by Interval. The line never runs more than the horizon
// past that first time: a refusal that would be handed a later time starts
// the line again, so under a long storm the times are spread evenly over
// the horizon with more than one caller per Interval, rather than the last
// ones piling up at its end.
//
// Time is an input; safe for concurrent use.
type spread struct {
	horizon time.Duration // ≤ 0: off
	mu      struct {
		sync.Mutex
		next map[spreadKey]time.Time
	}
}

// spreadKey names a line of the calendar.
type spreadKey struct {
	reason admission.Reason // zero for the gate's reasons, which share its slots
	rank   int
	tenant string // for the tenant's own limits
	pool   int    // the gate's lines are per pool, with routing
}

// maxSpreadLines bounds the calendar: past it, the lines already in the
// past (which hand out nothing a new line would not) are forgotten.
const maxSpreadLines = 1024

func newSpread(horizon time.Duration) *spread {
	s := &spread{horizon: horizon}
	switch {
	case horizon == 0:
		s.horizon = DefaultRefusalSpread
	case horizon < 0:
		s.horizon = 0
	}
	s.mu.next = make(map[spreadKey]time.Time)
	return s
}

// calendarGate is what the calendar asks of the gate: its Interval, for a
// refusal that carries none, and the rank of a call. admission.Gate and
// admission.Core both provide it.
type calendarGate interface {
	Interval() time.Duration
	Rank(admission.Request) (int, error)
}

// keyOf is the line of a refusal of request r. The lines of the gate and
// of the ceiling are kept per rank of the caller's retry, not of the
// refused call: a first attempt's retry competes at the retry rank, with
// the retries of every class, and the times they are told must be spread
// among all of them.
func keyOf(rej *admission.Rejection, r *Request, gate calendarGate) spreadKey {
	switch rej.Reason {
	case admission.ReasonRetryBudget, admission.ReasonTenantBudget:
		return spreadKey{reason: rej.Reason, tenant: r.Tenant}
	}
	k := spreadKey{rank: rej.Rank}
	if rej.Reason == admission.ReasonSpendCeiling {
		k.reason = rej.Reason
	} else {
		k.pool = r.Pool
	}
	retry := r.admission()
	retry.Attempt++
	if rank, err := gate.Rank(retry); err == nil {
		k.rank = rank
	}
	return k
}

// assign hands rej, refused at now, its time on the calendar: its
// RetryAfter becomes the base recovery it came with plus its place in the
// line.
func (s *spread) assign(now time.Time, rej *admission.Rejection, r *Request, gate calendarGate) {
	rej.RetryAfter = s.at(now, rej, r, gate, true)
}

// peek is the RetryAfter the next such refusal would be handed, without
// taking its place in the line.
func (s *spread) peek(now time.Time, rej *admission.Rejection, r *Request, gate calendarGate) time.Duration {
	return s.at(now, rej, r, gate, false)
}

func (s *spread) at(now time.Time, rej *admission.Rejection, r *Request, gate calendarGate, take bool) time.Duration {
	base := rej.RetryAfter
	if s.horizon <= 0 || rej.Reason == admission.ReasonDraining {
		return base
	}
	interval := rej.Interval
	if interval <= 0 {
		interval = gate.Interval()
	}
	if interval <= 0 {
		return base
	}
	k := keyOf(rej, r, gate)
	first := now.Add(base)
	if k.reason == 0 {
		// The gate's line starts half an Interval past the base: its base
		// is when it expects a completion, and a retry due at that very
		// instant races it (arriving a millisecond early, it finds the
		// queue as full as it left it); half an Interval later it finds
		// the room made, with half an Interval of margin either side. A
		// budget's base is exact — the token or the spend has freed by
		// then and stays free — so its line starts at the base.
		first = first.Add(interval / 2)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.mu.next[k]
	if !ok || t.Before(first) || t.Sub(first) > s.horizon {
		t = first
	}
	if take {
		if !ok && len(s.mu.next) >= maxSpreadLines {
			s.forgetLocked(now)
		}
		s.mu.next[k] = t.Add(interval)
	}
	return t.Sub(now)
}

// forgetLocked drops the lines whose next time has passed.
func (s *spread) forgetLocked(now time.Time) {
	for k, t := range s.mu.next {
		if !t.After(now) {
			delete(s.mu.next, k)
		}
	}
}
