// One file, over 600 lines, on purpose: batch.JobStore on Redis is one
// protocol — the keys, the streams and consumer groups, and the Lua scripts
// that keep a result written once — and each method reads the keys and
// invariants the others write, so they are kept in one place to be checked
// against each other.

package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/batch"
)

// Jobs is a batch.JobStore on Redis, shared by every replica of a fleet: a
// batch created on one is run by all of them.
//
// Each batch's items are a stream, written (XADD, ids 0-1, 0-2, … in line
// order) when the batch is created and read by a consumer group, each
// replica a consumer (XREADGROUP): a claimed item is a pending entry owned
// by the replica that read it. Its result is written once — a Lua script
// that writes it into the batch's results hash only when the item has none
// (HSETNX), and in the same script acknowledges and deletes the entry
// (XACK, XDEL), so the stream holds exactly the items still without a
// result. Leases are a sorted set scored by when each claim lapses, by the
// caller's clock (time is an input, as everywhere in sluice): a lapsed
// claim — its replica crashed, or released it — is moved to the next
// claimer with XCLAIM, which hands the pending entry over as XAUTOCLAIM
// would. XAUTOCLAIM itself is not used: it judges idleness by Redis's own
// clock, which the callers' time does not drive.
//
// Batches, files and their metadata are hashes; tenants' listings and the
// queue of batches with unread items are sorted sets by creation
// sequence. Every operation is one short script or a few, each touching at
// most ChunkItems items, so that no call holds Redis (or outlasts the
// client's timeout) however large a batch is.
//
// What stays, and for how long: an uploaded file for Retention after its
// upload; a batch, its results, its output and error files for Retention
// after it ends (and at most its window plus Retention from its creation);
// its stream and attempt counts are deleted when it ends. The leases, the
// deadlines, the queues and the set of unfinished batches hold only
// unfinished batches' entries; a tenant's listing drops ended batches as
// their records expire.
type Jobs struct {
	r         *Redis
	prefix    string // every key of the store starts with it
	route     string // a key of the fleet's slot: routes the scripts on a Redis Cluster
	retention time.Duration
}

var _ batch.JobStore = (*Jobs)(nil)

// JobsOptions configure Jobs.
type JobsOptions struct {
	// Retention is how long files, and batches after they end, are kept.
	// Zero means 30 days, as OpenAI keeps batch output.
	Retention time.Duration
}

// ChunkItems bounds the items one call to Redis writes or reads.
const ChunkItems = 256

// stagingTTL bounds how long the items of a batch being created (or a
// file being uploaded) stay when the creation never finishes.
const stagingTTL = time.Hour

// NewJobs returns the job store on r. Close does not close r.
func NewJobs(r *Redis, o JobsOptions) *Jobs {
	if o.Retention <= 0 {
		o.Retention = 30 * 24 * time.Hour
	}
	return &Jobs{r: r, prefix: r.Key("batch") + ":", route: r.Key("batch", "seq"), retention: o.Retention}
}

// Close does nothing: the Redis connection is the caller's.
func (j *Jobs) Close() error { return nil }

func (j *Jobs) key(parts ...string) string { return j.prefix + strings.Join(parts, ":") }

// luaPrelude names the keys and holds the helpers the scripts share. ARGV[1]
// is the prefix; ARGV[2] now (RFC 3339, as Go writes it); ARGV[3] the
// retention in seconds.
const luaPrelude = `
local P, NOW, RET = ARGV[1], ARGV[2], tonumber(ARGV[3])
local G = 'runners'
local LEASES, DEADLINES, ACTIVE, TENANTS, PENDING = P .. 'leases', P .. 'deadlines', P .. 'active', P .. 'tenants', P .. 'pending'
local function bkey(id) return P .. 'b:' .. id end
local function skey(id) return P .. 's:' .. id end
local function rkey(id) return P .. 'r:' .. id end
local function akey(id) return P .. 'a:' .. id end
local function fkey(id) return P .. 'f:' .. id end
local function qkey(t) return P .. 'q:' .. t end
local function sid(i) return '0-' .. (i + 1) end
local function member(id, i) return i .. ':' .. id end
-- errline is batch.ErrorLine: the same keys in the same order.
local function errline(id, i, c, code, msg)
  return '{"id":' .. cjson.encode('batch_req_' .. id .. '_' .. i) .. ',"custom_id":' .. cjson.encode(c) ..
    ',"response":null,"error":{"code":"' .. code .. '","message":"' .. msg .. '"}}'
end
local function field(e, name)
  for k = 1, #e[2], 2 do if e[2][k] == name then return e[2][k + 1] end end
  return ''
end
local CANCELLED = 'the batch was cancelled before this request ran'

-- result writes item i's result unless it has one; false when it had.
-- u, when given, is the answer's usage: input, output, cached, reasoning.
local function result(id, i, kind, line, u)
  if redis.call('HSETNX', rkey(id), tostring(i), kind .. line) == 0 then return false end
  local b = bkey(id)
  if u then
    for k, f in ipairs({'in_tok', 'out_tok', 'cached_tok', 'reason_tok'}) do
      if tonumber(u[k]) ~= 0 then redis.call('HINCRBY', b, f, u[k]) end
    end
  end
  local ttl = redis.call('TTL', b)
  if ttl > 0 then redis.call('EXPIRE', rkey(id), ttl) end
  local e = redis.call('XRANGE', skey(id), sid(i), sid(i))
  if #e > 0 then
    local f = e[1][2]
    for k = 1, #f, 2 do
      if f[k] == 'n' then redis.call('HINCRBY', b, 'bytes', -tonumber(f[k + 1])) end
    end
    redis.call('XACK', skey(id), G, sid(i))
    redis.call('XDEL', skey(id), sid(i))
  end
  redis.call('ZREM', LEASES, member(id, i))
  redis.call('HINCRBY', b, 'done', 1)
  if kind == '1' then
    redis.call('HINCRBY', b, 'completed', 1)
    redis.call('HINCRBY', b, 'out_bytes', #line + 1)
  else
    if kind == '2' then redis.call('HINCRBY', b, 'failed', 1)
    elseif kind == '3' then
      redis.call('HINCRBY', b, 'failed', 1)
      redis.call('HINCRBY', b, 'expired', 1)
    else redis.call('HINCRBY', b, 'cancelled', 1) end
    redis.call('HINCRBY', b, 'err_bytes', #line + 1)
  end
  return true
end

-- finish settles the batch when every item has a result: finalizing (a
-- cancelling one stays cancelling), out of the queues, its stream
-- deleted, and in the pending set for Finalize to write its files.
local function finish(id)
  local b = bkey(id)
  local h = redis.call('HMGET', b, 'done', 'total', 'status', 'tenant')
  if not h[1] or tonumber(h[1]) < tonumber(h[2]) then return end
  redis.call('HSET', b, 'finalizing_at', NOW)
  if h[3] == 'in_progress' then redis.call('HSET', b, 'status', 'finalizing') end
  redis.call('ZREM', DEADLINES, id)
  redis.call('SREM', ACTIVE, id)
  redis.call('ZREM', qkey(h[4]), id)
  if redis.call('ZCARD', qkey(h[4])) == 0 then redis.call('ZREM', TENANTS, h[4]) end
  redis.call('DEL', skey(id), akey(id))
  redis.call('SADD', PENDING, id)
end
`

