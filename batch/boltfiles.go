package batch

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The files of the Bolt store: a record in bFiles, the content as pieces of
// up to pieceBytes under the id in bContent, a key in the tenant's
// listing, and in bExpiry when it expires. An upload is written a chunk
// (ChunkBytes) a transaction while it is read (StageFile), marked in
// bStaging until CommitFile adds the record; it is read back a chunk a
// transaction.
//
// Why pieces of a page rather than values of a chunk: bbolt keeps up to
// four values in a leaf before it splits one, and rewrites the leaf a key
// is added to, reading its old values through its memory map. With 1 MiB
// values each chunk appended rewrote the chunks before it in its leaf
// (two to four times the bytes written) and mapped them into the process
// (its RSS grew by the file's size as it was written: 192 MB for two
// 100 MB uploads, against 35 MB of heap). Pieces that fill a page, added
// in key order with the bucket's fill at 100%, make each chunk new pages
// and rewrite only the last leaf (a few KiB) of the one before; their
// headers and keys cost about 1% on disk.

// pieceBytes is the size of a piece: two, with their keys and headers,
// fill a leaf of two 4 KiB pages.
const pieceBytes = 4000

// piecesPerChunk is the pieces a reader's chunk reads: about ChunkBytes.
const piecesPerChunk = ChunkBytes / pieceBytes

type boltFile struct {
	File
	Seq uint64 `json:"seq"`
}

// stagingTTL is how long staged content may wait for CommitFile before
// Purge drops it: longer than any upload takes to be read.
const stagingTTL = time.Hour

func chunkKey(id string, i int) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(id), 0), uint32(i))
}

// putPieces writes data as id's pieces from index first on, and returns
// the next index. The bucket is filled to 100%: pieces come in key order.
// The transaction keeps data until it commits.
func putPieces(b *bolt.Bucket, id string, first int, data []byte) (int, error) {
	b.FillPercent = 1.0
	for len(data) > 0 {
		n := min(len(data), pieceBytes)
		if err := b.Put(chunkKey(id, first), data[:n]); err != nil {
			return first, err
		}
		data, first = data[n:], first+1
	}
	return first, nil
}

func fileKey(tenant string, seq uint64) []byte { return tenantKey(tenant, seq) }

func loadFile(tx *bolt.Tx, id string) (boltFile, bool) {
	var f boltFile
	ok := getJSON(tx.Bucket(bFiles), []byte(id), &f)
	return f, ok
}

// usage reads a tenant's count and bytes of uploaded files.
func usage(tx *bolt.Tx, tenant string) (int64, int64) {
	v := tx.Bucket(bUsage).Get([]byte(tenant))
	if len(v) != 16 {
		return 0, 0
	}
	return int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
}

func addUsage(tx *bolt.Tx, tenant string, files, size int64) error {
	n, b := usage(tx, tenant)
	n, b = n+files, b+size
	if n <= 0 {
		return tx.Bucket(bUsage).Delete([]byte(tenant))
	}
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(n)), uint64(b))
	return tx.Bucket(bUsage).Put([]byte(tenant), v)
}

// addFile adds f's record, listing and expiry; its content is in place.
func addFile(tx *bolt.Tx, f File) error {
	files := tx.Bucket(bFiles)
	if files.Get([]byte(f.ID)) != nil {
		return fmt.Errorf("%w: file %s exists", ErrConflict, f.ID)
	}
	seq, err := files.NextSequence()
	if err != nil {
		return err
	}
	if err := putJSON(files, []byte(f.ID), boltFile{File: f, Seq: seq}); err != nil {
		return err
	}
	if err := tx.Bucket(bFileList).Put(fileKey(f.Tenant, seq), []byte(f.ID)); err != nil {
		return err
	}
	if !f.ExpiresAt.IsZero() {
		if err := tx.Bucket(bExpiry).Put(timeKey(f.ExpiresAt, f.ID), nil); err != nil {
			return err
		}
	}
	if f.Purpose == "batch" {
		return addUsage(tx, f.Tenant, 1, f.Bytes)
	}
	return nil
}

// removeFile deletes the file f and its content.
func removeFile(tx *bolt.Tx, f boltFile) error {
	if err := deletePrefix(tx.Bucket(bContent), append([]byte(f.ID), 0)); err != nil {
		return err
	}
	if err := tx.Bucket(bFileList).Delete(fileKey(f.Tenant, f.Seq)); err != nil {
		return err
	}
	if !f.ExpiresAt.IsZero() {
		if err := tx.Bucket(bExpiry).Delete(timeKey(f.ExpiresAt, f.ID)); err != nil {
			return err
		}
	}
	if f.Purpose == "batch" {
		if err := addUsage(tx, f.Tenant, -1, -f.Bytes); err != nil {
			return err
		}
	}
	return tx.Bucket(bFiles).Delete([]byte(f.ID))
}

