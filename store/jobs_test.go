package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"testing"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/batch/batchtest"
	"github.com/sluicehq/sluice/store/redistest"
)

// TestJobsConformance runs the job stores' suite against a real
// redis-server: the Redis store keeps the Bolt store's promises.
func TestJobsConformance(t *testing.T) {
	srv := redistest.Start(t)
	batchtest.Run(t, func(t *testing.T) batch.JobStore {
		return NewJobs(newRedis(t, srv, clusterName(t), Options{}), JobsOptions{})
	})
}

// TestJobsLargeBatchLeavesNothingUnbounded: a batch over several chunks
// and a file over several MiB go through whole; once the batch has
// expired, every key left has a TTL, but for the store's sequences, turn
// and the indexes Purge reads (an entry a live file or retained batch) — its queues, leases and deadlines are gone, its stream deleted.
func TestJobsLargeBatchLeavesNothingUnbounded(t *testing.T) {
	srv := redistest.Start(t)
	r := newRedis(t, srv, clusterName(t), Options{})
	j := NewJobs(r, JobsOptions{Retention: time.Hour})
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16+5)
	if err := batch.PutFile(ctx, j, batch.File{ID: "f1", Tenant: "a", Purpose: "batch", CreatedAt: time.Now()}, big); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(j, "a", "f1"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("FileContent: %d bytes, %v; want %d", len(got), err, len(big))
	}
	const n = 3*ChunkItems + 7
	reqs := make([]batch.Request, n)
	for i := range reqs {
		reqs[i] = batch.Request{CustomID: fmt.Sprintf("r%d", i), Method: "POST", URL: "/v1/embeddings", Body: []byte(`{"model":"m"}`)}
	}
	now := time.Now()
	if err := j.CreateBatch(ctx, batch.Batch{ID: "b1", Tenant: "a", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}, reqs); err != nil {
		t.Fatal(err)
	}
	cs, err := j.Claim(ctx, now, "w", time.Hour, 5)
	if err != nil || len(cs) != 5 {
		t.Fatalf("Claim = %d, %v", len(cs), err)
	}
	for _, c := range cs[:3] {
		if ok, err := j.Complete(ctx, c, batch.Result{Kind: batch.Succeeded, Line: batch.Line(c, 200, "", []byte(`{}`))}, now); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if err := j.Release(ctx, cs[3], true, now); err != nil {
		t.Fatal(err)
	}
	if k, err := j.ExpireDue(ctx, now.Add(time.Minute)); k != n-3 || err != nil {
		t.Fatalf("ExpireDue = %d, %v; want %d", k, err, n-3)
	}
	b, err := j.Finalize(ctx, "a", "b1", now.Add(time.Minute))
	if err != nil || b.Status != batch.StatusExpired || b.Counts != (batch.Counts{Total: n, Completed: 3, Failed: n - 3}) {
		t.Fatalf("%+v, %v", b, err)
	}
	errs, err := readAll(j, "a", b.ErrorFileID)
	if err != nil || bytes.Count(errs, []byte("\n")) != n-3 || !bytes.Contains(errs, []byte(`"custom_id":"r3","response":null,"error":{"code":"batch_expired"`)) {
		t.Fatalf("error file: %d lines, %v", bytes.Count(errs, []byte("\n")), err)
	}
	var keys []string
	_ = r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		keys, err = c.Keys(ctx, r.Key("batch")+":*").Result()
		return err
	})
	for _, k := range keys {
		var ttl time.Duration
		_ = r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			ttl, err = c.TTL(ctx, k).Result()
			return err
		})
		if ttl <= 0 && !strings.HasSuffix(k, ":seq") && !strings.HasSuffix(k, ":last") && !strings.HasSuffix(k, ":fseq") && !strings.HasSuffix(k, ":fexp") && !strings.HasSuffix(k, ":ended") {
			t.Errorf("key %s has no TTL (%v)", k, ttl)
		}
	}
	for _, k := range keys {
		for _, gone := range []string{":leases", ":deadlines", ":active", ":tenants", ":pending", ":s:b1", ":q:a", ":a:b1"} {
			if strings.HasSuffix(k, gone) {
				t.Errorf("key %s left after the batch ended", k)
			}
		}
	}
}

func readAll(j *Jobs, tenant, id string) ([]byte, error) {
	rc, err := j.FileContent(context.Background(), tenant, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestJobsReadsWholeFiles: a file written before files were chunk keys —
// its content one string — still reads whole.
func TestJobsReadsWholeFiles(t *testing.T) {
	srv := redistest.Start(t)
	r := newRedis(t, srv, clusterName(t), Options{})
	j := NewJobs(r, JobsOptions{})
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789"), (fileChunk*3+5)/10)
	err := r.Do(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		if err := c.HSet(ctx, j.key("f", "f-old"), "tenant", "a", "purpose", "batch", "bytes", len(big), "created_at", time.Now().Format(time.RFC3339Nano)).Err(); err != nil {
			return err
		}
		return c.Set(ctx, j.key("c", "f-old"), big, time.Hour).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(j, "a", "f-old"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("content: %d bytes, %v; want %d", len(got), err, len(big))
	}
}