func script(body string) *redis.Script {
	return redis.NewScript(luaPrelude + strings.ReplaceAll(body, "${chunk}", strconv.Itoa(ChunkItems)))
}

// The files: a hash f:<id> (tenant, purpose, filename, bytes, created_at,
// expires_at, seq, and chunks — the count of its content's chunks — or
// batch, for an output or error file made from a batch's results when
// read); its content as chunk keys c:<id>:<i> of up to fileChunk bytes
// each, so that no value holds a whole file and no call moves more than a
// chunk; each tenant's listing fl:<tenant> by sequence; its uploads' count
// and bytes fu:<tenant>; and fexp, every file by when it expires (its
// expires_at, or its upload plus the retention), which Purge reads. While
// an upload is read its chunks are written under a marker st:<id> (the
// chunks so far) that expires, with them, after stagingTTL unless
// CommitFile makes them a file.

// fileChunk is the size of a file's chunk keys: a quarter of
// batch.ChunkBytes, so that one call moves it well inside
// store.redis.timeout (50 ms by default) on a loaded host.
const fileChunk = batch.ChunkBytes / 4

// luaFiles are the files' helpers.
const luaFiles = `
local FEXP = P .. 'fexp'
local function ckey(id, i) return P .. 'c:' .. id .. ':' .. i end
local function stkey(id) return P .. 'st:' .. id end
local function ukey(t) return P .. 'fu:' .. t end
local function lkey(t) return P .. 'fl:' .. t end
-- fileTTL is how long a file's keys live past its expiry, a backstop for
-- Purge; usageTTL, a tenant's usage past its last change (longer than any
-- file lives).
local function expireFile(id, chunks, atMs)
  local ttl = math.max(math.floor((atMs - tonumber(ARGV[4])) / 1000), 1) + 86400
  redis.call('EXPIRE', fkey(id), ttl)
  for i = 0, chunks - 1 do redis.call('EXPIRE', ckey(id, i), ttl) end
end
-- addFile lists a file made (its hash written) and schedules its expiry.
local function addFile(id, tenant, atMs)
  local seq = redis.call('INCR', P .. 'fseq')
  redis.call('HSET', fkey(id), 'seq', seq)
  redis.call('ZADD', lkey(tenant), seq, id)
  redis.call('EXPIRE', lkey(tenant), math.max(RET, 2592000) + 86400)
  redis.call('ZADD', FEXP, atMs, id)
end
-- removeFile deletes a file, its content, listing, expiry and share of
-- its tenant's usage.
local function removeFile(id)
  local h = redis.call('HMGET', fkey(id), 'tenant', 'purpose', 'bytes', 'chunks')
  redis.call('ZREM', FEXP, id)
  if not h[1] then return 0 end
  for i = 0, tonumber(h[4] or '0') - 1 do redis.call('DEL', ckey(id, i)) end
  redis.call('ZREM', lkey(h[1]), id)
  if h[2] == 'batch' then
    local n = redis.call('HINCRBY', ukey(h[1]), 'files', -1)
    redis.call('HINCRBY', ukey(h[1]), 'bytes', -tonumber(h[3]))
    if n <= 0 then redis.call('DEL', ukey(h[1])) end
  end
  redis.call('DEL', fkey(id))
  return 1
end
`

func fileScript(body string) *redis.Script { return script(luaFiles + body) }

// stageBegin marks an upload's staging (ARGV[4]: now in unix ms, [5]: id,
// [6]: the staging TTL in seconds): 0 when the id is taken.
var stageBegin = fileScript(`
local id = ARGV[5]
if redis.call('EXISTS', fkey(id)) == 1 or redis.call('EXISTS', stkey(id)) == 1 then return 0 end
redis.call('SET', stkey(id), 0, 'EX', ARGV[6])
return 1
`)

// stageChunk writes chunk i of a staged upload (ARGV[4]: now, [5]: id,
// [6]: TTL, [7]: i, [8]: the chunk): 0 when its staging was dropped.
var stageChunk = fileScript(`
local id = ARGV[5]
if redis.call('EXISTS', stkey(id)) == 0 then return 0 end
redis.call('SET', ckey(id, ARGV[7]), ARGV[8], 'EX', ARGV[6])
redis.call('SET', stkey(id), tonumber(ARGV[7]) + 1, 'EX', ARGV[6])
return 1
`)

// stageAbort drops a staged upload (ARGV[4]: now, [5]: id).
var stageAbort = fileScript(`
local id = ARGV[5]
local n = tonumber(redis.call('GET', stkey(id)) or '0')
for i = 0, n - 1 do redis.call('DEL', ckey(id, i)) end
redis.call('DEL', stkey(id))
return 1
`)

// commitFile makes a staged upload a file (ARGV[4]: now in unix ms,
// [5..]: id, tenant, purpose, filename, bytes, created_at, expires_at or
// "", its expiry in unix ms, max files, max bytes (0: none)): 1 done, 0
// taken, -1 not staged, {-2, files} past the count, {-3, bytes} past the
// bytes.
var commitFile = fileScript(`
local id, tenant, purpose, size = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[9])
local chunks = redis.call('GET', stkey(id))
if not chunks then return -1 end
if redis.call('EXISTS', fkey(id)) == 1 then return 0 end
if purpose == 'batch' then
  local u = redis.call('HMGET', ukey(tenant), 'files', 'bytes')
  local n, b = tonumber(u[1] or '0'), tonumber(u[2] or '0')
  local maxN, maxB = tonumber(ARGV[13]), tonumber(ARGV[14])
  if maxN > 0 and n >= maxN then return {-2, n} end
  if maxB > 0 and b + size > maxB then return {-3, b} end
  redis.call('HINCRBY', ukey(tenant), 'files', 1)
  redis.call('HINCRBY', ukey(tenant), 'bytes', size)
  redis.call('EXPIRE', ukey(tenant), math.max(RET, 2592000) + 86400)
end
redis.call('HSET', fkey(id), 'tenant', tenant, 'purpose', purpose, 'filename', ARGV[8], 'bytes', size, 'created_at', ARGV[10], 'chunks', chunks)
if ARGV[11] ~= '' then redis.call('HSET', fkey(id), 'expires_at', ARGV[11]) end
local at = tonumber(ARGV[12])
addFile(id, tenant, at)
expireFile(id, tonumber(chunks), at)
redis.call('DEL', stkey(id))
return 1
`)

// deleteFile deletes a file (ARGV[4]: now, [5]: id, [6]: its tenant, or
// "" for any): 1 done, 0 not found.
var deleteFile = fileScript(`
local id = ARGV[5]
if ARGV[6] ~= '' and redis.call('HGET', fkey(id), 'tenant') ~= ARGV[6] then return 0 end
return removeFile(id)
`)

