package spend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// Options are the parts of a Limiter that are not configuration.
type Options struct {
	// Ledger keeps the books. Nil means a MemoryLedger of the Limiter's
	// own. Several Limiters (replicas) given the same shared Ledger keep
	// one budget.
	Ledger Ledger
	// Now is the clock of the shells only (Collector and Alerter); the
	// Limiter's methods take the time as an argument and never read it.
	// Nil means time.Now.
	Now func() time.Time
}

// Limiter applies the spend policy: it estimates and reserves the cost of
// each request, decides by the spend rate of the global scope and of the
// request's tenant whether to let it through, degrade it or refuse it, and
// replaces each reservation with the actual cost when the response ends.
//
// Every method takes the current time as an argument: the Limiter never
// reads the clock, sleeps or starts a goroutine, so a simulator can drive it
// in virtual time. Safe for concurrent use.
type Limiter struct {
	// conf is the compiled config: immutable, swapped whole by
	// Reconfigure. A call reads it once and decides by that one.
	conf   atomic.Pointer[compiled]
	ledger Ledger
	now    func() time.Time

	mu struct {
		sync.Mutex
		global       scopeStats
		tenants      statsSet
		models       statsSet
		outstanding  int64 // reservations neither reconciled nor cancelled
		reserved     int64 // their estimates, nano-dollars
		ledgerErrors int64
		webhookFails int64
		alertEvents  [2]int64 // fired, resolved
		buf          []int64  // scratch for window reads
		entries      [3]Entry // scratch for ledger writes
		fair         fairLevel
	}
}

// fairLevel caches fairLevelLocked's answer for one second.
type fairLevel struct {
	at        time.Time
	valid, ok bool
	level     float64
	rates     []float64 // scratch
}

// New returns a Limiter for cfg, or an error naming the first bad field.
func New(cfg Config, opts Options) (*Limiter, error) {
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	l := &Limiter{ledger: opts.Ledger, now: opts.Now}
	l.conf.Store(c)
	if l.ledger == nil {
		l.ledger = NewMemoryLedger()
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.mu.global = scopeStats{name: GlobalScope, scope: GlobalScope, alertPerHour: c.alertGlobal, limitHour: c.ceiling}
	l.mu.tenants = newStatsSet(TenantScope)
	l.mu.models = newStatsSet(ModelScope)
	l.addBudgetsLocked(c)
	l.mu.buf = make([]int64, 24*60+1)
	return l, nil
}

// Request is what the Limiter needs to know of a call before it is made.
type Request struct {
	// Tenant is who the call is for. Empty means contract.AnonymousTenant.
	Tenant string
	// Model is the model the caller asked for. It must have a price, unless
	// unknown models are billed at the default price.
	Model string
	// Rank is the request's rank in the admission gate's shed order
	// (admission.Ranks.Rank): 0 speculative, 1 retry, 2 low tier or over
	// quota, 3 batch, 4 interactive, 5 high-tier interactive with the
	// default ranks. Higher ranks are refused later. 0..15.
	Rank int
	// Class is the priority class. A request of class "speculative" is
	// treated as speculative work (shed first) whatever its rank; otherwise
	// the policy goes by Rank. Empty is fine.
	Class string
	// EstimatedInputTokens is the size of the prompt (see
	// EstimateInputTokens). Zero is allowed (a prompt of unknown size);
	// negative is an error.
	EstimatedInputTokens int64
	// MaxOutputTokens is the request's max_tokens. Zero means unknown: the
	// mean output observed for the model, or Config.DefaultOutputTokens
	// before any is observed. Negative is an error.
	MaxOutputTokens int64
	// Observe decides the request without enforcing the decision (the
	// chain's observe mode): a request Admit would refuse is reserved
	// all the same (Allow false, Rejection the refusal, Reservation
	// set), and one it would degrade keeps its model (WouldDegrade the
	// rung). Nothing is counted as refused or degraded: the books see
	// the spend, the counters only what was enforced.
	Observe bool
}

// Errors of Admit and Cost, for errors.Is. Both are the caller's bad input
// (the gateway answers 400), not refusals.
var (
	ErrUnknownModel   = errors.New("spend: model has no price")
	ErrInvalidRequest = errors.New("spend: invalid request")
)

func (r *Request) validate() error {
	switch {
	case r.Rank < 0 || r.Rank >= admission.MaxRanks:
		return fmt.Errorf("%w: Request.Rank = %d, want 0..%d", ErrInvalidRequest, r.Rank, admission.MaxRanks-1)
	case r.EstimatedInputTokens < 0:
		return fmt.Errorf("%w: Request.EstimatedInputTokens = %d, want ≥ 0", ErrInvalidRequest, r.EstimatedInputTokens)
	case r.MaxOutputTokens < 0:
		return fmt.Errorf("%w: Request.MaxOutputTokens = %d, want ≥ 0", ErrInvalidRequest, r.MaxOutputTokens)
	}
	return nil
}

// Stage is where a scope (the global ceiling, or one tenant's budget) stands
// in the staged policy; see Stages for the thresholds.
type Stage uint8

const (
	// StageNormal: below shed_speculative_at; nothing is held back.
	StageNormal Stage = iota
	// StageShedSpeculative: speculative work is refused; a tenant's other
	// requests are over quota (Decision.OverQuota).
	StageShedSpeculative
	// StageDegrade: requests move one rung down their model's ladder.
	StageDegrade
	// StageReject: ranks are being refused, lowest first.
	StageReject
)

var stageNames = [...]string{"normal", "shed_speculative", "degrade", "reject"}

func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("Stage(%d)", uint8(s))
}

