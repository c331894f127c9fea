package chain

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// DefaultRefusalSpread is how far past its base recovery a refusal's
// Retry-After is spread by default (Config.RefusalSpread).
const DefaultRefusalSpread = 30 * time.Second

// spread is the chain's retry calendar. Callers refused together used to
// be told the same Retry-After — the time the backlog, or a budget, needs
// to recover — and the official SDKs honour retry-after-ms to the
// millisecond with no jitter of their own, so they came back as one wave,
// one of them was admitted and the rest were refused again. The calendar
// hands refusals of one resource times one Interval apart (the gate's
// time per completion, or what a budget's refill affords one call),
// starting at the base recovery, so that their retries arrive at the rate
// they can be admitted.
//
// Each resource has its own line of times: the gate's slots per rank (the
// reasons queue_wait, queue_full, evicted and expired share it), the spend
// ceiling per rank, and each tenant's own retry budget and spend budget.
// A refusal at now with base recovery b is handed the line's next free
// time, or now+b if that is later, and the line moves on by Interval. The
// line never runs more than the horizon past now+b: a refusal that would
// be handed a later time starts the line again at now+b, so under a long
// storm the times are spread evenly over [b, b+horizon] with more than one
// caller per Interval, rather than the last ones piling up at the horizon.
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

// keyOf is the line of a refusal of request r.
func keyOf(rej *admission.Rejection, r *Request) spreadKey {
	switch rej.Reason {
	case admission.ReasonRetryBudget, admission.ReasonTenantBudget:
		return spreadKey{reason: rej.Reason, tenant: r.Tenant}
	case admission.ReasonSpendCeiling:
		return spreadKey{reason: rej.Reason, rank: rej.Rank}
	}
	return spreadKey{rank: rej.Rank}
}

// assign hands rej, refused at now, its time on the calendar: its
// RetryAfter becomes the base recovery it came with plus its place in the
// line. gate gives the gate's Interval for a refusal that carries none.
func (s *spread) assign(now time.Time, rej *admission.Rejection, r *Request, gate func() time.Duration) {
	rej.RetryAfter = s.at(now, rej, r, gate, true)
}

// peek is the RetryAfter the next such refusal would be handed, without
// taking its place in the line.
func (s *spread) peek(now time.Time, rej *admission.Rejection, r *Request, gate func() time.Duration) time.Duration {
	return s.at(now, rej, r, gate, false)
}

func (s *spread) at(now time.Time, rej *admission.Rejection, r *Request, gate func() time.Duration, take bool) time.Duration {
	base := rej.RetryAfter
	if s.horizon <= 0 || rej.Reason == admission.ReasonDraining {
		return base
	}
	interval := rej.Interval
	if interval <= 0 {
		interval = gate()
	}
	if interval <= 0 {
		return base
	}
	k := keyOf(rej, r)
	earliest := now.Add(base)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.mu.next[k]
	if !ok || t.Before(earliest) || t.Sub(earliest) > s.horizon {
		t = earliest
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
