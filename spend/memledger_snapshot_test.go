package spend_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// TestMemoryLedgerSnapshot: a snapshot read into a new ledger gives back
// every bucket (and the hour sums built from them); anything that is not a
// snapshot is an error and adds nothing.
func TestMemoryLedgerSnapshot(t *testing.T) {
	ctx := context.Background()
	a := spend.NewMemoryLedger()
	entries := []spend.Entry{
		{Scope: spend.GlobalScope, At: t0, Amount: 7},
		{Scope: spend.GlobalScope, At: t0.Add(-23 * time.Hour), Amount: 5},
		{Scope: spend.TenantScope("x"), At: t0.Add(time.Minute), Amount: -2},
		{Scope: spend.TenantScope("x"), At: t0.Add(time.Minute), Amount: 3},
		{Scope: spend.ModelScope("m"), At: time.Unix(-30, 0), Amount: 9},
	}
	if err := a.Add(ctx, t0, entries); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := a.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	b := spend.NewMemoryLedger()
	if err := b.ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		scope       string
		first, last time.Time
		want        int64
	}{
		{spend.GlobalScope, t0.Add(-24 * time.Hour), t0, 12},
		{spend.TenantScope("x"), t0, t0.Add(time.Minute), 1},
		{spend.ModelScope("m"), time.Unix(-60, 0), time.Unix(0, 0), 9},
	} {
		if got, err := b.Sum(ctx, c.scope, c.first, c.last); err != nil || got != c.want {
			t.Errorf("restored %s: Sum = %d, %v; want %d", c.scope, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"", "not json", `{"format":"other/1","scopes":{}}`,
		`{"format":"sluice-spend-ledger/1","scopes":{"":[[1,2]]}}`,
		`{"format":"sluice-spend-ledger/1","scopes":{"global":[[1,2]]},"extra":1}`,
		`{"format":"sluice-spend-ledger/1","scopes":{}} {}`,
	} {
		l := spend.NewMemoryLedger()
		if err := l.ReadSnapshot(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadSnapshot(%q): no error", bad)
		}
	}
}