// dropStaged deletes staged content.
func dropStaged(tx *bolt.Tx, id string) error {
	if err := deletePrefix(tx.Bucket(bContent), append([]byte(id), 0)); err != nil {
		return err
	}
	return tx.Bucket(bStaging).Delete([]byte(id))
}

// StageFile writes content as id's chunks, a transaction each.
func (s *Bolt) StageFile(ctx context.Context, id string, content io.Reader) (int64, error) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bFiles).Get([]byte(id)) != nil || tx.Bucket(bStaging).Get([]byte(id)) != nil {
			return fmt.Errorf("%w: file %s exists", ErrConflict, id)
		}
		return tx.Bucket(bStaging).Put([]byte(id), binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())))
	})
	if err != nil {
		return 0, err
	}
	// The buffer grows from 64 KiB to a chunk as the content proves that
	// long: a small file costs no chunk of memory to clear.
	buf := make([]byte, 64<<10)
	var size int64
	piece := 0
	for {
		if size > 0 && len(buf) < ChunkBytes {
			buf = make([]byte, min(2*len(buf), ChunkBytes))
		}
		n, rerr := Fill(content, buf)
		if rerr == nil {
			rerr = ctx.Err()
		}
		if n > 0 && rerr == nil {
			// The transaction keeps buf only until it commits, which
			// Update waits for: the buffer is reused.
			err = s.db.Update(func(tx *bolt.Tx) error {
				if tx.Bucket(bStaging).Get([]byte(id)) == nil {
					return fmt.Errorf("batch: staging of %s was dropped", id)
				}
				next, err := putPieces(tx.Bucket(bContent), id, piece, buf[:n])
				piece = next
				return err
			})
			size += int64(n)
		}
		if rerr != nil || err != nil {
			_ = s.AbortFile(context.WithoutCancel(ctx), id)
			return size, firstErr(rerr, err)
		}
		if n < len(buf) {
			return size, nil
		}
	}
}

// firstErr is the first error that is not nil.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// CommitFile makes staged content a file.
func (s *Bolt) CommitFile(_ context.Context, f File, q Quota) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bStaging).Get([]byte(f.ID)) == nil {
			return fmt.Errorf("batch: no content staged for %s", f.ID)
		}
		if f.Purpose == "batch" {
			n, size := usage(tx, f.Tenant)
			switch {
			case q.MaxFiles > 0 && n >= int64(q.MaxFiles):
				return &QuotaError{Used: n, Max: int64(q.MaxFiles)}
			case q.MaxBytes > 0 && size+f.Bytes > q.MaxBytes:
				return &QuotaError{Bytes: true, Used: size, Max: q.MaxBytes}
			}
		}
		if err := addFile(tx, f); err != nil {
			return err
		}
		return tx.Bucket(bStaging).Delete([]byte(f.ID))
	})
}

// AbortFile drops staged content.
func (s *Bolt) AbortFile(_ context.Context, id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bStaging).Get([]byte(id)) == nil {
			return nil // committed, or dropped already
		}
		return dropStaged(tx, id)
	})
}

// File returns the tenant's file.
func (s *Bolt) File(_ context.Context, tenant, id string) (File, error) {
	var f boltFile
	err := s.db.View(func(tx *bolt.Tx) error {
		var ok bool
		if f, ok = loadFile(tx, id); !ok || f.Tenant != tenant {
			return ErrNotFound
		}
		return nil
	})
	return f.File, err
}

// FileContent reads the tenant's file a chunk at a time, a read
// transaction each (a long read does not hold one open).
func (s *Bolt) FileContent(ctx context.Context, tenant, id string) (io.ReadCloser, error) {
	if _, err := s.File(ctx, tenant, id); err != nil {
		return nil, err
	}
	return NewChunkReader(func(i int) ([]byte, error) {
		var out []byte
		err := s.db.View(func(tx *bolt.Tx) error {
			if f, ok := loadFile(tx, id); !ok || f.Tenant != tenant {
				return ErrNotFound
			}
			prefix := append([]byte(id), 0)
			c := tx.Bucket(bContent).Cursor()
			n := 0
			for k, v := c.Seek(chunkKey(id, i*piecesPerChunk)); k != nil && bytes.HasPrefix(k, prefix) && n < piecesPerChunk; k, v = c.Next() {
				out = append(out, v...)
				n++
			}
			return nil
		})
		return out, err
	}), nil
}

