package spend

import (
	"context"
	"errors"
	"time"
)

// Ledger is the state a fleet of replicas must share to keep one budget:
// the spend of each scope (global, each tenant, each model) in minute
// buckets. Reservations are not a separate kind of state: a reservation is
// booked as spend into the bucket of the minute it was made, and its
// reconciliation books the difference between the actual cost and the
// estimate into that same bucket. Every replica therefore sees the others'
// calls in flight as spend, a replica that dies holding reservations leaves
// only their estimates behind (conservative, and gone once the window
// slides past them), and nothing needs a lease or a sweeper.
//
// Amounts are whole nano-dollars (1e-9 USD); an Amount may be negative (a
// call that cost less than its reservation, a reservation cancelled), but
// the net of a bucket is the actual spend of that minute, never negative.
//
// Implementations must be safe for concurrent use and must keep at least
// MinRetention of buckets before the newest one written. Every
// implementation must pass spendtest.Run. See the package documentation for
// how a shared (Redis) implementation fits without a round trip per request.
type Ledger interface {
	// Add adds each entry's Amount to the bucket of its Scope for the
	// minute containing its At. now is the caller's current time; an
	// implementation with expiring keys uses it to set their lifetime,
	// and may drop entries older than now − MinRetention, which no window
	// can see any more.
	Add(ctx context.Context, now time.Time, entries []Entry) error
	// Buckets fills dst with the scope's buckets for the len(dst) minutes
	// ending with the minute containing last: dst[len(dst)-1] is that
	// minute, dst[0] the oldest. A minute with nothing recorded reads 0.
	Buckets(ctx context.Context, scope string, last time.Time, dst []int64) error
	// Sum is the total of the scope's buckets for the minutes from the one
	// containing first to the one containing last, both included. A first
	// in a later minute than last's is an error.
	Sum(ctx context.Context, scope string, first, last time.Time) (int64, error)
}

// Entry is one change to a scope's spend.
type Entry struct {
	// Scope names what the spend is counted against: GlobalScope,
	// TenantScope(name) or ModelScope(name). It must not be empty.
	Scope string
	// At selects the bucket: the minute containing At.
	At time.Time
	// Amount is the change, in nano-dollars (1e-9 USD).
	Amount int64
}

// MinRetention is how far back every Ledger must keep buckets: a day, for
// daily budgets, plus an hour of slack for reconciliations of long calls
// and clock skew between replicas.
const MinRetention = 25 * time.Hour

// ErrEmptyScope is returned by a Ledger for an entry or read without a scope.
var ErrEmptyScope = errors.New("spend: Entry.Scope is empty")

// The scopes the Limiter records spend under.
const GlobalScope = "global"

// TenantScope is the ledger scope of a tenant's spend.
func TenantScope(tenant string) string { return "tenant:" + tenant }

// ModelScope is the ledger scope of a model's spend.
func ModelScope(model string) string { return "model:" + model }
