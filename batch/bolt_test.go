package batch_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/batch/batchtest"
)

func openBolt(t *testing.T, path string) *batch.Bolt {
	t.Helper()
	s, err := batch.OpenBolt(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBoltConformance(t *testing.T) {
	batchtest.Run(t, func(t *testing.T) batch.JobStore {
		s := openBolt(t, filepath.Join(t.TempDir(), "jobs.db"))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// A reopened file has what was written, and the items the previous
// process had claimed are queued again: it died running them.
func TestBoltReopenRequeuesClaims(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "jobs.db")
	s := openBolt(t, path)
	now := time.Now()
	reqs, _ := batch.ParseInput([]byte(`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}
{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"input":"y"}}
`), 10)
	if err := s.CreateBatch(ctx, batch.Batch{ID: "b1", Tenant: "t", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}, reqs); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, now, "dead", time.Hour, 2)
	if err != nil || len(cs) != 2 {
		t.Fatalf("Claim = %v, %v", cs, err)
	}
	if ok, err := s.Complete(ctx, cs[0], batch.Result{Kind: batch.Succeeded, Line: batch.Line(cs[0], 200, "", []byte(`{}`))}, now); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := batch.OpenBolt(path, 50*time.Millisecond); !errors.Is(err, batch.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a second open of a locked file: %v, want in use", err)
	}
	s.Close()

	s = openBolt(t, path)
	defer s.Close()
	again, err := s.Claim(ctx, now, "new", time.Hour, 2)
	if err != nil || len(again) != 1 || again[0].Request.CustomID != "b" {
		t.Fatalf("after reopening, claimed %+v, %v; want only b", again, err)
	}
}