// Files lists the tenant's files.
func (s *Bolt) Files(_ context.Context, tenant, purpose, after string, limit int, asc bool) ([]File, bool, error) {
	var list []File
	more := false
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := append([]byte(tenant), 0)
		c := tx.Bucket(bFileList).Cursor()
		step := c.Prev
		if asc {
			step = c.Next
		}
		var k, v []byte
		switch {
		case after != "":
			f, ok := loadFile(tx, after)
			if !ok || f.Tenant != tenant {
				return ErrNotFound
			}
			c.Seek(fileKey(tenant, f.Seq))
			k, v = step()
		case asc:
			k, v = c.Seek(prefix)
		default:
			// The last key with the prefix: seek past it, step back.
			if k, _ = c.Seek(fileKey(tenant, ^uint64(0))); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = step() {
			f, ok := loadFile(tx, string(v))
			if !ok || purpose != "" && f.Purpose != purpose {
				continue
			}
			if len(list) == limit {
				more = true
				break
			}
			list = append(list, f.File)
		}
		return nil
	})
	return list, more, err
}

// DeleteFile deletes the tenant's file.
func (s *Bolt) DeleteFile(_ context.Context, tenant, id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		f, ok := loadFile(tx, id)
		if !ok || f.Tenant != tenant {
			return ErrNotFound
		}
		return removeFile(tx, f)
	})
}

// FileUsage reads the tenant's count and bytes of uploads.
func (s *Bolt) FileUsage(_ context.Context, tenant string) (int, int64, error) {
	var n, size int64
	err := s.db.View(func(tx *bolt.Tx) error {
		n, size = usage(tx, tenant)
		return nil
	})
	return int(n), size, err
}

// purgeChunk bounds what one transaction of Purge deletes, so that it
// holds the write lock briefly.
const purgeChunk = 64

// Purge deletes the expired files, the batches past their retention and
// abandoned staging, purgeChunk at a time. With nothing due it only reads.
func (s *Bolt) Purge(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	total := 0
	for {
		var files, batches [][]byte
		var staged []string
		_ = s.db.View(func(tx *bolt.Tx) error {
			files = dueKeys(tx.Bucket(bExpiry), now)
			if retention > 0 {
				batches = dueKeys(tx.Bucket(bEnded), now.Add(-retention))
			}
			_ = tx.Bucket(bStaging).ForEach(func(k, v []byte) error {
				if len(staged) < purgeChunk && len(v) == 8 && now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(v)))) > stagingTTL {
					staged = append(staged, string(k))
				}
				return nil
			})
			return nil
		})
		if len(files)+len(batches)+len(staged) == 0 {
			return total, nil
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, k := range files {
				if f, ok := loadFile(tx, string(k[8:])); ok {
					if err := removeFile(tx, f); err != nil {
						return err
					}
					total++
				}
				if err := tx.Bucket(bExpiry).Delete(k); err != nil {
					return err
				}
			}
			for _, k := range batches {
				if err := s.purgeBatch(tx, string(k[8:])); err != nil {
					return err
				}
				if err := tx.Bucket(bEnded).Delete(k); err != nil {
					return err
				}
				total++
			}
			for _, id := range staged {
				if err := dropStaged(tx, id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || ctx.Err() != nil {
			return total, firstErr(err, ctx.Err())
		}
	}
}

// dueKeys returns up to purgeChunk keys of a time-keyed bucket at or
// before at.
func dueKeys(b *bolt.Bucket, at time.Time) [][]byte {
	var out [][]byte
	limit := uint64(max(at.UnixNano(), 0))
	c := b.Cursor()
	for k, _ := c.First(); k != nil && len(out) < purgeChunk && binary.BigEndian.Uint64(k) <= limit; k, _ = c.Next() {
		out = append(out, bytes.Clone(k))
	}
	return out
}

// purgeBatch deletes the ended batch id, its items and results, and its
// output and error files.
func (s *Bolt) purgeBatch(tx *bolt.Tx, id string) error {
	b, ok := loadBatch(tx, id)
	if !ok {
		return nil
	}
	for _, bucket := range [][]byte{bItems, bResults, bQueue, bInFlight} {
		if err := deletePrefix(tx.Bucket(bucket), seqKey(b.Seq)); err != nil {
			return err
		}
	}
	for _, fid := range []string{OutputFileID(id), ErrorFileID(id)} {
		if f, ok := loadFile(tx, fid); ok {
			if err := removeFile(tx, f); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bByTenant).Delete(tenantKey(b.Tenant, b.Seq)); err != nil {
		return err
	}
	if err := tx.Bucket(bActive).Delete(seqKey(b.Seq)); err != nil {
		return err
	}
	return tx.Bucket(bBatches).Delete([]byte(id))
}
