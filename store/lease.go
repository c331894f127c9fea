package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cluster's concurrency is the provider's: so many calls at once for all
// the replicas together. Each replica renews a lease of slots every
// interval, publishing its demand by rank; the lease table divides the
// cluster's slots by that demand (Divide) and keeps each replica's row for
// a TTL, so that a replica that dies gives its slots back. LeaseTable is
// the division in Go, time an input, for tests and the simulator;
// leaseScript is the same on Redis, for the gateway. The two are pinned to
// each other by the same test vectors.

// MaxLeaseRanks bounds a demand vector's length, and MaxLeaseDemand each
// entry: a gateway has a handful of ranks and at most admission's bounds
// of calls, and the script must not be handed an unbounded row.
const (
	MaxLeaseRanks  = 32
	MaxLeaseDemand = 1 << 24
)

// Divide splits total slots among replicas by their demand by rank
// (demand[i][r]: replica i's calls in flight or queued at rank r; a higher
// rank is served first, as in package admission). It returns each
// replica's target, in the order given.
//
//   - Every replica gets one slot first — a floor, so that a replica whose
//     demand is new is not starved until the next renewal — and that slot
//     serves its most urgent unit of demand. With more replicas than slots
//     each still gets one: a gate cannot have none.
//   - Then rank by rank, highest first, what is left is shared max-min
//     (water-filling) among the replicas' demands at that rank: interactive
//     work waiting on one replica is served before speculative work on
//     another, and within a rank no replica gets more than another that
//     wants more.
//   - What demand leaves idle is spread evenly, so that a replica whose
//     traffic arrives between two renewals has slots to serve it with.
//
// Leftover single slots go to the replicas in the order given: LeaseTable
// orders them by ID, so every replica computes the same division.
func Divide(total int, demand [][]int) []int {
	n := len(demand)
	alloc := make([]int, n)
	if n == 0 {
		return alloc
	}
	ranks := 0
	d := make([][]int, n)
	for i, row := range demand {
		d[i] = slices.Clone(row)
		ranks = max(ranks, len(row))
		alloc[i] = 1
		for r := len(d[i]) - 1; r >= 0; r-- { // the floor serves the most urgent unit
			if d[i][r] > 0 {
				d[i][r]--
				break
			}
		}
	}
	rest := max(total-n, 0)
	want := make([]int, n)
	for r := ranks - 1; r >= 0 && rest > 0; r-- {
		for i := range d {
			want[i] = 0
			if r < len(d[i]) {
				want[i] = max(d[i][r], 0)
			}
		}
		for i, g := range waterFill(want, rest) {
			alloc[i] += g
			rest -= g
		}
	}
	if rest > 0 {
		for i := range alloc {
			alloc[i] += rest / n
			if i < rest%n {
				alloc[i]++
			}
		}
	}
	return alloc
}

// waterFill shares budget among wants max-min: each gets its want if that
// is no more than an equal share of what the smaller wants left, the
// others an equal share, the remainder one each in index order.
func waterFill(want []int, budget int) []int {
	got := make([]int, len(want))
	sum := 0
	var order []int
	for i, w := range want {
		sum += w
		if w > 0 {
			order = append(order, i)
		}
	}
	if sum <= budget {
		copy(got, want)
		return got
	}
	slices.SortFunc(order, func(a, b int) int {
		if want[a] != want[b] {
			return want[a] - want[b]
		}
		return a - b
	})
	k := len(order)
	j := 0
	for ; j < len(order); j++ {
		i := order[j]
		if want[i]*k > budget {
			break
		}
		got[i] = want[i]
		budget -= want[i]
		k--
	}
	rest := order[j:]
	slices.Sort(rest) // the remainder goes in index order
	for x, i := range rest {
		got[i] = budget / k
		if x < budget%k {
			got[i]++
		}
	}
	return got
}

// LeaseRequest is one replica's renewal.
type LeaseRequest struct {
	// ID names the replica: unique per process.
	ID string
	// Now is the table's clock. LeaseTable requires it; on Redis, zero
	// means Redis's own clock (TIME), so that the replicas' clocks need not
	// agree.
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
}

