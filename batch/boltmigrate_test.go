package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A store written before files were pieces — each file's content whole in
// the content bucket, its record without a listing — opens with its files
// whole, listed and counted, and its ended batches due for Purge.
func TestBoltMigratesWholeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batch.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789"), (2*ChunkBytes+777)/10)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	err = db.Update(func(tx *bolt.Tx) error {
		files, _ := tx.CreateBucket(bFiles)
		content, _ := tx.CreateBucket(bLegacyContent)
		batches, _ := tx.CreateBucket(bBatches)
		rec, _ := json.Marshal(File{ID: "file-old", Tenant: "a", Purpose: "batch", Filename: "old.jsonl", Bytes: int64(len(big)), CreatedAt: t0})
		files.Put([]byte("file-old"), rec)
		content.Put([]byte("file-old"), big)
		b, _ := json.Marshal(boltBatch{Batch: Batch{ID: "b-old", Tenant: "a", Status: StatusCompleted, CreatedAt: t0, CompletedAt: t0}, Seq: 1})
		return batches.Put([]byte("b-old"), b)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenBolt(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	rc, err := s.FileContent(ctx, "a", "file-old")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("content after the migration: %d bytes, %v; want %d", len(got), err, len(big))
	}
	if list, _, _ := s.Files(ctx, "a", "", "", 10, false); len(list) != 1 || list[0].ID != "file-old" {
		t.Fatalf("listed %+v", list)
	}
	if n, size, _ := s.FileUsage(ctx, "a"); n != 1 || size != int64(len(big)) {
		t.Fatalf("usage %d, %d", n, size)
	}
	if n, err := s.Purge(ctx, t0.Add(48*time.Hour), 24*time.Hour); n != 1 || err != nil {
		t.Fatalf("Purge of the old ended batch: %d, %v", n, err)
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bLegacyContent) != nil {
			t.Error("the old content bucket is left")
		}
		return nil
	})
}
