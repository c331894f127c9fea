// One file, over 600 lines, on purpose: batch.JobStore in one bbolt file is
// one on-disk layout — the buckets and their key encodings below — that
// every method reads and writes inside its transaction, kept together so a
// change to the layout is seen by every reader of it.

package batch

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Buckets of the Bolt file. Item keys are the batch's sequence number (8
// bytes, big-endian) then the item's index (4 bytes): a cursor walks them
// oldest batch first, in line order.
var (
	bFiles    = []byte("files")    // id → boltFile (JSON)
	bContent  = []byte("pieces")   // id \x00 piece index (4 bytes) → up to pieceBytes of its content (boltfiles.go)
	bFileList = []byte("filelist") // tenant \x00 seq → id: each tenant's files, oldest first
	bUsage    = []byte("usage")    // tenant → files (8 bytes) and bytes (8 bytes) of its uploads
	bStaging  = []byte("staging")  // id → when its staging began (unix nanos): content not yet a file
	bExpiry   = []byte("expiry")   // expires_at (unix nanos, 8 bytes) id → nothing: files that expire
	bEnded    = []byte("ended")    // ended at (unix nanos, 8 bytes) id → nothing: batches that ended
	bBatches  = []byte("batches")  // id → boltBatch (JSON)
	bByTenant = []byte("tenants")  // tenant \x00 seq → id
	bActive   = []byte("active")   // seq → id, batches not ended
	bItems    = []byte("items")    // item key → boltItem (JSON)
	bQueue    = []byte("queue")    // item key → nothing: waiting to be claimed
	bInFlight = []byte("inflight") // item key → boltLease (JSON)
	bResults  = []byte("results")  // item key → kind byte + line
)

var allBuckets = [][]byte{bFiles, bContent, bFileList, bUsage, bStaging, bExpiry, bEnded, bBatches, bByTenant, bActive, bItems, bQueue, bInFlight, bResults}

type boltBatch struct {
	Batch
	Seq     uint64
	Done    int   // items with a result
	Expired int   // items expired
	Bytes   int64 // the bodies of the items without a result
}

type boltItem struct {
	Batch    string  `json:"batch"`
	Req      Request `json:"req"`
	Attempts int     `json:"attempts,omitempty"`
}

type boltLease struct {
	Owner string    `json:"owner"`
	Until time.Time `json:"until"`
}

// ErrLocked is OpenBolt's error for a file another process holds.
var ErrLocked = errors.New("in use by another process")

// Bolt is the embedded JobStore: one file on local disk.
type Bolt struct {
	db *bolt.DB
	// lastTenant is the tenant whose item Claim took last: the next claim
	// starts with the tenant after it. Guarded by the write transaction.
	lastTenant string
}

var _ JobStore = (*Bolt)(nil)

