package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/lease"
)

// leaseScript is lease.Table.Renew on Redis. KEYS[1] is the table, a hash
// of rows "expires committed lease limit d0 d1 …"; KEYS[2] the renewals'
// numbers, a hash of each row's last Seq and, under the empty field, the
// count of renewals; ARGV: id, now in ms (0: Redis's TIME), ttl ms, in
// flight, current, limit, max, since, then the demand. It returns {lease,
// target, total, live, seq, fresh}. Both keys expire when no replica has
// renewed for a TTL. (The numbers are a key of their own, not a field of
// the row, whose demand runs to its end.)
//
// Strings are compared byte by byte, not with <, which is strcoll and
// follows the server's locale; the Go side sorts bytewise too.
var leaseScript = redis.NewScript(`
local key, seqs, id = KEYS[1], KEYS[2], ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl, inflight, current = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local limit, cap, since = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local mine = {}
for i = 9, #ARGV do mine[#mine + 1] = tonumber(ARGV[i]) end

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
    redis.call('HDEL', seqs, f)
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
local seq = redis.call('HINCRBY', seqs, '', 1)
redis.call('HSET', seqs, id, seq)
local fresh = 0
if since > 0 then
  for i = 1, n do
    local s = tonumber(redis.call('HGET', seqs, ids[i]) or '0')
    if s > since then fresh = fresh + 1 end
  end
end
for _, k in ipairs({key, seqs}) do
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return {lease, target, total, n, seq, fresh}
`)

// releaseScript removes a row.
var releaseScript = redis.NewScript(`redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])`)

// Leases is the cluster's lease table on Redis (the key leases, which
// expires a TTL after the last renewal). Safe for concurrent use.
type Leases struct {
	r *Redis
}

// NewLeases returns the lease table of r's cluster.
func NewLeases(r *Redis) *Leases { return &Leases{r: r} }

// Renew runs the renewal on Redis (see lease.Table.Renew): one round
// trip, through the breaker.
func (l *Leases) Renew(ctx context.Context, q lease.Request) (lease.Grant, error) {
	if err := q.Validate(); err != nil {
		return lease.Grant{}, err
	}
	var now int64
	if !q.Now.IsZero() {
		now = q.Now.UnixMilli()
	}
	args := []any{q.ID, now, q.TTL.Milliseconds(), q.InFlight, q.Current, q.Limit, q.Max, q.Since}
	for _, d := range q.Demand {
		args = append(args, d)
	}
	var res []int64
	err := l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		res, err = leaseScript.Run(ctx, c, []string{l.r.Key("leases"), l.r.Key("leases", "seq")}, args...).Int64Slice()
		return err
	})
	if err != nil {
		return lease.Grant{}, err
	}
	if len(res) != 6 {
		return lease.Grant{}, fmt.Errorf("store: lease: script answered %d values, want 6", len(res))
	}
	return lease.Grant{Lease: int(res[0]), Target: int(res[1]), Total: int(res[2]), Live: int(res[3]), Seq: res[4], Fresh: int(res[5])}, nil
}

// Release removes id's row, so that its slots go back at once rather than
// after its TTL: at a clean shutdown.
func (l *Leases) Release(ctx context.Context, id string) error {
	return l.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		return releaseScript.Run(ctx, c, []string{l.r.Key("leases"), l.r.Key("leases", "seq")}, id).Err()
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