func (q *LeaseRequest) validate() error {
	switch {
	case q.ID == "" || strings.ContainsAny(q.ID, " \t\r\n"):
		return fmt.Errorf("store: lease: ID %q, want a non-empty word", q.ID)
	case q.TTL < time.Millisecond:
		return fmt.Errorf("store: lease: TTL %v, want at least 1ms", q.TTL)
	case q.Limit < 1:
		return fmt.Errorf("store: lease: Limit %d, want ≥ 1", q.Limit)
	case len(q.Demand) > MaxLeaseRanks:
		return fmt.Errorf("store: lease: %d ranks of demand, want at most %d", len(q.Demand), MaxLeaseRanks)
	case q.InFlight < 0 || q.Current < 0 || q.Max < 0:
		return errors.New("store: lease: InFlight, Current and Max must not be negative")
	}
	for _, d := range q.Demand {
		if d < 0 || d > MaxLeaseDemand {
			return fmt.Errorf("store: lease: demand %d, want 0 to %d", d, MaxLeaseDemand)
		}
	}
	return nil
}

// LeaseGrant is the table's answer to a renewal.
type LeaseGrant struct {
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
}

// leaseRow is one replica's row.
type leaseRow struct {
	expires   int64 // ms since the epoch
	committed int   // the most it may have in flight until its next renewal
	lease     int
	limit     int
	demand    []int
}

// LeaseTable is the lease table in memory: the division the Redis script
// does, with time an input. The simulator runs it, and tests pin the
// script to it. Not safe for concurrent use.
type LeaseTable struct {
	rows map[string]leaseRow
}

// Renew expires the rows past their TTL, records q's row and returns its
// lease. See LeaseGrant.
func (t *LeaseTable) Renew(q LeaseRequest) (LeaseGrant, error) {
	if err := q.validate(); err != nil {
		return LeaseGrant{}, err
	}
	if q.Now.IsZero() {
		return LeaseGrant{}, errors.New("store: lease: LeaseTable needs Now")
	}
	if t.rows == nil {
		t.rows = map[string]leaseRow{}
	}
	now := q.Now.UnixMilli()
	for id, r := range t.rows {
		if r.expires <= now {
			delete(t.rows, id)
		}
	}
	t.rows[q.ID] = leaseRow{limit: q.Limit, demand: q.Demand}
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
	t.rows[q.ID] = leaseRow{
		expires:   now + q.TTL.Milliseconds(),
		committed: max(lease, q.Current, q.InFlight),
		lease:     lease,
		limit:     q.Limit,
		demand:    slices.Clone(q.Demand),
	}
	return LeaseGrant{Lease: lease, Target: target, Total: total, Live: len(ids)}, nil
}

// Release removes id's row: its slots go back at once.
func (t *LeaseTable) Release(id string) { delete(t.rows, id) }