// OpenBolt opens (creating it and its directory if need be) the store at
// path. The file is locked: a second process opening it waits up to
// lockWait, then fails. Items claimed by the previous process (one that
// crashed mid-run) go back to the queue, since no other process can hold
// them.
func OpenBolt(path string, lockWait time.Duration) (*Bolt, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		inflight, queue := tx.Bucket(bInFlight), tx.Bucket(bQueue)
		var keys [][]byte
		_ = inflight.ForEach(func(k, _ []byte) error { keys = append(keys, bytes.Clone(k)); return nil })
		for _, k := range keys {
			if err := queue.Put(k, nil); err != nil {
				return err
			}
			if err := inflight.Delete(k); err != nil {
				return err
			}
		}
		// Content staged by the previous process is an upload it never
		// finished: nobody else can be writing it.
		var staged [][]byte
		_ = tx.Bucket(bStaging).ForEach(func(k, _ []byte) error { staged = append(staged, bytes.Clone(k)); return nil })
		for _, id := range staged {
			if err := dropStaged(tx, string(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &Bolt{db: db}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: bringing the store to this version's layout: %w", path, err)
	}
	return s, nil
}

// Close closes the file.
func (s *Bolt) Close() error { return s.db.Close() }

func itemKey(seq uint64, index int) []byte {
	k := make([]byte, 12)
	binary.BigEndian.PutUint64(k, seq)
	binary.BigEndian.PutUint32(k[8:], uint32(index))
	return k
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func tenantKey(tenant string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(tenant), 0), seq)
}

func getJSON(b *bolt.Bucket, key []byte, v any) bool {
	raw := b.Get(key)
	if raw == nil {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// CreateBatch stores the batch and queues its items.
func (s *Bolt) CreateBatch(_ context.Context, b Batch, reqs []Request) error {
	validating := b.Status == StatusValidating
	if validating != (len(reqs) == 0) {
		return errors.New("batch: a batch is created validating without requests, or with at least one")
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		bb := tx.Bucket(bBatches)
		if bb.Get([]byte(b.ID)) != nil {
			return fmt.Errorf("%w: batch %s exists", ErrConflict, b.ID)
		}
		seq, err := bb.NextSequence()
		if err != nil {
			return err
		}
		if err := tx.Bucket(bByTenant).Put(tenantKey(b.Tenant, seq), []byte(b.ID)); err != nil {
			return err
		}
		if err := tx.Bucket(bActive).Put(seqKey(seq), []byte(b.ID)); err != nil {
			return err
		}
		rec := boltBatch{Batch: b, Seq: seq}
		if validating {
			return putJSON(bb, []byte(b.ID), rec)
		}
		if rec.InProgressAt.IsZero() {
			rec.InProgressAt = b.CreatedAt
		}
		return queueItems(tx, &rec, reqs)
	})
}

// queueItems makes b in_progress with one queued item per request, and
// saves it.
func queueItems(tx *bolt.Tx, b *boltBatch, reqs []Request) error {
	b.Status, b.Counts, b.Bytes = StatusInProgress, Counts{Total: len(reqs)}, 0
	for _, r := range reqs {
		b.Bytes += int64(len(r.Body))
	}
	items, queue := tx.Bucket(bItems), tx.Bucket(bQueue)
	for i, r := range reqs {
		k := itemKey(b.Seq, i)
		if err := putJSON(items, k, boltItem{Batch: b.ID, Req: r}); err != nil {
			return err
		}
		if err := queue.Put(k, nil); err != nil {
			return err
		}
	}
	return putJSON(tx.Bucket(bBatches), []byte(b.ID), b)
}

// validating loads the tenant's batch for Start or Fail.
func validating(tx *bolt.Tx, tenant, id string) (boltBatch, error) {
	b, ok := loadBatch(tx, id)
	switch {
	case !ok || b.Tenant != tenant:
		return b, ErrNotFound
	case b.Status != StatusValidating:
		return b, fmt.Errorf("%w: batch %s is %s, not validating", ErrConflict, id, b.Status)
	}
	return b, nil
}

// Start queues the items of a validating batch. The items are written a
// chunk at a time, each in its own transaction, where no claim sees them
// (they are not in the queue); the last transaction queues them all and
// makes the batch in_progress. A Start cut short leaves items that the
// next one overwrites, or that the batch's end deletes.
func (s *Bolt) Start(ctx context.Context, tenant, id, model string, reqs iter.Seq2[Request, error], now time.Time) error {
	var seq uint64
	if err := s.db.View(func(tx *bolt.Tx) error {
		b, err := validating(tx, tenant, id)
		seq = b.Seq
		return err
	}); err != nil {
		return err
	}
	n, size := 0, int64(0)
	var chunk []Request
	var chunkBytes int
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			if _, err := validating(tx, tenant, id); err != nil {
				return err
			}
			items := tx.Bucket(bItems)
			items.FillPercent = 1.0 // keys in order: pages filled, not split in half
			for i, r := range chunk {
				if err := putJSON(items, itemKey(seq, n-len(chunk)+i), boltItem{Batch: id, Req: r}); err != nil {
					return err
				}
			}
			return nil
		})
		chunk, chunkBytes = chunk[:0], 0
		return err
	}
	fail := func(err error) error {
		_ = s.db.Update(func(tx *bolt.Tx) error { return deletePrefix(tx.Bucket(bItems), seqKey(seq)) })
		return err
	}
	for r, err := range reqs {
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return fail(err)
		}
		chunk = append(chunk, r)
		chunkBytes += len(r.Body)
		n++
		size += int64(len(r.Body))
		if len(chunk) == 256 || chunkBytes >= ChunkBytes {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if n == 0 {
		return errors.New("batch: a batch needs at least one request")
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := validating(tx, tenant, id)
		if err != nil {
			return err
		}
		b.Model, b.InProgressAt = model, now
		b.Status, b.Counts, b.Bytes = StatusInProgress, Counts{Total: n}, size
		queue := tx.Bucket(bQueue)
		queue.FillPercent = 1.0
		for i := range n {
			if err := queue.Put(itemKey(b.Seq, i), nil); err != nil {
				return err
			}
		}
		return putJSON(tx.Bucket(bBatches), []byte(id), b)
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fail(err)
	}
	return err
}