// StageFile writes content's chunks, a call each.
func (j *Jobs) StageFile(ctx context.Context, id string, content io.Reader) (int64, error) {
	ttl := int64(stagingTTL / time.Second)
	ok, err := j.runInt(ctx, stageBegin, 0, time.Now().UnixMilli(), id, ttl)
	if err != nil {
		return 0, err
	}
	if ok == 0 {
		return 0, fmt.Errorf("%w: file %s exists", batch.ErrConflict, id)
	}
	// The buffer grows from 64 KiB to a chunk as the content proves that
	// long: a small file costs no chunk of memory to clear.
	buf := make([]byte, 64<<10)
	var size int64
	for i := 0; ; i++ {
		if size > 0 && len(buf) < fileChunk {
			buf = make([]byte, min(2*len(buf), fileChunk))
		}
		n, rerr := batch.Fill(content, buf)
		if rerr == nil {
			rerr = ctx.Err()
		}
		var werr error
		if n > 0 && rerr == nil {
			var ok int64
			ok, werr = j.runInt(ctx, stageChunk, 0, 0, id, ttl, i, buf[:n])
			if werr == nil && ok == 0 {
				werr = fmt.Errorf("batch: the staging of %s was dropped", id)
			}
			size += int64(n)
		}
		if rerr != nil || werr != nil {
			_ = j.AbortFile(context.WithoutCancel(ctx), id)
			if rerr != nil {
				return size, rerr
			}
			return size, werr
		}
		if n < len(buf) {
			return size, nil
		}
	}
}

// CommitFile makes staged content a file, within the tenant's quota.
func (j *Jobs) CommitFile(ctx context.Context, f batch.File, q batch.Quota) error {
	at := f.ExpiresAt
	if at.IsZero() {
		at = f.CreatedAt.Add(j.retention)
	}
	v, err := j.eval(ctx, commitFile, time.Time{}, 0, time.Now().UnixMilli(), f.ID, f.Tenant, f.Purpose, f.Filename, f.Bytes,
		f.CreatedAt.Format(time.RFC3339Nano), stamp(f.ExpiresAt), at.UnixMilli(), q.MaxFiles, q.MaxBytes)
	if err != nil {
		return err
	}
	switch r := v.(type) {
	case int64:
		switch r {
		case 0:
			return fmt.Errorf("%w: file %s exists", batch.ErrConflict, f.ID)
		case -1:
			return fmt.Errorf("batch: no content staged for %s", f.ID)
		}
		return nil
	case []any:
		code, _ := r[0].(int64)
		used, _ := r[1].(int64)
		if code == -2 {
			return &batch.QuotaError{Used: used, Max: int64(q.MaxFiles)}
		}
		return &batch.QuotaError{Bytes: true, Used: used, Max: q.MaxBytes}
	}
	return fmt.Errorf("batch: commit: unexpected answer %v", v)
}

// AbortFile drops staged content.
func (j *Jobs) AbortFile(ctx context.Context, id string) error {
	return j.run(ctx, stageAbort, 0, 0, id)
}

// DeleteFile deletes the tenant's file.
func (j *Jobs) DeleteFile(ctx context.Context, tenant, id string) error {
	n, err := j.runInt(ctx, deleteFile, 0, 0, id, tenant)
	if err == nil && n == 0 {
		err = batch.ErrNotFound
	}
	return err
}

// FileUsage reads the tenant's count and bytes of uploads.
func (j *Jobs) FileUsage(ctx context.Context, tenant string) (int, int64, error) {
	var vals []any
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		vals, err = c.HMGet(ctx, j.key("fu", tenant), "files", "bytes").Result()
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	n, _ := strconv.Atoi(str(vals[0]))
	size, _ := strconv.ParseInt(str(vals[1]), 10, 64)
	return n, size, nil
}

func str(v any) string { s, _ := v.(string); return s }

// purgeBatch deletes an ended batch (ARGV[4]: now, [5]: id): its record,
// results and files, and its place in its tenant's listing.
var purgeBatch = fileScript(`
local id = ARGV[5]
local t = redis.call('HGET', bkey(id), 'tenant')
redis.call('ZREM', P .. 'ended', id)
removeFile('file-out-' .. id)
removeFile('file-err-' .. id)
if t then redis.call('ZREM', P .. 'l:' .. t, id) end
redis.call('DEL', bkey(id), rkey(id), akey(id), skey(id))
return 1
`)

// Purge deletes the files past their expiry and the batches ended more
// than retention ago, one call each, 64 a round. (Their keys expire by
// JobsOptions.Retention in any case: a backstop.)
func (j *Jobs) Purge(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	total := 0
	for _, q := range []struct {
		key    string
		before time.Time
		s      *redis.Script
		args   func(id string) []any
	}{
		{"fexp", now, deleteFile, func(id string) []any { return []any{0, id, ""} }},
		{"ended", now.Add(-retention), purgeBatch, func(id string) []any { return []any{0, id} }},
	} {
		if q.key == "ended" && retention <= 0 {
			continue
		}
		for {
			var due []string
			err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
				var err error
				due, err = c.ZRangeByScore(ctx, j.key(q.key), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(q.before.UnixMilli(), 10), Count: 64}).Result()
				return err
			})
			if err != nil {
				return total, err
			}
			if len(due) == 0 {
				break
			}
			for _, id := range due {
				n, err := j.runInt(ctx, q.s, 0, q.args(id)...)
				if err != nil {
					return total, err
				}
				total += int(n)
			}
		}
	}
	return total, nil
}

// run runs s with the prelude's arguments (now is not used by it) then args.
func (j *Jobs) run(ctx context.Context, s *redis.Script, retention int64, args ...any) error {
	_, err := j.eval(ctx, s, time.Time{}, retention, args...)
	return err
}

func (j *Jobs) runInt(ctx context.Context, s *redis.Script, retention int64, args ...any) (int64, error) {
	v, err := j.eval(ctx, s, time.Time{}, retention, args...)
	n, _ := v.(int64)
	return n, err
}

func (j *Jobs) eval(ctx context.Context, s *redis.Script, now time.Time, retention int64, args ...any) (any, error) {
	if retention <= 0 {
		retention = int64(j.retention / time.Second)
	}
	argv := append([]any{j.prefix, now.Format(time.RFC3339Nano), retention}, args...)
	var out any
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		out, err = s.Run(ctx, c, []string{j.route}, argv...).Result()
		return err
	})
	return out, err
}

func (j *Jobs) fileMeta(ctx context.Context, tenant, id string) (batch.File, map[string]string, error) {
	var h map[string]string
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		h, err = c.HGetAll(ctx, j.key("f", id)).Result()
		return err
	})
	if err != nil {
		return batch.File{}, nil, err
	}
	if len(h) == 0 || h["tenant"] != tenant {
		return batch.File{}, nil, batch.ErrNotFound
	}
	return parseFile(id, h), h, nil
}

func parseFile(id string, h map[string]string) batch.File {
	n, _ := strconv.ParseInt(h["bytes"], 10, 64)
	at, _ := time.Parse(time.RFC3339Nano, h["created_at"])
	exp, _ := time.Parse(time.RFC3339Nano, h["expires_at"])
	return batch.File{ID: id, Tenant: h["tenant"], Purpose: h["purpose"], Filename: h["filename"], Bytes: n, CreatedAt: at, ExpiresAt: exp}
}

// File returns the tenant's file.
func (j *Jobs) File(ctx context.Context, tenant, id string) (batch.File, error) {
	f, _, err := j.fileMeta(ctx, tenant, id)
	return f, err
}

