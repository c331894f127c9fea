package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MaxRanks bounds a demand vector's length, and MaxDemand each entry: a
// gateway has a handful of ranks and at most admission's bounds of calls,
// and the Redis script must not be handed an unbounded row.
const (
	MaxRanks  = 32
	MaxDemand = 1 << 24
)

// Request is one replica's renewal.
type Request struct {
	// ID names the replica: unique per process.
	ID string
	// Now is the table's clock. Table requires it; on Redis
	// (store.Leases), zero means Redis's own clock (TIME), so that the
	// replicas' clocks need not agree.
	Now time.Time
	// TTL is how long the row lives without a renewal: when a replica
	// stops renewing, its slots go back to the others after it.
	TTL time.Duration
	// Demand is its calls in flight and queued, by rank.
	Demand []int
	// InFlight is its calls in flight now, and Current the concurrency its
	// gate has now: with the lease granted they bound what it may have in
	// flight until its next renewal.
	InFlight, Current int
	// Limit is the cluster's concurrency as this replica sees it: the
	// configured number, lowered by the provider's rate limits. The table
	// divides the smallest Limit of the live replicas.
	Limit int
	// Max, if positive, caps the lease: a replica back from its local
	// share takes no more than that share until the others are back too.
	Max int
	// Since, if positive, is a renewal's Seq: the grant counts the
	// replicas that have renewed after it (Fresh). A replica back from
	// its local share asks with the Seq of its first renewal back, to
	// know when the others are back too — a row still live is not
	// enough, since it may be one renewed before the outage and about to
	// expire while its replica runs on its own local share.
	Since int64
}

// Validate returns an error naming the first field that makes q invalid.
// It checks every field but Now, which Table requires and Redis does not;
// Table.Renew and store.Leases.Renew both call it first.
func (q *Request) Validate() error {
	switch {
	case q.ID == "" || strings.ContainsAny(q.ID, " \t\r\n"):
		return fmt.Errorf("lease: ID %q, want a non-empty word", q.ID)
	case q.TTL < time.Millisecond:
		return fmt.Errorf("lease: TTL %v, want at least 1ms", q.TTL)
	case q.Limit < 1:
		return fmt.Errorf("lease: Limit %d, want ≥ 1", q.Limit)
	case len(q.Demand) > MaxRanks:
		return fmt.Errorf("lease: %d ranks of demand, want at most %d", len(q.Demand), MaxRanks)
	case q.InFlight < 0 || q.Current < 0 || q.Max < 0 || q.Since < 0:
		return errors.New("lease: InFlight, Current, Max and Since must not be negative")
	}
	for _, d := range q.Demand {
		if d < 0 || d > MaxDemand {
			return fmt.Errorf("lease: demand %d, want 0 to %d", d, MaxDemand)
		}
	}
	return nil
}

// Grant is the table's answer to a renewal.
type Grant struct {
	// Lease is the slots the replica may use until its next renewal: its
	// Target, less what the others still hold (slots a replica gives up
	// are free for the others once it reports its calls drained), at least
	// 1.
	Lease int
	// Target is its share of the division.
	Target int
	// Total is the cluster's concurrency divided: the smallest Limit of
	// the live replicas.
	Total int
	// Live counts the replicas with a row, this one included.
	Live int
	// Seq numbers this renewal: the table counts renewals (on Redis, from
	// when the table was last created).
	Seq int64
	// Fresh counts the replicas whose last renewal came after the one
	// numbered Request.Since, this one included; zero when Since is.
	Fresh int
}

// row is one replica's row.
type row struct {
	seq       int64 // the Seq of its last renewal
	expires   int64 // ms since the epoch
	committed int   // the most it may have in flight until its next renewal
	lease     int
	limit     int
	demand    []int
}

// Table is the lease table in memory: the division store.Leases does on
// Redis, with time an input. The simulator runs it, and tests pin the
// script to it. The zero Table is empty and ready to use. Not safe for
// concurrent use.
type Table struct {
	rows map[string]row
	seq  int64
}

// Renew expires the rows past their TTL, records q's row and returns its
// lease. See Grant.
func (t *Table) Renew(q Request) (Grant, error) {
	if err := q.Validate(); err != nil {
		return Grant{}, err
	}
	if q.Now.IsZero() {
		return Grant{}, errors.New("lease: Table needs Now")
	}
	if t.rows == nil {
		t.rows = map[string]row{}
	}
	now := q.Now.UnixMilli()
	for id, r := range t.rows {
		if r.expires <= now {
			delete(t.rows, id)
		}
	}
	t.rows[q.ID] = row{limit: q.Limit, demand: q.Demand}
	ids := make([]string, 0, len(t.rows))
	for id := range t.rows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	total, self, others := q.Limit, 0, 0
	demand := make([][]int, len(ids))
	for i, id := range ids {
		r := t.rows[id]
		total = min(total, r.limit)
		demand[i] = r.demand
		if id == q.ID {
			self = i
		} else {
			others += r.committed
		}
	}
	target := Divide(total, demand)[self]
	lease := min(target, total-others)
	if q.Max > 0 {
		lease = min(lease, q.Max)
	}
	lease = max(lease, 1)
	t.seq++
	t.rows[q.ID] = row{
		seq:       t.seq,
		expires:   now + q.TTL.Milliseconds(),
		committed: max(lease, q.Current, q.InFlight),
		lease:     lease,
		limit:     q.Limit,
		demand:    slices.Clone(q.Demand),
	}
	fresh := 0
	if q.Since > 0 {
		for _, r := range t.rows {
			if r.seq > q.Since {
				fresh++
			}
		}
	}
	return Grant{Lease: lease, Target: target, Total: total, Live: len(ids), Seq: t.seq, Fresh: fresh}, nil
}

// Release removes id's row: its slots go back at once.
func (t *Table) Release(id string) { delete(t.rows, id) }
