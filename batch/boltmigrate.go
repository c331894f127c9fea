package batch

import (
	"bytes"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bLegacyContent is the bucket where stores written before files were
// pieces kept each file's content whole (id → bytes).
var bLegacyContent = []byte("content")

// migrate brings a store written by an older sluice to this layout: each
// file's content, kept whole, becomes pieces (a chunk a transaction, so
// that memory holds a chunk, not a file); files get their place in their
// tenant's listing, usage and expiry; ended batches their end, for Purge.
// A store already in this layout costs one read.
func (s *Bolt) migrate() error {
	var ids [][]byte
	_ = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bLegacyContent); b != nil {
			_ = b.ForEach(func(k, _ []byte) error { ids = append(ids, bytes.Clone(k)); return nil })
		}
		return nil
	})
	for _, id := range ids {
		piece := 0
		for off := 0; ; off += ChunkBytes {
			var chunk []byte
			_ = s.db.View(func(tx *bolt.Tx) error {
				v := tx.Bucket(bLegacyContent).Get(id)
				if off < len(v) {
					chunk = bytes.Clone(v[off:min(off+ChunkBytes, len(v))])
				}
				return nil
			})
			if chunk == nil {
				break
			}
			if err := s.db.Update(func(tx *bolt.Tx) error {
				next, err := putPieces(tx.Bucket(bContent), string(id), piece, chunk)
				piece = next
				return err
			}); err != nil {
				return err
			}
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			f, ok := loadFile(tx, string(id))
			if ok && f.Seq == 0 {
				if err := tx.Bucket(bFiles).Delete(id); err != nil {
					return err
				}
				if err := addFile(tx, f.File); err != nil {
					return err
				}
			}
			return tx.Bucket(bLegacyContent).Delete(id)
		})
		if err != nil {
			return err
		}
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bLegacyContent) != nil {
			if err := tx.DeleteBucket(bLegacyContent); err != nil {
				return err
			}
			// The batches that ended under the old layout: their end, for
			// Purge (the new layout records it as they end).
			return tx.Bucket(bBatches).ForEach(func(k, v []byte) error {
				b, ok := loadBatch(tx, string(k))
				if !ok || !b.Status.Terminal() {
					return nil
				}
				at := b.CompletedAt
				for _, t := range []time.Time{b.FailedAt, b.CancelledAt, b.ExpiredAt} {
					if at.IsZero() {
						at = t
					}
				}
				return ended(tx, b.ID, at)
			})
		}
		return nil
	})
}