// FileContent reads the tenant's file: an upload's chunks one call each,
// or a batch's output or error file made from its results ChunkItems at a
// time, in line order.
func (j *Jobs) FileContent(ctx context.Context, tenant, id string) (io.ReadCloser, error) {
	_, h, err := j.fileMeta(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if from := h["batch"]; from != "" {
		return j.resultsFile(ctx, from, id == batch.OutputFileID(from))
	}
	if _, ok := h["chunks"]; !ok {
		return j.legacyContent(ctx, id), nil
	}
	chunks, _ := strconv.Atoi(h["chunks"])
	return batch.NewChunkReader(func(i int) ([]byte, error) {
		if i >= chunks {
			return nil, nil
		}
		var owner *redis.StringCmd
		var part *redis.StringCmd
		err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				owner = p.HGet(ctx, j.key("f", id), "tenant")
				part = p.Get(ctx, j.key("c", id, strconv.Itoa(i)))
				return nil
			})
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		b, perr := part.Bytes()
		if owner.Val() != tenant || perr != nil {
			return nil, batch.ErrNotFound
		}
		return b, nil
	}), nil
}

// legacyContent reads a file uploaded before files were chunk keys: its
// content one string, c:<id>, read fileChunk at a time. Such files expire
// with the retention they were written under.
func (j *Jobs) legacyContent(ctx context.Context, id string) io.ReadCloser {
	return batch.NewChunkReader(func(i int) ([]byte, error) {
		off := int64(i) * fileChunk
		var part string
		err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			part, err = c.GetRange(ctx, j.key("c", id), off, off+fileChunk-1).Result()
			return err
		})
		if err != nil || part == "" {
			return nil, err
		}
		return []byte(part), nil
	})
}

// resultsFile is a batch's output (the successes) or error file (the
// rest), read from its results ChunkItems at a time.
func (j *Jobs) resultsFile(ctx context.Context, id string, successes bool) (io.ReadCloser, error) {
	var total int
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		total, err = c.HGet(ctx, j.key("b", id), "total").Int()
		return err
	})
	if err != nil {
		return nil, err
	}
	return batch.NewChunkReader(func(chunk int) ([]byte, error) {
		from := chunk * ChunkItems
		if from >= total {
			return nil, nil
		}
		fields := make([]string, 0, ChunkItems)
		for i := from; i < min(from+ChunkItems, total); i++ {
			fields = append(fields, strconv.Itoa(i))
		}
		var vals []any
		err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			vals, err = c.HMGet(ctx, j.key("r", id), fields...).Result()
			return err
		})
		if err != nil {
			return nil, err
		}
		out := []byte{} // not nil: a chunk without a line of this file is not the end
		for _, v := range vals {
			s, _ := v.(string)
			if s == "" || (s[0] == '1') != successes {
				continue
			}
			out = append(out, s[1:]...)
			out = append(out, '\n')
		}
		return out, nil
	}), nil
}

// stageItems writes items to a new or validating batch's stream (ARGV[4]: batch id;
// ARGV[5]: whether to start afresh; then index, custom_id, method, url,
// body per item).
var stageItems = script(`
local s = skey(ARGV[4])
local st = redis.call('HGET', bkey(ARGV[4]), 'status')
if st and st ~= 'validating' then return 0 end
if ARGV[5] == '1' then redis.call('DEL', s) end
for k = 6, #ARGV, 5 do
  redis.call('XADD', s, sid(tonumber(ARGV[k])), 'i', ARGV[k], 'c', ARGV[k + 1], 'm', ARGV[k + 2], 'u', ARGV[k + 3], 'b', ARGV[k + 4], 'n', #ARGV[k + 4])
end
redis.call('EXPIRE', s, 3600)
return 1
`)

// commitBatch makes the staged batch visible and claimable (ARGV[4..]: id,
// tenant, rec, total, bytes, expires_at (unix ms), ttl (s), model, and
// "start" for a validating batch, which must be one, or "" for a new one).
var commitBatch = script(`
local id, tenant = ARGV[4], ARGV[5]
local b = bkey(id)
local start = ARGV[12] == 'start'
local h = redis.call('HMGET', b, 'tenant', 'status', 'seq')
if start then
  if h[1] ~= tenant then return -2 end
  if h[2] ~= 'validating' then return 0 end
elseif h[1] then
  return 0
end
if redis.call('XLEN', skey(id)) ~= tonumber(ARGV[7]) then return -1 end
redis.call('XGROUP', 'CREATE', skey(id), G, '0')
local ttl = tonumber(ARGV[10])
local seq = h[3]
if start then
  redis.call('HSET', b, 'status', 'in_progress', 'total', ARGV[7], 'bytes', ARGV[8], 'model', ARGV[11], 'in_progress_at', NOW)
  redis.call('SREM', PENDING, id)
else
  seq = redis.call('INCR', P .. 'seq')
  redis.call('HSET', b, 'rec', ARGV[6], 'tenant', tenant, 'seq', seq, 'status', 'in_progress', 'total', ARGV[7], 'bytes', ARGV[8],
    'done', 0, 'completed', 0, 'failed', 0, 'expired', 0, 'cancelled', 0, 'out_bytes', 0, 'err_bytes', 0)
  redis.call('EXPIRE', b, ttl)
end
redis.call('EXPIRE', skey(id), ttl)
redis.call('ZADD', DEADLINES, ARGV[9], id)
redis.call('SADD', ACTIVE, id)
redis.call('ZADD', qkey(tenant), seq, id)
redis.call('ZADD', TENANTS, 0, tenant)
local l = P .. 'l:' .. tenant
redis.call('ZADD', l, seq, id)
-- The listing keeps ids whose records have expired: drop a few of the
-- oldest at each creation, so that it does not grow past the live ones.
for _, old in ipairs(redis.call('ZRANGE', l, 0, 9)) do
  if redis.call('EXISTS', bkey(old)) == 0 then redis.call('ZREM', l, old) end
end
redis.call('EXPIRE', l, ttl)
return 1
`)

// createValidating stores a validating batch, without items (ARGV[4..]:
// id, tenant, rec, ttl (s), lines, bytes: its share of the backlog until
// it starts).
var createValidating = script(`
local id, tenant = ARGV[4], ARGV[5]
local b = bkey(id)
if redis.call('EXISTS', b) == 1 then return 0 end
local seq = redis.call('INCR', P .. 'seq')
redis.call('HSET', b, 'rec', ARGV[6], 'tenant', tenant, 'seq', seq, 'status', 'validating', 'total', 0, 'bytes', ARGV[9],
  'lines', ARGV[8], 'done', 0, 'completed', 0, 'failed', 0, 'expired', 0, 'cancelled', 0, 'out_bytes', 0, 'err_bytes', 0)
local ttl = tonumber(ARGV[7])
redis.call('EXPIRE', b, ttl)
redis.call('SADD', PENDING, id)
redis.call('SADD', ACTIVE, id)
local l = P .. 'l:' .. tenant
redis.call('ZADD', l, seq, id)
redis.call('EXPIRE', l, ttl)
return 1
`)

