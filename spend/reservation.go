package spend

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// Reservation is the estimated cost of one admitted call, held against the
// budget until the call is settled by Reconcile or Cancel. Settling is
// idempotent: the first settlement releases the reservation, later ones do
// nothing, so a gateway may settle on every path that can end a call
// without counting one twice. Safe for concurrent use.
type Reservation struct {
	l      *Limiter
	tenant *scopeStats
	model  *scopeStats
	price  price
	at     time.Time // the bucket the estimate was booked in
	nano   int64     // the estimate, nano-dollars
	// settled is guarded by l.mu.
	settled bool
}

// EstimatedUSD is the cost that was reserved.
func (r *Reservation) EstimatedUSD() float64 { return toUSD(r.nano) }

// Model is the model the reservation was priced for (the rung, when the
// call was degraded).
func (r *Reservation) Model() string { return r.model.name }

// Tenant is the tenant the reservation is counted against (OtherLabel for
// a tenant beyond the tracked bound).
func (r *Reservation) Tenant() string { return r.tenant.name }

// Admitted is the time the reservation was made: its estimate, and later
// the difference to the actual cost, are booked in that minute.
func (r *Reservation) Admitted() time.Time { return r.at }

// ErrForeignReservation is returned when a Reservation is settled on a
// Limiter that did not make it.
var ErrForeignReservation = errors.New("spend: reservation belongs to another Limiter")

// Reconcile replaces the reservation with the cost of the call's usage and
// returns that cost in USD. known=false means the response reported no
// usage (a stream cut short, a provider that omits it): the estimate is
// kept as the cost and counted as estimated. A usage that cannot be true
// (negative, or more cached than input tokens) is treated the same way and
// reported as an error matching ErrInvalidUsage, after the reservation has
// been settled. A nil or already settled reservation costs nothing and
// changes nothing.
//
// The difference between the actual cost and the estimate is booked into
// the minute the reservation was made in, so the windows hold each call's
// cost at the time it was admitted.
func (l *Limiter) Reconcile(now time.Time, r *Reservation, u contract.Usage, known bool) (float64, error) {
	if r == nil {
		return 0, nil
	}
	if r.l != l {
		return 0, ErrForeignReservation
	}
	var uerr error
	if known {
		if uerr = validUsage(u); uerr != nil {
			known = false
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.settled {
		return 0, nil
	}
	r.settled = true
	l.mu.outstanding--
	l.mu.reserved -= r.nano
	cost := r.nano
	if known {
		cost = r.price.cost(u)
		l.bookLocked(now, r, cost-r.nano)
		r.model.observeOutput(u.Output)
		for _, s := range []*scopeStats{&l.mu.global, r.tenant, r.model} {
			s.actual += cost
			s.known++
		}
	} else {
		for _, s := range []*scopeStats{&l.mu.global, r.tenant, r.model} {
			s.estimated += cost
			s.unknown++
		}
	}
	return toUSD(cost), uerr
}

// Cancel releases the reservation of a call that never went upstream (the
// gate refused it, the caller left while it queued): nothing was spent. A
// nil or already settled reservation is left alone.
func (l *Limiter) Cancel(now time.Time, r *Reservation) {
	if r == nil || r.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	l.mu.outstanding--
	l.mu.reserved -= r.nano
	l.bookLocked(now, r, -r.nano)
}

// RecordWasted counts usd of spend that bought nothing: an answer that
// arrived after the caller's deadline, or after the caller had gone. It
// classifies spend already settled by Reconcile (it adds nothing to the
// windows); it is the number the whole project exists to shrink.
func (l *Limiter) RecordWasted(now time.Time, tenant, model string, usd float64) error {
	return l.record(tenant, model, "RecordWasted", usd, func(s *scopeStats, n int64) { s.wasted += n })
}

// RecordSaved counts usd of spend avoided by cancelling an upstream call
// early (its caller left or its deadline passed before the answer was
// complete): typically the reservation's estimate minus the cost of what
// was received.
func (l *Limiter) RecordSaved(now time.Time, tenant, model string, usd float64) error {
	return l.record(tenant, model, "RecordSaved", usd, func(s *scopeStats, n int64) { s.saved += n })
}

func (l *Limiter) record(tenant, model, op string, usd float64, add func(*scopeStats, int64)) error {
	if math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 {
		return fmt.Errorf("%w: %s: usd = %v, want a finite amount ≥ 0", ErrInvalidRequest, op, usd)
	}
	if tenant == "" {
		tenant = contract.AnonymousTenant
	}
	n := fromUSD(usd)
	l.mu.Lock()
	defer l.mu.Unlock()
	add(&l.mu.global, n)
	add(l.mu.tenants.get(tenant), n)
	if model != "" {
		add(l.mu.models.get(model), n)
	}
	return nil
}