// deletePrefix deletes b's keys that start with prefix.
func deletePrefix(b *bolt.Bucket, prefix []byte) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// ended records that b ended at now, for Purge to delete it after the
// retention.
func ended(tx *bolt.Tx, id string, at time.Time) error {
	return tx.Bucket(bEnded).Put(timeKey(at, id), nil)
}

// timeKey is at (unix nanos, 8 bytes) then id: bExpiry's and bEnded's
// keys, in time order.
func timeKey(at time.Time, id string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(max(at.UnixNano(), 0))), id...)
}

// Fail ends a validating batch as failed.
func (s *Bolt) Fail(_ context.Context, tenant, id string, errs []LineError, now time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := validating(tx, tenant, id)
		if err != nil {
			return err
		}
		b.Status, b.Errors, b.FailedAt = StatusFailed, errs, now
		if err := tx.Bucket(bActive).Delete(seqKey(b.Seq)); err != nil {
			return err
		}
		if err := ended(tx, id, now); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bBatches), []byte(id), b)
	})
}

// ready says whether b waits for Finalize.
func (b *boltBatch) ready() bool {
	return (b.Status == StatusFinalizing || b.Status == StatusCancelling) && b.Done >= b.Counts.Total
}

// Pending lists the batches waiting for Start, Fail or Finalize.
func (s *Bolt) Pending(context.Context) ([]Batch, error) {
	var out []Batch
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bActive).ForEach(func(_, v []byte) error {
			if b, ok := loadBatch(tx, string(v)); ok && (b.Status == StatusValidating || b.ready()) {
				out = append(out, b.Batch)
			}
			return nil
		})
	})
	return out, err
}

func loadBatch(tx *bolt.Tx, id string) (boltBatch, bool) {
	var b boltBatch
	ok := getJSON(tx.Bucket(bBatches), []byte(id), &b)
	return b, ok
}

// Batch returns the tenant's batch.
func (s *Bolt) Batch(_ context.Context, tenant, id string) (Batch, error) {
	var out Batch
	err := s.db.View(func(tx *bolt.Tx) error {
		b, ok := loadBatch(tx, id)
		if !ok || b.Tenant != tenant {
			return ErrNotFound
		}
		out = b.Batch
		return nil
	})
	return out, err
}

// Batches lists the tenant's batches, newest first.
func (s *Bolt) Batches(_ context.Context, tenant, after string, limit int) ([]Batch, bool, error) {
	var list []Batch
	more := false
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := append([]byte(tenant), 0)
		c := tx.Bucket(bByTenant).Cursor()
		var k, v []byte
		if after != "" {
			b, ok := loadBatch(tx, after)
			if !ok || b.Tenant != tenant {
				return ErrNotFound
			}
			c.Seek(tenantKey(tenant, b.Seq))
			k, v = c.Prev()
		} else {
			// The last key with the prefix: seek past it, step back.
			if k, _ = c.Seek(tenantKey(tenant, ^uint64(0))); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
			if len(list) == limit {
				more = true
				break
			}
			b, ok := loadBatch(tx, string(v))
			if !ok {
				continue
			}
			list = append(list, b.Batch)
		}
		return nil
	})
	return list, more, err
}

