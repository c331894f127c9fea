package batch

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// An idle executor polls Claim and ExpireDue: with nothing to hand out or
// expire they must not write (each write is an fsync).
func TestBoltIdlePollsDoNotWrite(t *testing.T) {
	s, err := OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, now := context.Background(), time.Now()
	if err := s.CreateBatch(ctx, Batch{ID: "b", Tenant: "t", CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		[]Request{{CustomID: "a", Method: "POST", URL: "/v1/embeddings", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, now, "w", time.Hour, 1)
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	st := s.db.Stats()
	before := st.TxStats.GetWrite()
	for range 10 {
		if cs, err := s.Claim(ctx, now, "w", time.Hour, 5); err != nil || len(cs) != 0 {
			t.Fatal(cs, err)
		}
		if n, err := s.ExpireDue(ctx, now); err != nil || n != 0 {
			t.Fatal(n, err)
		}
	}
	st = s.db.Stats()
	if after := st.TxStats.GetWrite(); after != before {
		t.Fatalf("idle polls wrote %d times", after-before)
	}
}
