package admission

import (
	"fmt"
	"math"
	"time"
)

// The built-in priority classes. Classes are names so that configuration can add
// its own; [DefaultRanks] ranks these three.
const (
	ClassInteractive = "interactive"
	ClassBatch       = "batch"
	ClassSpeculative = "speculative"
)

// Tier is a tenant's service tier. The zero value is [TierStandard].
type Tier uint8

const (
	// TierStandard requests keep the rank of their class.
	TierStandard Tier = iota
	// TierLow requests are capped at the low-tier rank: they are shed before
	// standard work of any class but speculative and retries.
	TierLow
	// TierHigh lifts the first attempts of batch and interactive work by one
	// rank (see [Ranks.HighTierBoost]).
	TierHigh
)

func (t Tier) String() string {
	switch t {
	case TierStandard:
		return "standard"
	case TierLow:
		return "low"
	case TierHigh:
		return "high"
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// ParseTier parses "low", "standard" or "high"; the empty string is standard.
func ParseTier(s string) (Tier, error) {
	switch s {
	case "", "standard":
		return TierStandard, nil
	case "low":
		return TierLow, nil
	case "high":
		return TierHigh, nil
	}
	return 0, fmt.Errorf("unknown tier %q (want low, standard or high)", s)
}

// Request describes one unit of work asking for a slot.
type Request struct {
	// Class is the priority class. Empty means [ClassInteractive]. A class the
	// gate's [Ranks] do not know is an error, never a silent default.
	Class string
	// Tenant identifies who the work is for; tenants of one rank are served
	// round-robin. Empty is one anonymous tenant.
	Tenant string
	// Tier is the tenant's tier. Zero is [TierStandard].
	Tier Tier
	// OverQuota marks a tenant that is past its own quota (for example its
	// spend budget): its requests drop to the low-tier rank.
	OverQuota bool
	// Attempt is 0 for a first attempt and N for the Nth retry. Retries are
	// shed before first attempts. Negative is an error.
	Attempt int
	// Deadline is when the caller stops waiting for the answer. In
	// [Gate.Acquire] it is the earlier of this and the context's deadline
	// ([CallDeadline]); zero, with a context without one, means no deadline
	// at all (then admission is decided by the queue bound alone).
	Deadline time.Time
	// Cost is the work's estimated cost (for example its tokens): within a
	// rank, tenants share the gate by cost, not by count of requests, and a
	// tenant's fair share across ranks is counted in it. Zero means 1.
	// Negative, NaN or infinite is an error.
	Cost float64
	// Key selects the service-time statistics that predict this request's
	// own service time, for example the upstream model. Empty uses the
	// statistics of all requests.
	Key string
	// Shape selects finer statistics than Key: a hash of what is known of
	// the request before it runs — who sends it, the endpoint, the sizes
	// of its prompt and of its max_tokens — so that calls that take alike
	// are estimated together (see Config.MaxShapes). Zero means none:
	// Family's statistics, else Key's.
	Shape uint64
	// Family groups shapes: a hash of the same without the sizes (who
	// sends it, to which model and endpoint), whose statistics a shape's
	// calls are estimated by until the shape has enough of its own. Zero
	// means none.
	Family uint64
}

// cost returns the request's cost, 1 when unset, or an error naming the field.
func (r *Request) cost() (float64, error) {
	switch {
	case r.Cost == 0:
		return 1, nil
	case r.Cost < 0 || math.IsNaN(r.Cost) || math.IsInf(r.Cost, 0):
		return 0, fmt.Errorf("admission: Request.Cost = %v, want ≥ 0 and finite", r.Cost)
	}
	return r.Cost, nil
}

// Result classifies how a granted unit of work ended.
type Result uint8

const (
	// Success: the work completed. Its service time is recorded.
	Success Result = iota
	// Failure: the dependency answered with an error. Its service time is
	// recorded: a slow failure occupies a slot just as long as a success.
	Failure
	// Canceled: the work was cut short (the caller left or its deadline
	// passed). Its duration is only a lower bound of the real service time,
	// so it is recorded only when it exceeds the current mean — otherwise
	// early disconnects would drag the estimate down exactly when the
	// dependency slows.
	Canceled
	// Unused: the slot was given back without doing the work. Nothing is
	// recorded. [Permit.Drop] reports this.
	Unused
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Canceled:
		return "canceled"
	case Unused:
		return "unused"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Outcome reports how a granted unit of work went.
type Outcome struct {
	// Result classifies the outcome. The zero value is [Success].
	Result Result
	// ServiceTime is how long the work took. Zero means the gate measures it:
	// the time from the grant to the call of Done.
	ServiceTime time.Duration
}