// MarshalText writes the stage's name (for the JSON state dump).
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (c *compiled) stageOf(f float64) Stage {
	switch {
	case f >= c.rejectAt:
		return StageReject
	case f >= c.degradeAt:
		return StageDegrade
	case f >= c.shedAt:
		return StageShedSpeculative
	}
	return StageNormal
}

// threshold is the fraction of its limit at which a scope refuses rank r:
// shed_speculative_at for rank 0, then evenly from reject_at (rank 1) to
// 1.0 (the top rank).
func (c *compiled) threshold(rank int) float64 {
	switch {
	case rank <= 0:
		return c.shedAt
	case rank >= c.topRank:
		return 1
	}
	return c.rejectAt + (1-c.rejectAt)*float64(rank-1)/float64(c.topRank-1)
}

// Decision is the Limiter's answer to a Request.
type Decision struct {
	// Allow says the call may go ahead (to Model, under Reservation).
	Allow bool
	// Model is the model to call: the requested one, or its rung when
	// Degraded. The gateway rewrites the body's "model" and reports it in
	// X-Sluice-Model.
	Model string
	// Degraded says Model is the rung below the requested model.
	Degraded bool
	// OverQuota says the tenant is past the first stage of its own budget:
	// its requests rank at most over-quota against the ceiling. The gateway
	// sets admission.Request.OverQuota, so the gate sheds the request at the
	// over-quota rank too.
	OverQuota bool
	// OverShare says the ceiling is past its first stage and the tenant
	// spends more than its fair (max-min) share of that stage among the
	// tenants with spend in the rate window: the ceiling refuses its
	// requests like speculative work, leaving the rest to the others.
	// OverQuota is then set as well. (Tenants past the limit of tracked
	// names share one entry, and so one share.)
	OverShare bool
	// Rejection is the refusal when Allow is false: reason tenant_budget
	// (429; the tenant's own budget) or spend_ceiling (503; the global
	// ceiling), with RetryAfter the time until the window has freed enough
	// for this request's rank, were nothing more spent — never zero.
	Rejection *admission.Rejection
	// Stage is the global ceiling's stage and TenantStage the stage of the
	// tenant's own budget (StageNormal when it has none), both as they
	// were before this request.
	Stage       Stage
	TenantStage Stage
	// EstimatedUSD is the cost reserved for the call (zero when refused).
	EstimatedUSD float64
	// Reservation must be settled exactly once the call is over: with
	// Reconcile when it went upstream, Cancel when it never did. Nil when
	// refused (but for an observed request). Settling it twice is harmless.
	Reservation *Reservation
	// WouldDegrade is, for an observed request (Request.Observe), the
	// rung it would have been degraded to; Model stays the requested one.
	WouldDegrade string
}

// Err returns the refusal as an error (a *admission.Rejection), or nil.
func (d Decision) Err() error {
	if d.Rejection == nil {
		return nil
	}
	return d.Rejection
}

// cfg is the config in force.
func (l *Limiter) cfg() *compiled { return l.conf.Load() }

// priceOf looks up a model's price. The compiled config is immutable, so no
// lock is needed.
func (c *compiled) priceOf(model string) (price, error) {
	if p, ok := c.prices[model]; ok {
		return p, nil
	}
	if c.defaultPrice != nil {
		return *c.defaultPrice, nil
	}
	return price{}, fmt.Errorf("%w: %q (spend.unknown_model is reject; add it to spend.prices)", ErrUnknownModel, model)
}