// failScript ends a validating batch as failed (ARGV[4..]: id, tenant,
// errors as JSON, now in unix ms): 1 done, 0 not validating, -2 not
// found.
var failScript = script(`
local b = bkey(ARGV[4])
local h = redis.call('HMGET', b, 'tenant', 'status')
if h[1] ~= ARGV[5] then return -2 end
if h[2] ~= 'validating' then return 0 end
redis.call('HSET', b, 'status', 'failed', 'failed_at', NOW, 'errors', ARGV[6])
redis.call('ZADD', P .. 'ended', ARGV[7], ARGV[4])
redis.call('SREM', PENDING, ARGV[4])
redis.call('SREM', ACTIVE, ARGV[4])
redis.call('EXPIRE', b, RET)
return 1
`)

// finalizeScript writes a settled batch's files and ends it (ARGV[4..]:
// id, tenant, the files' expires_at or "", when they expire in unix ms,
// now in unix ms): 1 done, 0 not ready, -2 not found.
var finalizeScript = fileScript(`
local id = ARGV[4]
local b = bkey(id)
local h = redis.call('HMGET', b, 'tenant', 'status', 'done', 'total', 'expired', 'out_bytes', 'err_bytes', 'expired_at')
if h[1] ~= ARGV[5] then return -2 end
if (h[2] ~= 'finalizing' and h[2] ~= 'cancelling') or tonumber(h[3]) < tonumber(h[4]) then return 0 end
if h[2] == 'cancelling' then
  redis.call('HSET', b, 'status', 'cancelled', 'cancelled_at', NOW)
elseif tonumber(h[5] or '0') > 0 then
  redis.call('HSET', b, 'status', 'expired')
  if not h[8] then redis.call('HSET', b, 'expired_at', NOW) end
else
  redis.call('HSET', b, 'status', 'completed', 'completed_at', NOW)
end
for _, f in ipairs({{'file-out-' .. id, tonumber(h[6] or '0'), '_output.jsonl', 'out_file'}, {'file-err-' .. id, tonumber(h[7] or '0'), '_error.jsonl', 'err_file'}}) do
  if f[2] > 0 then
    redis.call('HSET', fkey(f[1]), 'tenant', h[1], 'purpose', 'batch_output', 'filename', 'batch_' .. id .. f[3],
      'bytes', f[2], 'created_at', NOW, 'batch', id)
    if ARGV[6] ~= '' then redis.call('HSET', fkey(f[1]), 'expires_at', ARGV[6]) end
    -- It lives as long as the batch's results it is made from, or to its
    -- expires_at when sooner.
    addFile(f[1], h[1], tonumber(ARGV[7]))
    redis.call('EXPIRE', fkey(f[1]), RET)
    redis.call('HSET', b, f[4], f[1])
  end
end
redis.call('SREM', PENDING, id)
redis.call('ZADD', P .. 'ended', ARGV[8], id)
redis.call('EXPIRE', b, RET)
redis.call('EXPIRE', rkey(id), RET)
return 1
`)

// stamp is t as the scripts keep times, or "" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