// Cancel cancels the tenant's batch.
func (s *Bolt) Cancel(_ context.Context, tenant, id string, now time.Time) (Batch, error) {
	var out Batch
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, ok := loadBatch(tx, id)
		if !ok || b.Tenant != tenant {
			return ErrNotFound
		}
		if b.Status == StatusCancelling {
			out = b.Batch
			return nil
		}
		if b.Status != StatusInProgress && b.Status != StatusValidating {
			return fmt.Errorf("%w: batch %s is %s", ErrConflict, id, b.Status)
		}
		b.Status, b.CancellingAt = StatusCancelling, now
		queue, items := tx.Bucket(bQueue), tx.Bucket(bItems)
		prefix := seqKey(b.Seq)
		var keys [][]byte
		c := queue.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			var it boltItem
			getJSON(items, k, &it)
			index := int(binary.BigEndian.Uint32(k[8:]))
			line := ErrorLine(id, index, it.Req.CustomID, "batch_cancelled", "the batch was cancelled before this request ran")
			if err := s.result(tx, &b, k, Result{Kind: Cancelled, Line: line}); err != nil {
				return err
			}
		}
		if err := s.maybeFinish(tx, &b, now); err != nil {
			return err
		}
		out = b.Batch
		return putJSON(tx.Bucket(bBatches), []byte(id), b)
	})
	return out, err
}

// result writes an item's result (which it must not have yet), takes it
// off the queue and out of flight, and counts it in b (which the caller
// saves).
func (s *Bolt) result(tx *bolt.Tx, b *boltBatch, k []byte, r Result) error {
	if err := tx.Bucket(bResults).Put(k, append([]byte{byte(r.Kind)}, r.Line...)); err != nil {
		return err
	}
	var it boltItem
	if getJSON(tx.Bucket(bItems), k, &it) {
		b.Bytes -= int64(len(it.Req.Body))
	}
	if err := tx.Bucket(bQueue).Delete(k); err != nil {
		return err
	}
	if err := tx.Bucket(bInFlight).Delete(k); err != nil {
		return err
	}
	b.Done++
	b.Usage.Add(r.Usage)
	switch r.Kind {
	case Succeeded:
		b.Counts.Completed++
	case Failed:
		b.Counts.Failed++
	case Expired:
		b.Counts.Failed++
		b.Expired++
	case Cancelled:
		b.Cancelled++
	}
	return nil
}

// maybeFinish makes b finalizing when every item has a result (a
// cancelling batch stays cancelling): Finalize then writes its files. It
// stays in bActive until then, so Pending finds it after a crash.
func (s *Bolt) maybeFinish(_ *bolt.Tx, b *boltBatch, now time.Time) error {
	if b.Done < b.Counts.Total {
		return nil
	}
	b.FinalizingAt = now
	if b.Status == StatusInProgress {
		b.Status = StatusFinalizing
	}
	return nil
}