// leaseScript is LeaseTable.Renew on Redis. KEYS[1] is the table, a hash
// of rows "expires committed lease limit d0 d1 …"; ARGV: id, now in ms (0:
// Redis's TIME), ttl ms, in flight, current, limit, max, then the demand.
// It returns {lease, target, total, live}. The table itself expires when
// no replica has renewed for a TTL.
//
// Strings are compared byte by byte, not with <, which is strcoll and
// follows the server's locale; the Go side sorts bytewise too.
var leaseScript = redis.NewScript(`
local key, id = KEYS[1], ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl, inflight, current = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local limit, cap = tonumber(ARGV[6]), tonumber(ARGV[7])
local mine = {}
for i = 8, #ARGV do mine[#mine + 1] = tonumber(ARGV[i]) end

local function less(a, b)
  local la, lb = #a, #b
  for i = 1, math.min(la, lb) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return la < lb
end

local rows = {}
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do
  local f, v = flat[i], {}
  for w in string.gmatch(flat[i + 1], '%S+') do v[#v + 1] = tonumber(w) end
  if #v < 4 or v[1] <= now then
    redis.call('HDEL', key, f)
  elseif f ~= id then
    local d = {}
    for j = 5, #v do d[#d + 1] = v[j] end
    rows[f] = {committed = v[2], limit = v[4], demand = d}
  end
end
rows[id] = {committed = 0, limit = limit, demand = mine}

local ids = {}
for f in pairs(rows) do ids[#ids + 1] = f end
table.sort(ids, less)
local n = #ids
local total, self, others = limit, 0, 0
for i = 1, n do
  local r = rows[ids[i]]
  if r.limit < total then total = r.limit end
  if ids[i] == id then self = i else others = others + r.committed end
end

-- Divide: the floor, rank by rank max-min, the idle slots spread.
local alloc, d, ranks = {}, {}, 0
for i = 1, n do
  local src = rows[ids[i]].demand
  d[i] = {}
  for r = 1, #src do d[i][r] = src[r] end
  if #src > ranks then ranks = #src end
  alloc[i] = 1
  for r = #d[i], 1, -1 do
    if d[i][r] > 0 then d[i][r] = d[i][r] - 1; break end
  end
end
local rest = total - n
if rest < 0 then rest = 0 end
for r = ranks, 1, -1 do
  if rest <= 0 then break end
  local want, sum, order = {}, 0, {}
  for i = 1, n do
    local w = d[i][r] or 0
    if w < 0 then w = 0 end
    want[i] = w
    sum = sum + w
    if w > 0 then order[#order + 1] = i end
  end
  if sum <= rest then
    for i = 1, n do alloc[i] = alloc[i] + want[i] end
    rest = rest - sum
  else
    table.sort(order, function(a, b)
      if want[a] ~= want[b] then return want[a] < want[b] end
      return a < b
    end)
    local budget, k, j = rest, #order, 1
    while j <= #order do
      local i = order[j]
      if want[i] * k > budget then break end
      alloc[i] = alloc[i] + want[i]
      budget = budget - want[i]
      k = k - 1
      j = j + 1
    end
    local left = {}
    for x = j, #order do left[#left + 1] = order[x] end
    table.sort(left)
    local share, extra = math.floor(budget / k), budget % k
    for x = 1, #left do
      local g = share
      if x <= extra then g = g + 1 end
      alloc[left[x]] = alloc[left[x]] + g
    end
    rest = 0
  end
end
if rest > 0 then
  local each, extra = math.floor(rest / n), rest % n
  for i = 1, n do
    alloc[i] = alloc[i] + each
    if i <= extra then alloc[i] = alloc[i] + 1 end
  end
end

local target = alloc[self]
local lease = math.min(target, total - others)
if cap > 0 and cap < lease then lease = cap end
if lease < 1 then lease = 1 end
local committed = math.max(lease, current, inflight)
redis.call('HSET', key, id, table.concat({now + ttl, committed, lease, limit, unpack(mine)}, ' '))
if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
return {lease, target, total, n}
`)

// releaseScript removes a row.
var releaseScript = redis.NewScript(`return redis.call('HDEL', KEYS[1], ARGV[1])`)

// Leases is the cluster's lease table on Redis (the key leases, which
// expires a TTL after the last renewal). Safe for concurrent use.
type Leases struct {
	r *Redis
}

// NewLeases returns the lease table of r's cluster.
func NewLeases(r *Redis) *Leases { return &Leases{r: r} }

// Renew runs the renewal on Redis (see LeaseTable.Renew): one round trip,
// through the breaker.
func (l *Leases) Renew(ctx context.Context, q LeaseRequest) (LeaseGrant, error) {
	if err := q.validate(); err != nil {
		return LeaseGrant{}, err
	}
	var now int64
	if !q.Now.IsZero() {
		now = q.Now.UnixMilli()
	}
	args := []any{q.ID, now, q.TTL.Milliseconds(), q.InFlight, q.Current, q.Limit, q.Max}
	for _, d := range q.Demand {
		args = append(args, d)
	}
	var res []int64
	err := l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		res, err = leaseScript.Run(ctx, c, []string{l.r.Key("leases")}, args...).Int64Slice()
		return err
	})
	if err != nil {
		return LeaseGrant{}, err
	}
	if len(res) != 4 {
		return LeaseGrant{}, fmt.Errorf("store: lease: script answered %d values, want 4", len(res))
	}
	return LeaseGrant{Lease: int(res[0]), Target: int(res[1]), Total: int(res[2]), Live: int(res[3])}, nil
}

// Release removes id's row, so that its slots go back at once rather than
// after its TTL: at a clean shutdown.
func (l *Leases) Release(ctx context.Context, id string) error {
	return l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		return releaseScript.Run(ctx, c, []string{l.r.Key("leases")}, id).Err()
	})
}

// Rows returns the rows' leases by ID as Redis holds them (a row past its
// TTL stays until the next renewal removes it): for tests and tools.
func (l *Leases) Rows(ctx context.Context) (map[string]int, error) {
	var flat map[string]string
	err := l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		flat, err = c.HGetAll(ctx, l.r.Key("leases")).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for id, v := range flat {
		f := strings.Fields(v)
		if len(f) < 4 {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		out[id] = n
	}
	return out, nil
}