// Admit decides on req at time now and, when it is allowed, reserves its
// estimated cost. The error is for bad input only (ErrUnknownModel,
// ErrInvalidRequest); a refusal is a Decision with a Rejection.
//
// The order of the checks follows the stages: the tenant's budget first
// (its refusal is the caller's own limit, 429), then the global ceiling at
// the rank the request has once an over-quota tenant is demoted, then
// degrading (after both checks: a refused request is not re-priced), then
// the reservation.
func (l *Limiter) Admit(now time.Time, req Request) (Decision, error) {
	return l.admit(now, req, false)
}

// Peek answers what Admit would at now — allowed, over quota, degraded (to
// which model), or refused with which reason and Retry-After — without
// reserving, counting or remembering anything: an estimate asked any
// number of times leaves the books and the counters as they were. The
// Decision has no Reservation. An empty Model asks about the budgets
// alone: nothing is priced and nothing degraded.
func (l *Limiter) Peek(now time.Time, req Request) (Decision, error) {
	return l.admit(now, req, true)
}

// admit is Admit, or Peek when dry: a dry run reads what Admit reads and
// writes nothing.
func (l *Limiter) admit(now time.Time, req Request, dry bool) (Decision, error) {
	if err := req.validate(); err != nil {
		return Decision{}, err
	}
	c := l.cfg()
	priced := !dry || req.Model != ""
	var p price
	if priced {
		var err error
		if p, err = c.priceOf(req.Model); err != nil {
			return Decision{}, err
		}
	}
	if req.Tenant == "" {
		req.Tenant = contract.AnonymousTenant
	}
	rank := req.Rank
	if req.Class == admission.ClassSpeculative {
		rank = 0
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	var t *scopeStats
	if dry {
		t = l.mu.tenants.peek(req.Tenant)
	} else {
		t = l.mu.tenants.get(req.Tenant)
	}
	d := Decision{Model: req.Model}

	// Where the scopes stand, before this request.
	var tenantFrac, globalFrac float64
	if t.budget != nil {
		tenantFrac = l.tenantFracLocked(t, now)
		d.TenantStage = c.stageOf(tenantFrac)
	}
	if c.ceiling > 0 {
		globalFrac = l.rateLocked(GlobalScope, now) / c.ceiling
		d.Stage = c.stageOf(globalFrac)
	}
	d.OverQuota = d.TenantStage >= StageShedSpeculative
	// Past the ceiling's first stage, a tenant spending more than its fair
	// share of that stage is over quota too, budget of its own or not, and the
	// ceiling refuses it like speculative work (below): otherwise a runaway
	// tenant at the interactive rank holds the global rate where every
	// other tenant's lower ranks are refused, and is itself refused last.
	if !d.OverQuota && d.Stage >= StageShedSpeculative && l.overShareLocked(t, now) {
		d.OverQuota, d.OverShare = true, true
		if !dry {
			t.overShare++
			l.mu.global.overShare++
		}
	}

	// The cost of the call as asked, before any degrading: what a refusal's
	// spacing is worked out from.
	var est int64
	if priced {
		est = p.estimate(req.EstimatedInputTokens, l.outputEstimate(l.mu.models.peek(req.Model), req.MaxOutputTokens))
	}

	// Refusals, tenant first.
	var reason admission.Reason
	var wait, interval time.Duration
	if t.budget != nil {
		if th := c.threshold(rank); tenantFrac >= th {
			reason = admission.ReasonTenantBudget
			wait = l.tenantFreeLocked(t, now, th)
			interval = max(spacing(est, t.limitHour*th), spacing(est, t.limitDay*th/24))
		}
	}
	globalRank := rank
	switch {
	case d.OverShare:
		globalRank = 0
	case d.OverQuota:
		globalRank = min(rank, c.overQuota)
	}
	if c.ceiling > 0 {
		if th := c.threshold(globalRank); globalFrac >= th {
			if reason == 0 {
				reason = admission.ReasonSpendCeiling
			}
			// Trying again has a chance only once both have freed enough.
			// For a tenant over its share that is when the first stage
			// clears: its share moves with everyone's spend, the stage
			// does not.
			wait = max(wait, l.rateFreeLocked(GlobalScope, now, c.ceiling*th))
			interval = max(interval, spacing(est, c.ceiling*th))
		}
	}
	if reason != 0 {
		ra := retryAfter(wait)
		d.Rejection = &admission.Rejection{Reason: reason, RetryAfter: ra, EstimatedWait: ra, Rank: rank, Interval: interval}
		if req.Observe && priced {
			// Booked as though allowed; not counted as refused.
			return l.reserveLocked(now, d, req, c, t, p, est, dry), nil
		}
		if !dry {
			if reason == admission.ReasonTenantBudget {
				t.refusedBudget++
				l.mu.global.refusedBudget++
			} else {
				t.refusedCeiling++
				l.mu.global.refusedCeiling++
			}
		}
		return d, nil
	}
	d.Allow = true
	if !priced {
		return d, nil
	}
	return l.reserveLocked(now, d, req, c, t, p, est, dry), nil
}

// reserveLocked degrades a request it may (for an observed one, says to
// which rung) and reserves its estimated cost est at price p; a dry run
// reserves nothing.
func (l *Limiter) reserveLocked(now time.Time, d Decision, req Request, c *compiled, t *scopeStats, p price, est int64, dry bool) Decision {
	m := l.mu.models.peek(req.Model)
	if !dry {
		m = l.mu.models.get(req.Model)
	}
	if max(d.Stage, d.TenantStage) >= StageDegrade {
		if rung, ok := c.ladder[req.Model]; ok && req.Observe {
			d.WouldDegrade = rung
		} else if ok {
			d.Model, d.Degraded = rung, true
			p = c.prices[rung]
			if dry {
				m = l.mu.models.peek(rung)
			} else {
				m = l.mu.models.get(rung)
				t.degraded++
				l.mu.global.degraded++
				if t.degradedFrom == nil {
					t.degradedFrom = make(map[string]int64)
				}
				t.degradedFrom[req.Model]++
			}
			est = p.estimate(req.EstimatedInputTokens, l.outputEstimate(m, req.MaxOutputTokens))
		}
	}
	d.EstimatedUSD = toUSD(est)
	if dry {
		return d
	}
	r := &Reservation{l: l, tenant: t, model: m, price: p, at: now, nano: est}
	l.bookLocked(now, r, est)
	l.mu.outstanding++
	l.mu.reserved += est
	d.Reservation = r
	return d
}

// spacing is the time between two calls of nano nano-dollars that a spend
// rate of perHour USD an hour affords: how far apart callers refused
// together should come back so that the rate, once it has freed, is not
// overrun at once. Zero when either is unknown.
func spacing(nano int64, perHour float64) time.Duration {
	if nano <= 0 || perHour <= 0 {
		return 0
	}
	return time.Duration(toUSD(nano) / perHour * float64(time.Hour))
}

// outputEstimate is the output size to reserve for: max_tokens when the
// request sets it (the most it can cost), else the model's observed mean.
func (l *Limiter) outputEstimate(m *scopeStats, maxOut int64) int64 {
	switch {
	case maxOut > 0:
		return maxOut
	case m != nil && m.outN > 0:
		return int64(math.Ceil(m.outMean))
	}
	return l.cfg().defaultOut
}

// bookLocked adds amount to the global, tenant and model buckets of the
// minute r was made in.
func (l *Limiter) bookLocked(now time.Time, r *Reservation, amount int64) {
	if amount == 0 {
		return
	}
	if amount > 0 && r.at.After(r.tenant.lastSpend) {
		r.tenant.lastSpend = r.at
	}
	e := &l.mu.entries
	e[0] = Entry{Scope: GlobalScope, At: r.at, Amount: amount}
	e[1] = Entry{Scope: r.tenant.scope, At: r.at, Amount: amount}
	e[2] = Entry{Scope: r.model.scope, At: r.at, Amount: amount}
	if err := l.ledger.Add(context.Background(), now, e[:]); err != nil {
		l.mu.ledgerErrors++
	}
}

// windowLocked reads the buckets of a window of n minutes ending at now,
// plus the one leaving it, into the scratch buffer.
func (l *Limiter) windowLocked(scope string, now time.Time, n int) []int64 {
	a := l.mu.buf[:n+1]
	if err := l.ledger.Buckets(context.Background(), scope, now, a); err != nil {
		// A ledger that cannot be read counts as no spend: refusing
		// everything because the books are unreachable would turn a
		// bookkeeping fault into an outage. The error is counted and
		// exported, so the fault is seen.
		l.mu.ledgerErrors++
		clear(a)
	}
	return a
}

func (l *Limiter) rateMinutes() int { return int(l.cfg().rateWindow / bucketWidth) }

// rateLocked is the scope's spend rate in USD per hour: the spend of the
// last rate_window projected to an hour.
func (l *Limiter) rateLocked(scope string, now time.Time) float64 {
	a := l.windowLocked(scope, now, l.rateMinutes())
	return windowSpend(a, phaseOf(now)) / nanoPerUSD * float64(time.Hour) / float64(l.cfg().rateWindow)
}

// overShareLocked says whether tenant t spends more than its fair share of
// the ceiling's first stage (shed_speculative_at × ceiling): the max-min
// share among the tenants that spent within the rate window, in which a
// tenant spending less than an equal share keeps what it spends and what it
// leaves is shared by the others. Nobody is over while the tenants together
// spend less than the first stage, and a lone tenant never is.
func (l *Limiter) overShareLocked(t *scopeStats, now time.Time) bool {
	if !l.activeLocked(t, now) {
		return false
	}
	level, ok := l.fairLevelLocked(now)
	return ok && l.rateLocked(t.scope, now) > level
}

// activeLocked says whether tenant t has spend in the rate window (the
// minutes the rate reads, the one leaving it included).
func (l *Limiter) activeLocked(t *scopeStats, now time.Time) bool {
	return !t.lastSpend.IsZero() && minuteOf(t.lastSpend) >= minuteOf(now)-int64(l.rateMinutes())
}

// fairLevelLocked is the water level of the max-min shares of the first
// stage: the rate above which a tenant is over its share; ok is false when
// the active tenants' rates all fit. It is computed at most once a second.
func (l *Limiter) fairLevelLocked(now time.Time) (level float64, ok bool) {
	sec := now.Truncate(time.Second)
	f := &l.mu.fair
	if f.valid && f.at.Equal(sec) {
		return f.level, f.ok
	}
	rates := f.rates[:0]
	for _, o := range l.mu.tenants.list {
		if l.activeLocked(o, now) {
			rates = append(rates, l.rateLocked(o.scope, now))
		}
	}
	f.rates = rates
	slices.Sort(rates)
	room := l.cfg().shedAt * l.cfg().ceiling
	level, ok = 0, false
	if len(rates) >= 2 {
		for i, r := range rates {
			share := room / float64(len(rates)-i)
			if r > share {
				level, ok = share, true
				break
			}
			room -= r
		}
	}
	*f = fairLevel{at: sec, valid: true, level: level, ok: ok, rates: rates}
	return level, ok
}

// rateFreeLocked is how long until the scope's rate falls below perHour.
func (l *Limiter) rateFreeLocked(scope string, now time.Time, perHour float64) time.Duration {
	a := l.windowLocked(scope, now, l.rateMinutes())
	target := perHour * nanoPerUSD * float64(l.cfg().rateWindow) / float64(time.Hour)
	return freeAfter(a, phaseOf(now), target)
}

// daySpendLocked is the scope's spend over the last 24 hours, in USD.
func (l *Limiter) daySpendLocked(scope string, now time.Time) float64 {
	const n = 24 * 60
	sum, err := l.ledger.Sum(context.Background(), scope, now.Add(-(n-1)*bucketWidth), now)
	if err != nil {
		l.mu.ledgerErrors++
		return 0
	}
	leaving := l.windowLocked(scope, now.Add(-n*bucketWidth), 0)[0]
	return toUSD(sum) + (1-phaseOf(now))*toUSD(leaving)
}

// tenantFracLocked is the tenant's standing against its budget: the larger
// of its hourly rate and its day's spend, each as a fraction of its limit.
func (l *Limiter) tenantFracLocked(t *scopeStats, now time.Time) float64 {
	var f float64
	if t.limitHour > 0 {
		f = l.rateLocked(t.scope, now) / t.limitHour
	}
	if t.limitDay > 0 {
		f = max(f, l.daySpendLocked(t.scope, now)/t.limitDay)
	}
	return f
}

// tenantFreeLocked is how long until the tenant is below fraction th of
// both its limits.
func (l *Limiter) tenantFreeLocked(t *scopeStats, now time.Time, th float64) time.Duration {
	var d time.Duration
	if t.limitHour > 0 {
		d = l.rateFreeLocked(t.scope, now, t.limitHour*th)
	}
	if t.limitDay > 0 {
		a := l.windowLocked(t.scope, now, 24*60)
		d = max(d, freeAfter(a, phaseOf(now), t.limitDay*th*nanoPerUSD))
	}
	return d
}