// Finalize writes the output and error files from the results, in line
// order, about a chunk a transaction, as staged content (a crash midway
// leaves staging that the next OpenBolt drops, and Finalize is taken
// again); then, in one last transaction, makes them files, sets the final
// status, and deletes the batch's items and results, which its files now
// hold. No transaction holds more than a chunk of the files.
func (s *Bolt) Finalize(_ context.Context, tenant, id string, now time.Time) (Batch, error) {
	var b boltBatch
	if err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		b, err = ready(tx, tenant, id)
		return err
	}); err != nil {
		return Batch{}, err
	}
	var expires time.Time
	if b.OutputExpiresAfter > 0 {
		expires = now.Add(b.OutputExpiresAfter)
	}
	files := [2]*output{{id: OutputFileID(b.ID), name: "batch_" + b.ID + "_output.jsonl"}, {id: ErrorFileID(b.ID), name: "batch_" + b.ID + "_error.jsonl"}}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, f := range files {
			if err := dropStaged(tx, f.id); err != nil { // an attempt cut short
				return err
			}
			if err := tx.Bucket(bStaging).Put([]byte(f.id), binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))); err != nil {
				return err
			}
		}
		return nil
	})
	prefix := seqKey(b.Seq)
	var after []byte // the last result written
	for done := false; err == nil && !done; {
		err = s.db.Update(func(tx *bolt.Tx) error {
			c := tx.Bucket(bResults).Cursor()
			k, v := c.Seek(prefix)
			if after != nil {
				if k, v = c.Seek(after); bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			moved := 0
			for ; k != nil && bytes.HasPrefix(k, prefix) && moved < ChunkBytes; k, v = c.Next() {
				f := files[1]
				if Kind(v[0]) == Succeeded {
					f = files[0]
				}
				f.buf = append(append(f.buf, v[1:]...), '\n')
				f.size += int64(len(v))
				moved += len(v)
				after = bytes.Clone(k)
			}
			done = k == nil || !bytes.HasPrefix(k, prefix)
			for _, f := range files {
				if len(f.buf) == 0 {
					continue
				}
				next, err := putPieces(tx.Bucket(bContent), f.id, f.pieces, f.buf)
				if err != nil {
					return err
				}
				f.pieces, f.buf = next, nil // the transaction holds it until it commits
			}
			return nil
		})
	}
	var out Batch
	if err == nil {
		err = s.db.Update(func(tx *bolt.Tx) error {
			b, err := ready(tx, tenant, id)
			if err != nil {
				return err
			}
			for _, f := range files {
				if f.size == 0 {
					if err := dropStaged(tx, f.id); err != nil {
						return err
					}
					continue
				}
				file := File{ID: f.id, Tenant: b.Tenant, Purpose: "batch_output", Filename: f.name, Bytes: f.size, CreatedAt: now, ExpiresAt: expires}
				if err := addFile(tx, file); err != nil {
					return err
				}
				if err := tx.Bucket(bStaging).Delete([]byte(f.id)); err != nil {
					return err
				}
				if f == files[0] {
					b.OutputFileID = f.id
				} else {
					b.ErrorFileID = f.id
				}
			}
			switch {
			case b.Status == StatusCancelling:
				b.Status, b.CancelledAt = StatusCancelled, now
			case b.Expired > 0:
				// An item expired: the window passed before the batch could end.
				b.Status = StatusExpired
				if b.ExpiredAt.IsZero() {
					b.ExpiredAt = now
				}
			default:
				b.Status, b.CompletedAt = StatusCompleted, now
			}
			if err := tx.Bucket(bActive).Delete(seqKey(b.Seq)); err != nil {
				return err
			}
			// Its items and results are in its files now: nothing reads
			// them again.
			if err := deletePrefix(tx.Bucket(bItems), seqKey(b.Seq)); err != nil {
				return err
			}
			if err := deletePrefix(tx.Bucket(bResults), seqKey(b.Seq)); err != nil {
				return err
			}
			if err := ended(tx, id, now); err != nil {
				return err
			}
			out = b.Batch
			return putJSON(tx.Bucket(bBatches), []byte(id), b)
		})
	}
	if err != nil {
		_ = s.db.Update(func(tx *bolt.Tx) error {
			for _, f := range files {
				if tx.Bucket(bStaging).Get([]byte(f.id)) != nil {
					_ = dropStaged(tx, f.id)
				}
			}
			return nil
		})
	}
	return out, err
}

// output is a file Finalize writes.
type output struct {
	id, name string
	buf      []byte
	pieces   int
	size     int64
}

// ready loads the tenant's batch for Finalize.
func ready(tx *bolt.Tx, tenant, id string) (boltBatch, error) {
	b, ok := loadBatch(tx, id)
	switch {
	case !ok || b.Tenant != tenant:
		return b, ErrNotFound
	case !b.ready():
		return b, fmt.Errorf("%w: batch %s is %s with %d of %d items ended", ErrConflict, id, b.Status, b.Done, b.Counts.Total)
	}
	return b, nil
}

