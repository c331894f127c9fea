package retrybudget

import (
	"strings"
	"testing"
	"time"
)

// TestReconfigureKeepsTheBalance: a new ratio, floor and cap apply from the
// reload on, the balance earned so far carries over (cut to a lower cap),
// and so do the counters; an invalid config changes nothing.
func TestReconfigureKeepsTheBalance(t *testing.T) {
	b, err := New(Config{Ratio: 0.5, MinPerSecond: 0.001, MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b.Deposit(t0)
	}
	if got := b.Balance(t0); got != 10 {
		t.Fatalf("balance %v, want 10", got)
	}
	if err := b.Reconfigure(t0, Config{Ratio: 0.25, MinPerSecond: 0.001, MaxTokens: 100}); err != nil {
		t.Fatal(err)
	}
	if got := b.Balance(t0); got != 10 {
		t.Fatalf("balance after the reload %v, want 10 kept", got)
	}
	for range 4 {
		b.Deposit(t0)
	}
	if got := b.Balance(t0); got != 11 {
		t.Fatalf("four deposits at the new ratio: %v, want 11", got)
	}
	if err := b.Reconfigure(t0, Config{Ratio: 0.25, MinPerSecond: 0.001, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	if got := b.Balance(t0); got != 3 {
		t.Fatalf("a lower cap: %v, want the balance cut to 3", got)
	}
	if st := b.Stats(); st.Deposits != 24 {
		t.Fatalf("deposits %d, want 24 counted across reloads", st.Deposits)
	}
	err = b.Reconfigure(t0, Config{Ratio: 2})
	if err == nil || !strings.Contains(err.Error(), "Ratio") {
		t.Fatalf("invalid ratio: %v", err)
	}
	if c := b.Config(); c.Ratio != 0.25 || c.MaxTokens != 3 {
		t.Fatalf("refused reload changed the config: %+v", c)
	}
	// The floor's accrual before a reload is credited at the old rate.
	f, _ := New(Config{MinPerSecond: 1, MaxTokens: 100})
	f.Balance(t0)
	if err := f.Reconfigure(t0.Add(10*time.Second), Config{MinPerSecond: 0.001, MaxTokens: 100}); err != nil {
		t.Fatal(err)
	}
	if got := f.Balance(t0.Add(10 * time.Second)); got != 10 {
		t.Fatalf("floor accrued before the reload: %v, want 10", got)
	}
}