// batchRec is the part of a batch that never changes, kept as JSON.
type batchRec struct {
	ID               string            `json:"id"`
	Endpoint         string            `json:"endpoint"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
	CreatedAt        time.Time         `json:"created_at"`
	InProgressAt     time.Time         `json:"in_progress_at"`
	ExpiresAt        time.Time         `json:"expires_at"`
	// OutputExpiresAfter is in seconds.
	OutputExpiresAfter int64 `json:"output_expires_after,omitempty"`
}

func recOf(b batch.Batch) ([]byte, error) {
	return json.Marshal(batchRec{ID: b.ID, Endpoint: b.Endpoint, InputFileID: b.InputFileID, CompletionWindow: b.CompletionWindow,
		Metadata: b.Metadata, CreatedAt: b.CreatedAt, InProgressAt: b.InProgressAt, ExpiresAt: b.ExpiresAt,
		OutputExpiresAfter: int64(b.OutputExpiresAfter / time.Second)})
}

// ttlOf is how long a batch's keys stay: its window, then the retention.
func (j *Jobs) ttlOf(b batch.Batch) int64 {
	return max(int64((time.Until(b.ExpiresAt)+j.retention)/time.Second), int64(j.retention/time.Second))
}

// CreateBatch writes the items to the batch's stream, ChunkItems at a
// time, then creates the batch, its consumer group and its places in the
// queues in one script: until then no replica sees it, and a creation cut
// short leaves only a stream that expires within an hour.
func (j *Jobs) CreateBatch(ctx context.Context, b batch.Batch, reqs []batch.Request) error {
	validating := b.Status == batch.StatusValidating
	if validating != (len(reqs) == 0) {
		return errors.New("batch: a batch is created validating without requests, or with at least one")
	}
	if validating {
		rec, err := recOf(b)
		if err != nil {
			return err
		}
		ok, err := j.runInt(ctx, createValidating, 0, b.ID, b.Tenant, rec, j.ttlOf(b), b.Lines, b.LineBytes)
		if err == nil && ok == 0 {
			err = fmt.Errorf("%w: batch %s exists", batch.ErrConflict, b.ID)
		}
		return err
	}
	if b.InProgressAt.IsZero() {
		b.InProgressAt = b.CreatedAt
	}
	return j.queue(ctx, b, "", batch.Slice(reqs), time.Time{})
}

// Start queues the items of a validating batch.
func (j *Jobs) Start(ctx context.Context, tenant, id, model string, reqs iter.Seq2[batch.Request, error], now time.Time) error {
	b, err := j.Batch(ctx, tenant, id)
	if err != nil {
		return err
	}
	if b.Status != batch.StatusValidating {
		return fmt.Errorf("%w: batch %s is %s, not validating", batch.ErrConflict, id, b.Status)
	}
	b.Model = model
	return j.queue(ctx, b, "start", reqs, now)
}

// queue stages the items, ChunkItems or fileChunk bytes of bodies a call
// (whichever comes first), then commits the batch: a new
// one (mode "") or a validating one (mode "start").
func (j *Jobs) queue(ctx context.Context, b batch.Batch, mode string, reqs iter.Seq2[batch.Request, error], now time.Time) error {
	var size, pending int64
	n := 0
	args := []any{b.ID, "1"}
	flush := func() error {
		if len(args) == 2 {
			return nil
		}
		pending = 0
		ok, err := j.runInt(ctx, stageItems, 0, args...)
		if err != nil {
			return err
		}
		if ok == 0 {
			return fmt.Errorf("%w: batch %s exists", batch.ErrConflict, b.ID)
		}
		args = append(args[:1], "0")
		return nil
	}
	for r, err := range reqs {
		if err != nil {
			return err
		}
		args = append(args, n, r.CustomID, r.Method, r.URL, []byte(r.Body))
		size += int64(len(r.Body))
		pending += int64(len(r.Body))
		if n++; len(args) == 2+5*ChunkItems || pending >= fileChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("batch: a batch needs at least one request")
	}
	rec, err := recOf(b)
	if err != nil {
		return err
	}
	v, err := j.eval(ctx, commitBatch, now, 0, b.ID, b.Tenant, rec, n, size, b.ExpiresAt.UnixMilli(), j.ttlOf(b), b.Model, mode)
	ok, _ := v.(int64)
	switch {
	case err != nil:
		return err
	case ok == -2:
		return batch.ErrNotFound
	case ok == 0 && mode == "start":
		return fmt.Errorf("%w: batch %s is no longer validating", batch.ErrConflict, b.ID)
	case ok == 0:
		return fmt.Errorf("%w: batch %s exists", batch.ErrConflict, b.ID)
	case ok < 0:
		return fmt.Errorf("batch: creating %s: its items were not all written (created twice at once?)", b.ID)
	}
	return nil
}

// scoreOf is member's sequence in the listing l: the place a page that
// starts after it starts from; batch.ErrNotFound when it is not listed.
func (j *Jobs) scoreOf(ctx context.Context, l, member string) (float64, error) {
	var seq float64
	found := false
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		seq, err = c.ZScore(ctx, l, member).Result()
		found = err == nil
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, batch.ErrNotFound
	}
	return seq, nil
}

// Files lists the tenant's files from its listing, by sequence.
func (j *Jobs) Files(ctx context.Context, tenant, purpose, after string, limit int, asc bool) ([]batch.File, bool, error) {
	l := j.key("fl", tenant)
	lo, hi := "-inf", "+inf"
	if after != "" {
		seq, err := j.scoreOf(ctx, l, after)
		if err != nil {
			return nil, false, err
		}
		if asc {
			lo = "(" + strconv.FormatFloat(seq, 'f', -1, 64)
		} else {
			hi = "(" + strconv.FormatFloat(seq, 'f', -1, 64)
		}
	}
	var list []batch.File
	for {
		var ids []redis.Z
		err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			by := &redis.ZRangeBy{Min: lo, Max: hi, Count: int64(limit) + 1}
			if asc {
				ids, err = c.ZRangeByScoreWithScores(ctx, l, by).Result()
			} else {
				ids, err = c.ZRevRangeByScoreWithScores(ctx, l, by).Result()
			}
			return err
		})
		if err != nil || len(ids) == 0 {
			return list, false, err
		}
		cmds := make([]*redis.MapStringStringCmd, len(ids))
		err = j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, z := range ids {
					cmds[i] = p.HGetAll(ctx, j.key("f", z.Member.(string)))
				}
				return nil
			})
			return err
		})
		if err != nil {
			return list, false, err
		}
		for i, cmd := range cmds {
			h := cmd.Val()
			if len(h) == 0 || h["tenant"] != tenant || purpose != "" && h["purpose"] != purpose {
				continue // expired, or another purpose
			}
			if len(list) == limit {
				return list, true, nil
			}
			list = append(list, parseFile(ids[i].Member.(string), h))
		}
		if len(ids) <= limit {
			return list, false, nil
		}
		last := "(" + strconv.FormatFloat(ids[len(ids)-1].Score, 'f', -1, 64)
		if asc {
			lo = last
		} else {
			hi = last
		}
	}
}

var batchFields = []string{"rec", "tenant", "status", "total", "completed", "failed", "cancelled", "out_file", "err_file",
	"finalizing_at", "completed_at", "expired_at", "cancelling_at", "cancelled_at",
	"model", "failed_at", "errors", "in_progress_at", "in_tok", "out_tok", "cached_tok", "reason_tok"}

// readBatches reads the records of the batches ids in one pipeline.
func (j *Jobs) readBatches(ctx context.Context, c redis.UniversalClient, ids []string) ([]*redis.SliceCmd, error) {
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = j.readBatch(ctx, p, id)
		}
		return nil
	})
	return cmds, err
}

func (j *Jobs) readBatch(ctx context.Context, c redis.Cmdable, id string) *redis.SliceCmd {
	return c.HMGet(ctx, j.key("b", id), batchFields...)
}

// parseBatch reads HMGET batchFields; ok is false for a batch that does
// not exist.
func parseBatch(vals []any) (batch.Batch, bool) {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i], _ = v.(string)
	}
	if s[0] == "" {
		return batch.Batch{}, false
	}
	var rec batchRec
	if json.Unmarshal([]byte(s[0]), &rec) != nil {
		return batch.Batch{}, false
	}
	atoi := func(x string) int { n, _ := strconv.Atoi(x); return n }
	at := func(x string) time.Time { t, _ := time.Parse(time.RFC3339Nano, x); return t }
	b := batch.Batch{ID: rec.ID, Tenant: s[1], Endpoint: rec.Endpoint, InputFileID: rec.InputFileID, CompletionWindow: rec.CompletionWindow,
		Metadata: rec.Metadata, OutputExpiresAfter: time.Duration(rec.OutputExpiresAfter) * time.Second,
		Status: batch.Status(s[2]), Counts: batch.Counts{Total: atoi(s[3]), Completed: atoi(s[4]), Failed: atoi(s[5])},
		Cancelled: atoi(s[6]), OutputFileID: s[7], ErrorFileID: s[8], CreatedAt: rec.CreatedAt, InProgressAt: rec.InProgressAt,
		ExpiresAt: rec.ExpiresAt, FinalizingAt: at(s[9]), CompletedAt: at(s[10]), ExpiredAt: at(s[11]), CancellingAt: at(s[12]), CancelledAt: at(s[13]),
		Model: s[14], FailedAt: at(s[15]),
		Usage: batch.Usage{InputTokens: int64(atoi(s[18])), OutputTokens: int64(atoi(s[19])), CachedTokens: int64(atoi(s[20])), ReasoningTokens: int64(atoi(s[21]))}}
	if s[16] != "" {
		_ = json.Unmarshal([]byte(s[16]), &b.Errors)
	}
	if s[17] != "" {
		b.InProgressAt = at(s[17])
	}
	return b, true
}

// Fail ends a validating batch as failed.
func (j *Jobs) Fail(ctx context.Context, tenant, id string, errs []batch.LineError, now time.Time) error {
	raw, err := json.Marshal(errs)
	if err != nil {
		return err
	}
	v, err := j.eval(ctx, failScript, now, 0, id, tenant, raw, now.UnixMilli())
	n, _ := v.(int64)
	switch {
	case err != nil:
		return err
	case n == -2:
		return batch.ErrNotFound
	case n == 0:
		return fmt.Errorf("%w: batch %s is not validating", batch.ErrConflict, id)
	}
	return nil
}

// Finalize ends a settled batch: its files (made from the results when
// read) and its final status.
func (j *Jobs) Finalize(ctx context.Context, tenant, id string, now time.Time) (batch.Batch, error) {
	b, err := j.Batch(ctx, tenant, id)
	if err != nil {
		return b, err
	}
	var expires time.Time
	if b.OutputExpiresAfter > 0 {
		expires = now.Add(b.OutputExpiresAfter)
	}
	at := now.Add(j.retention)
	if !expires.IsZero() && expires.Before(at) {
		at = expires
	}
	v, err := j.eval(ctx, finalizeScript, now, 0, id, tenant, stamp(expires), at.UnixMilli(), now.UnixMilli())
	n, _ := v.(int64)
	switch {
	case err != nil:
		return b, err
	case n == -2:
		return b, batch.ErrNotFound
	case n == 0:
		return b, fmt.Errorf("%w: batch %s is %s, not ready to finalize", batch.ErrConflict, id, b.Status)
	}
	return j.Batch(ctx, tenant, id)
}

// Pending lists the batches waiting for Start, Fail or Finalize; ids whose
// records expired are dropped from the set.
func (j *Jobs) Pending(ctx context.Context) ([]batch.Batch, error) {
	var out []batch.Batch
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		out = nil
		ids, err := c.SMembers(ctx, j.key("pending")).Result()
		if err != nil || len(ids) == 0 {
			return err
		}
		cmds, err := j.readBatches(ctx, c, ids)
		if err != nil {
			return err
		}
		for i, cmd := range cmds {
			b, ok := parseBatch(cmd.Val())
			if !ok {
				c.SRem(ctx, j.key("pending"), ids[i])
				continue
			}
			if b.Status == batch.StatusValidating || b.Status == batch.StatusFinalizing || b.Status == batch.StatusCancelling {
				out = append(out, b)
			}
		}
		return nil
	})
	return out, err
}

// Batch returns the tenant's batch.
func (j *Jobs) Batch(ctx context.Context, tenant, id string) (batch.Batch, error) {
	var vals []any
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		vals, err = j.readBatch(ctx, c, id).Result()
		return err
	})
	if err != nil {
		return batch.Batch{}, err
	}
	b, ok := parseBatch(vals)
	if !ok || b.Tenant != tenant {
		return batch.Batch{}, batch.ErrNotFound
	}
	return b, nil
}

// Batches lists the tenant's batches, newest first, from its listing.
func (j *Jobs) Batches(ctx context.Context, tenant, after string, limit int) ([]batch.Batch, bool, error) {
	l := j.key("l", tenant)
	top := "+inf"
	if after != "" {
		seq, err := j.scoreOf(ctx, l, after)
		if err != nil {
			return nil, false, err
		}
		top = "(" + strconv.FormatFloat(seq, 'f', -1, 64)
	}
	var list []batch.Batch
	more := false
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		list, more = nil, false
		ids, err := c.ZRevRangeByScore(ctx, l, &redis.ZRangeBy{Max: top, Min: "-inf", Count: int64(limit) + 1}).Result()
		if err != nil || len(ids) == 0 {
			return err
		}
		cmds, err := j.readBatches(ctx, c, ids)
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			b, ok := parseBatch(cmd.Val())
			if !ok || b.Tenant != tenant {
				continue // its record expired
			}
			if len(list) == limit {
				more = true
				break
			}
			list = append(list, b)
		}
		return nil
	})
	return list, more, err
}

// cancelChunk cancels up to ChunkItems of a batch's queued items (ARGV[4]:
// id, [5]: tenant, [6]: the stream id to start after, "" for the first
// call). It returns {status, next start or ""}: status 0 not found, -1
// conflict.
var cancelChunk = script(`
local id = ARGV[4]
local b = bkey(id)
local h = redis.call('HMGET', b, 'tenant', 'status')
if not h[1] or h[1] ~= ARGV[5] then return {0, ''} end
if ARGV[6] == '' then
  if h[2] == 'cancelling' then return {1, ''} end
  if h[2] ~= 'in_progress' and h[2] ~= 'validating' then return {-1, h[2]} end
  redis.call('HSET', b, 'status', 'cancelling', 'cancelling_at', NOW)
  redis.call('ZREM', qkey(h[1]), id)
elseif h[2] ~= 'cancelling' then
  return {1, ''}
end
local start = '-'
if ARGV[6] ~= '' then start = '(' .. ARGV[6] end
local es = redis.call('XRANGE', skey(id), start, '+', 'COUNT', ${chunk})
for _, e in ipairs(es) do
  local i = tonumber(string.sub(e[1], 3)) - 1
  local score = redis.call('ZSCORE', LEASES, member(id, i))
  -- Queued: never read, or released (lease 0). Claimed ones finish.
  if not score or tonumber(score) == 0 then
    result(id, i, '4', errline(id, i, field(e, 'c'), 'batch_cancelled', CANCELLED))
  end
end
finish(id)
if #es < ${chunk} then return {1, ''} end
return {1, es[#es][1]}
`)

// Cancel marks the batch cancelling and cancels its queued items, a chunk
// per call; the claimed ones finish (or are released, and cancelled then).
func (j *Jobs) Cancel(ctx context.Context, tenant, id string, now time.Time) (batch.Batch, error) {
	after := ""
	for {
		v, err := j.eval(ctx, cancelChunk, now, 0, id, tenant, after)
		if err != nil {
			return batch.Batch{}, err
		}
		res, _ := v.([]any)
		if len(res) != 2 {
			return batch.Batch{}, fmt.Errorf("batch: cancel: unexpected answer %v", v)
		}
		st, _ := res[0].(int64)
		next, _ := res[1].(string)
		switch st {
		case 0:
			return batch.Batch{}, batch.ErrNotFound
		case -1:
			return batch.Batch{}, fmt.Errorf("%w: batch %s is %s", batch.ErrConflict, id, next)
		}
		if next == "" {
			break
		}
		after = next
	}
	return j.Batch(ctx, tenant, id)
}

// jobsClaim hands out items (ARGV[4]: owner, [5]: now in unix ms, [6]:
// the lease's end in unix ms, [7]: max): lapsed claims first (XCLAIM),
// then unread items (XREADGROUP), the tenants taking turns in name order
// from the one after the tenant served last, each one's oldest batch
// first. Each claim is {batch, index, custom_id, method, url, body,
// attempts, tenant, rec}.
var jobsClaim = script(`
local owner, now, untl, max = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local out = {}
local function add(id, e)
  local f = {}
  for k = 1, #e[2], 2 do f[e[2][k]] = e[2][k + 1] end
  local i = tonumber(f['i'])
  local h = redis.call('HMGET', bkey(id), 'tenant', 'rec')
  if not h[1] then return end -- its record expired
  redis.call('ZADD', LEASES, untl, member(id, i))
  out[#out + 1] = {id, i, f['c'], f['m'], f['u'], f['b'], tonumber(redis.call('HGET', akey(id), tostring(i)) or '0'), h[1], h[2]}
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, max)) do
  local sep = string.find(m, ':', 1, true)
  local i, id = tonumber(string.sub(m, 1, sep - 1)), string.sub(m, sep + 1)
  local ok, got = pcall(redis.call, 'XCLAIM', skey(id), G, owner, 0, sid(i))
  if ok and #got > 0 and got[1] then add(id, got[1]) else redis.call('ZREM', LEASES, m) end
end
if #out >= max then return out end
local last = redis.call('GET', P .. 'last')
local order
if last then
  order = redis.call('ZRANGEBYLEX', TENANTS, '(' .. last, '+')
  for _, t in ipairs(redis.call('ZRANGEBYLEX', TENANTS, '-', '[' .. last)) do order[#order + 1] = t end
else
  order = redis.call('ZRANGEBYLEX', TENANTS, '-', '+')
end
local done = {}
local took = true
while took and #out < max do
  took = false
  for _, t in ipairs(order) do
    if #out >= max then break end
    while not done[t] do
      local bs = redis.call('ZRANGE', qkey(t), 0, 0)
      if #bs == 0 then
        done[t] = true
        redis.call('ZREM', TENANTS, t)
      else
        local ok, r = pcall(redis.call, 'XREADGROUP', 'GROUP', G, owner, 'COUNT', 1, 'STREAMS', skey(bs[1]), '>')
        if ok and r and r[1] and #r[1][2] > 0 then
          add(bs[1], r[1][2][1])
          redis.call('SET', P .. 'last', t)
          took = true
          break
        end
        redis.call('ZREM', qkey(t), bs[1])
      end
    end
  end
end
return out
`)

// Claim hands out up to max items to owner until now+lease.
func (j *Jobs) Claim(ctx context.Context, now time.Time, owner string, lease time.Duration, max int) ([]batch.Claim, error) {
	if max <= 0 {
		return nil, nil
	}
	v, err := j.eval(ctx, jobsClaim, now, 0, owner, now.UnixMilli(), now.Add(lease).UnixMilli(), max)
	if err != nil {
		return nil, err
	}
	rows, _ := v.([]any)
	out := make([]batch.Claim, 0, len(rows))
	for _, row := range rows {
		f, _ := row.([]any)
		if len(f) < 9 {
			return out, fmt.Errorf("batch: claim: unexpected answer %v", row)
		}
		str := func(x any) string { s, _ := x.(string); return s }
		num := func(x any) int { n, _ := x.(int64); return int(n) }
		var rec batchRec
		_ = json.Unmarshal([]byte(str(f[8])), &rec)
		out = append(out, batch.Claim{Batch: str(f[0]), Index: num(f[1]), Tenant: str(f[7]), Deadline: rec.ExpiresAt,
			Request:  batch.Request{CustomID: str(f[2]), Method: str(f[3]), URL: str(f[4]), Body: []byte(str(f[5]))},
			Attempts: num(f[6]), Owner: owner})
	}
	return out, nil
}

// jobsRelease gives a claim back (ARGV[4]: id, [5]: index, [6]: owner,
// [7]: "1" when attempted): its lease is set to lapse at once, so that the
// next claim takes it first; the pending entry stays, owned by owner until
// then. An item of a batch cancelled meanwhile is cancelled.
var jobsRelease = script(`
local id, i, owner = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local p = redis.pcall('XPENDING', skey(id), G, sid(i), sid(i), 1)
if type(p) ~= 'table' or p.err or #p == 0 or p[1][2] ~= owner then return 0 end
if redis.call('HGET', rkey(id), tostring(i)) then return 0 end
local st = redis.call('HGET', bkey(id), 'status')
if st ~= 'in_progress' then
  local e = redis.call('XRANGE', skey(id), sid(i), sid(i))
  local c = ''
  if #e > 0 then c = field(e[1], 'c') end
  result(id, i, '4', errline(id, i, c, 'batch_cancelled', CANCELLED))
  finish(id)
  return 1
end
if ARGV[7] == '1' then
  redis.call('HINCRBY', akey(id), tostring(i), 1)
  local ttl = redis.call('TTL', bkey(id))
  if ttl > 0 then redis.call('EXPIRE', akey(id), ttl) end
end
redis.call('ZADD', LEASES, 0, member(id, i))
return 1
`)

// Release puts a claimed item back.
func (j *Jobs) Release(ctx context.Context, c batch.Claim, attempted bool, now time.Time) error {
	a := "0"
	if attempted {
		a = "1"
	}
	_, err := j.eval(ctx, jobsRelease, now, 0, c.Batch, c.Index, c.Owner, a)
	return err
}

// completeScript writes a result once (ARGV[4]: id, [5]: index, [6]: kind,
// [7]: line, [8..11]: usage): 1 written, 0 it had one, -1 no such item.
var completeScript = script(`
local id, i = ARGV[4], tonumber(ARGV[5])
local total = redis.call('HGET', bkey(id), 'total')
if not total or i < 0 or i >= tonumber(total) then return -1 end
if not result(id, i, ARGV[6], ARGV[7], {ARGV[8], ARGV[9], ARGV[10], ARGV[11]}) then return 0 end
finish(id)
return 1
`)

// Complete writes the item's result once.
func (j *Jobs) Complete(ctx context.Context, c batch.Claim, r batch.Result, now time.Time) (bool, error) {
	if r.Kind < batch.Succeeded || r.Kind > batch.Cancelled || len(r.Line) == 0 {
		return false, fmt.Errorf("batch: Complete: result kind %d with %d bytes of line", r.Kind, len(r.Line))
	}
	u := r.Usage
	n, err := j.eval(ctx, completeScript, now, 0, c.Batch, c.Index, strconv.Itoa(int(r.Kind)), r.Line,
		u.InputTokens, u.OutputTokens, u.CachedTokens, u.ReasoningTokens)
	if err != nil {
		return false, err
	}
	switch n {
	case int64(-1):
		return false, batch.ErrNotFound
	case int64(1):
		return true, nil
	}
	return false, nil
}

// expireChunk expires up to ChunkItems of a due batch's items without a
// result (ARGV[4]: id): it returns how many, and -1 when none was left.
var expireChunk = script(`
local id = ARGV[4]
local b = bkey(id)
local st = redis.call('HGET', b, 'status')
if not st or (st ~= 'in_progress' and st ~= 'cancelling') then
  redis.call('ZREM', DEADLINES, id)
  return -1
end
if not redis.call('HGET', b, 'expired_at') then
  redis.call('HSET', b, 'expired_at', NOW)
  redis.call('ZREM', qkey(redis.call('HGET', b, 'tenant')), id)
end
local es = redis.call('XRANGE', skey(id), '-', '+', 'COUNT', ${chunk})
for _, e in ipairs(es) do
  local i = tonumber(string.sub(e[1], 3)) - 1
  result(id, i, '3', errline(id, i, field(e, 'c'), 'batch_expired', 'this request could not be executed before the completion window expired'))
end
finish(id)
if #es == 0 then return -1 end
return #es
`)

// ExpireDue expires the items of the batches whose window has passed.
func (j *Jobs) ExpireDue(ctx context.Context, now time.Time) (int, error) {
	var due []string
	err := j.r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		due, err = c.ZRangeByScore(ctx, j.key("deadlines"), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10)}).Result()
		return err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range due {
		for {
			v, err := j.eval(ctx, expireChunk, now, 0, id)
			if err != nil {
				return n, err
			}
			k, _ := v.(int64)
			if k <= 0 {
				break
			}
			n += int(k)
		}
	}
	return n, nil
}

// backlogScript sums the unfinished batches' items without a result and
// their bytes (ARGV[4]: the tenant, "" for all).
var backlogScript = script(`
local n, size = 0, 0
for _, id in ipairs(redis.call('SMEMBERS', ACTIVE)) do
  local h = redis.call('HMGET', bkey(id), 'tenant', 'total', 'done', 'bytes', 'status', 'lines')
  if not h[1] then
    redis.call('SREM', ACTIVE, id)
  elseif ARGV[4] == '' or h[1] == ARGV[4] then
    if h[5] == 'validating' then
      n = n + tonumber(h[6] or '0')
    else
      n = n + tonumber(h[2]) - tonumber(h[3])
    end
    size = size + tonumber(h[4])
  end
end
return {n, size}
`)

// Backlog counts the items without a result of the unfinished batches.
func (j *Jobs) Backlog(ctx context.Context, tenant string) (int, int64, error) {
	v, err := j.eval(ctx, backlogScript, time.Time{}, 0, tenant)
	if err != nil {
		return 0, 0, err
	}
	res, _ := v.([]any)
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("batch: backlog: unexpected answer %v", v)
	}
	n, _ := res[0].(int64)
	size, _ := res[1].(int64)
	return int(n), size, nil
}