// fairPick takes up to n queued items, the tenants taking turns (in name
// order, from the one after the tenant served last), each tenant's oldest
// batch first, in line order: one tenant's large batch does not hold the
// others' back.
func (s *Bolt) fairPick(tx *bolt.Tx, n int) [][]byte {
	if n <= 0 {
		return nil
	}
	queue := tx.Bucket(bQueue)
	perTenant := map[string][][]byte{} // up to n queued keys per tenant, in order
	_ = tx.Bucket(bActive).ForEach(func(k, v []byte) error {
		b, ok := loadBatch(tx, string(v))
		if !ok || b.Status != StatusInProgress || len(perTenant[b.Tenant]) >= n {
			return nil
		}
		c := queue.Cursor()
		for qk, _ := c.Seek(k); qk != nil && bytes.HasPrefix(qk, k) && len(perTenant[b.Tenant]) < n; qk, _ = c.Next() {
			perTenant[b.Tenant] = append(perTenant[b.Tenant], bytes.Clone(qk))
		}
		return nil
	})
	tenants := make([]string, 0, len(perTenant))
	for t := range perTenant {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	start, _ := slices.BinarySearch(tenants, s.lastTenant+"\x00") // the first after lastTenant
	var out [][]byte
	for len(out) < n {
		took := false
		for i := range tenants {
			t := tenants[(start+i)%len(tenants)]
			if len(out) == n || len(perTenant[t]) == 0 {
				continue
			}
			out = append(out, perTenant[t][0])
			perTenant[t] = perTenant[t][1:]
			s.lastTenant, took = t, true
		}
		if !took {
			break
		}
	}
	return out
}

// lapsed says whether an item's lease has lapsed.
func lapsed(v []byte, now time.Time) bool {
	var l boltLease
	return json.Unmarshal(v, &l) == nil && !l.Until.After(now)
}

// Claim hands out items: lapsed leases first, then the queue. With nothing
// to hand out it only reads: an idle executor polling it costs no write.
func (s *Bolt) Claim(_ context.Context, now time.Time, owner string, lease time.Duration, max int) ([]Claim, error) {
	if max <= 0 {
		return nil, nil
	}
	work := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bQueue).Cursor().First(); k != nil {
			work = true
			return nil
		}
		return tx.Bucket(bInFlight).ForEach(func(_, v []byte) error {
			work = work || lapsed(v, now)
			return nil
		})
	})
	if !work {
		return nil, nil
	}
	var out []Claim
	err := s.db.Update(func(tx *bolt.Tx) error {
		out = nil
		inflight, queue, items := tx.Bucket(bInFlight), tx.Bucket(bQueue), tx.Bucket(bItems)
		batches := map[string]boltBatch{}
		var picked [][]byte
		c := inflight.Cursor()
		for k, v := c.First(); k != nil && len(picked) < max; k, v = c.Next() {
			if lapsed(v, now) {
				picked = append(picked, bytes.Clone(k))
			}
		}
		picked = append(picked, s.fairPick(tx, max-len(picked))...)
		for _, k := range picked {
			var it boltItem
			if !getJSON(items, k, &it) {
				return fmt.Errorf("batch: item %x has no record", k)
			}
			b, ok := batches[it.Batch]
			if !ok {
				if b, ok = loadBatch(tx, it.Batch); !ok {
					return fmt.Errorf("batch: item %x names a missing batch %s", k, it.Batch)
				}
				batches[it.Batch] = b
			}
			if err := queue.Delete(k); err != nil {
				return err
			}
			if err := putJSON(inflight, k, boltLease{Owner: owner, Until: now.Add(lease)}); err != nil {
				return err
			}
			out = append(out, Claim{Batch: it.Batch, Tenant: b.Tenant, Index: int(binary.BigEndian.Uint32(k[8:])),
				Request: it.Req, Deadline: b.ExpiresAt, Attempts: it.Attempts, Owner: owner})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimed finds the claim's item key and checks that c.Owner holds it.
func claimed(tx *bolt.Tx, c Claim) ([]byte, boltBatch, bool) {
	b, ok := loadBatch(tx, c.Batch)
	if !ok {
		return nil, b, false
	}
	k := itemKey(b.Seq, c.Index)
	var l boltLease
	if !getJSON(tx.Bucket(bInFlight), k, &l) || l.Owner != c.Owner {
		return k, b, false
	}
	return k, b, true
}

// Release puts a claimed item back in the queue.
func (s *Bolt) Release(_ context.Context, c Claim, attempted bool, now time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		k, b, ok := claimed(tx, c)
		if !ok {
			return nil
		}
		if b.Status != StatusInProgress {
			// Cancelled while it ran: it does not go back to the queue.
			line := ErrorLine(b.ID, c.Index, c.Request.CustomID, "batch_cancelled", "the batch was cancelled before this request ran")
			if err := s.result(tx, &b, k, Result{Kind: Cancelled, Line: line}); err != nil {
				return err
			}
			if err := s.maybeFinish(tx, &b, now); err != nil {
				return err
			}
			return putJSON(tx.Bucket(bBatches), []byte(b.ID), b)
		}
		if attempted {
			var it boltItem
			getJSON(tx.Bucket(bItems), k, &it)
			it.Attempts++
			if err := putJSON(tx.Bucket(bItems), k, it); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bInFlight).Delete(k); err != nil {
			return err
		}
		return tx.Bucket(bQueue).Put(k, nil)
	})
}

// Complete writes the item's result once. Concurrent calls share one
// commit (and one fsync).
func (s *Bolt) Complete(_ context.Context, c Claim, r Result, now time.Time) (bool, error) {
	if r.Kind < Succeeded || r.Kind > Cancelled || len(r.Line) == 0 {
		return false, fmt.Errorf("batch: Complete: result kind %d with %d bytes of line", r.Kind, len(r.Line))
	}
	var written bool
	err := s.db.Batch(func(tx *bolt.Tx) error {
		written = false
		b, ok := loadBatch(tx, c.Batch)
		if !ok {
			return ErrNotFound
		}
		if b.Status.Terminal() {
			return nil // ended: its items are in its files, and gone
		}
		k := itemKey(b.Seq, c.Index)
		if tx.Bucket(bItems).Get(k) == nil {
			return ErrNotFound
		}
		if tx.Bucket(bResults).Get(k) != nil {
			return nil
		}
		if err := s.result(tx, &b, k, r); err != nil {
			return err
		}
		if err := s.maybeFinish(tx, &b, now); err != nil {
			return err
		}
		written = true
		return putJSON(tx.Bucket(bBatches), []byte(b.ID), b)
	})
	return written, err
}

// ExpireDue expires the items of the batches whose window has passed.
// With none due it only reads.
func (s *Bolt) ExpireDue(_ context.Context, now time.Time) (int, error) {
	due := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bActive).ForEach(func(_, v []byte) error {
			if b, ok := loadBatch(tx, string(v)); ok && b.expiresAt(now) {
				due = true
			}
			return nil
		})
	})
	if !due {
		return 0, nil
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		n = 0
		var due []boltBatch
		_ = tx.Bucket(bActive).ForEach(func(_, v []byte) error {
			if b, ok := loadBatch(tx, string(v)); ok && b.expiresAt(now) {
				due = append(due, b)
			}
			return nil
		})
		items, results := tx.Bucket(bItems), tx.Bucket(bResults)
		for _, b := range due {
			b.ExpiredAt = now
			for i := range b.Counts.Total {
				k := itemKey(b.Seq, i)
				if results.Get(k) != nil {
					continue
				}
				var it boltItem
				getJSON(items, k, &it)
				line := ErrorLine(b.ID, i, it.Req.CustomID, "batch_expired", "this request could not be executed before the completion window expired")
				if err := s.result(tx, &b, k, Result{Kind: Expired, Line: line}); err != nil {
					return err
				}
				n++
			}
			if err := s.maybeFinish(tx, &b, now); err != nil {
				return err
			}
			if err := putJSON(tx.Bucket(bBatches), []byte(b.ID), b); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// expiresAt says whether b has items without a result past its window at
// now.
func (b *boltBatch) expiresAt(now time.Time) bool {
	return (b.Status == StatusInProgress || b.Status == StatusCancelling) && b.Done < b.Counts.Total && !b.ExpiresAt.After(now)
}

// Backlog counts the items without a result and their bytes, from the
// unfinished batches' records.
func (s *Bolt) Backlog(_ context.Context, tenant string) (int, int64, error) {
	n, size := 0, int64(0)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bActive).ForEach(func(_, v []byte) error {
			switch b, ok := loadBatch(tx, string(v)); {
			case !ok || tenant != "" && b.Tenant != tenant:
			case b.Status == StatusValidating:
				n += b.Lines
				size += b.LineBytes
			default:
				n += b.Counts.Total - b.Done
				size += b.Bytes
			}
			return nil
		})
	})
	return n, size, err
}
