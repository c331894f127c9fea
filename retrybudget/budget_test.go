package retrybudget

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// step is one call in a scripted scenario, made at t0+at.
type step struct {
	at  time.Duration
	op  string  // "deposit", "withdraw", "balance", "retryafter"
	n   int     // repeat count for deposit (0 means 1)
	ok  bool    // want, for withdraw
	bal float64 // want, for balance
	ra  time.Duration
}

func TestBudgetScenarios(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "ten first attempts at the default ratio pay for exactly one retry",
			steps: []step{
				{op: "balance", bal: 0},
				{op: "deposit", n: 9},
				{op: "withdraw", ok: false},
				{op: "deposit"},
				{op: "balance", bal: 1},
				{op: "withdraw", ok: true},
				{op: "withdraw", ok: false},
				{op: "balance", bal: 0},
			},
		},
		{
			name: "a custom ratio",
			cfg:  Config{Ratio: 0.25},
			steps: []step{
				{op: "deposit", n: 8},
				{op: "balance", bal: 2},
				{op: "withdraw", ok: true},
				{op: "withdraw", ok: true},
				{op: "withdraw", ok: false},
			},
		},
		{
			name: "the floor accrues with time at MinPerSecond",
			steps: []step{
				{op: "balance", bal: 0},
				{at: 50 * time.Millisecond, op: "balance", bal: 0.5},
				{at: 100 * time.Millisecond, op: "withdraw", ok: true},
				{at: 1100 * time.Millisecond, op: "balance", bal: 10},
			},
		},
		{
			name: "a custom floor",
			cfg:  Config{MinPerSecond: 2},
			steps: []step{
				{op: "withdraw", ok: false},
				{at: 499 * time.Millisecond, op: "withdraw", ok: false},
				{at: 500 * time.Millisecond, op: "withdraw", ok: true},
			},
		},
		{
			name: "the default cap is ten seconds of the floor",
			steps: []step{
				{op: "balance", bal: 0},
				{at: time.Hour, op: "balance", bal: 100},
				{at: time.Hour, op: "deposit", n: 50},
				{at: time.Hour, op: "balance", bal: 100},
			},
		},
		{
			name: "a custom cap holds against deposits and time",
			cfg:  Config{MaxTokens: 3},
			steps: []step{
				{op: "deposit", n: 1000},
				{op: "balance", bal: 3},
				{at: time.Minute, op: "balance", bal: 3},
				{at: time.Minute, op: "withdraw", ok: true},
				{at: time.Minute, op: "balance", bal: 2},
			},
		},
		{
			name: "refusal, then recovery exactly when RetryAfter said",
			steps: []step{
				{op: "withdraw", ok: false},
				{op: "retryafter", ra: 100 * time.Millisecond},
				{at: 99 * time.Millisecond, op: "withdraw", ok: false},
				{at: 99 * time.Millisecond, op: "retryafter", ra: time.Millisecond},
				{at: 100 * time.Millisecond, op: "retryafter", ra: 0},
				{at: 100 * time.Millisecond, op: "withdraw", ok: true},
				{at: 100 * time.Millisecond, op: "retryafter", ra: 100 * time.Millisecond},
			},
		},
		{
			name: "RetryAfter counts the balance already held but not future deposits",
			steps: []step{
				{op: "deposit", n: 3},
				{op: "retryafter", ra: 70 * time.Millisecond},
				{at: 70 * time.Millisecond, op: "withdraw", ok: true},
			},
		},
		{
			name: "RetryAfter is at least a nanosecond while no token is available",
			cfg:  Config{MinPerSecond: 1e12, MaxTokens: 1},
			steps: []step{
				{op: "retryafter", ra: time.Nanosecond},
				{at: time.Nanosecond, op: "withdraw", ok: true},
			},
		},
		{
			name: "a time earlier than one already seen earns nothing and loses nothing",
			steps: []step{
				{op: "balance", bal: 0},
				{at: time.Second, op: "balance", bal: 10},
				{at: 500 * time.Millisecond, op: "balance", bal: 10},
				{at: 500 * time.Millisecond, op: "withdraw", ok: true},
				{at: 1100 * time.Millisecond, op: "balance", bal: 10},
			},
		},
		{
			name: "the balance starts empty at the first time given, whenever that is",
			steps: []step{
				{at: 24 * time.Hour, op: "withdraw", ok: false},
				{at: 24*time.Hour + 100*time.Millisecond, op: "withdraw", ok: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "deposit":
					for range max(s.n, 1) {
						b.Deposit(now)
					}
				case "withdraw":
					if got := b.TryWithdraw(now); got != s.ok {
						t.Fatalf("step %d: TryWithdraw(t0+%v) = %v, want %v", i, s.at, got, s.ok)
					}
				case "balance":
					if got := b.Balance(now); got != s.bal {
						t.Fatalf("step %d: Balance(t0+%v) = %v, want %v", i, s.at, got, s.bal)
					}
				case "retryafter":
					if got := b.RetryAfter(now); got != s.ra {
						t.Fatalf("step %d: RetryAfter(t0+%v) = %v, want %v", i, s.at, got, s.ra)
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
			}
		})
	}
}

func TestStatsCountEveryCall(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b.Deposit(t0)
	}
	for range 5 {
		b.TryWithdraw(t0)
	}
	want := Stats{Deposits: 20, Withdrawals: 2, Refusals: 3}
	if got := b.Stats(); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
}

// TestFloorIsNotLostToRounding consults the budget more often than the floor
// earns a whole unit; without the carried fraction it would earn nothing.
func TestFloorIsNotLostToRounding(t *testing.T) {
	// 0.3 tokens a second is 0.3 units a nanosecond.
	b, err := New(Config{MinPerSecond: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1001 {
		b.Balance(t0.Add(time.Duration(i)))
	}
	// 1000ns × 0.3 = 300 units, give or take the float rounding of the carry.
	if got, want := b.Balance(t0.Add(1000)), 300.0/unit; math.Abs(got-want) > 1.0/unit {
		t.Fatalf("Balance after 1000 calls 1ns apart = %v, want %v", got, want)
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		in, want Config
	}{
		{Config{}, Config{Ratio: 0.1, MinPerSecond: 10, MaxTokens: 100}},
		{Config{MinPerSecond: 2}, Config{Ratio: 0.1, MinPerSecond: 2, MaxTokens: 20}},
		{Config{MinPerSecond: 0.01}, Config{Ratio: 0.1, MinPerSecond: 0.01, MaxTokens: 1}},
		{Config{Ratio: 1, MaxTokens: 1}, Config{Ratio: 1, MinPerSecond: 10, MaxTokens: 1}},
	}
	for _, tt := range tests {
		b, err := New(tt.in)
		if err != nil {
			t.Fatalf("New(%+v): %v", tt.in, err)
		}
		if got := b.Config(); got != tt.want {
			t.Errorf("New(%+v).Config() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{Ratio: -0.1}, "Ratio"},
		{Config{Ratio: 1.5}, "Ratio"},
		{Config{Ratio: math.NaN()}, "Ratio"},
		{Config{Ratio: 1e-12}, "Ratio"},
		{Config{MinPerSecond: -1}, "MinPerSecond"},
		{Config{MinPerSecond: math.Inf(1)}, "MinPerSecond"},
		{Config{MinPerSecond: math.NaN()}, "MinPerSecond"},
		{Config{MaxTokens: 0.5}, "MaxTokens"},
		{Config{MaxTokens: -1}, "MaxTokens"},
		{Config{MaxTokens: 1e10}, "MaxTokens"},
		{Config{MaxTokens: math.NaN()}, "MaxTokens"},
		{Config{MaxTokens: math.Inf(1)}, "MaxTokens"},
	}
	for _, tt := range tests {
		b, err := New(tt.cfg)
		if err == nil {
			t.Errorf("New(%+v) = %+v, want an error naming %s", tt.cfg, b.Config(), tt.field)
			continue
		}
		if !strings.Contains(err.Error(), tt.field) {
			t.Errorf("New(%+v) error %q does not name %s", tt.cfg, err, tt.field)
		}
	}
}

// TestConcurrentBooksBalance hammers one Budget from several goroutines, each
// with its own (not globally monotonic) clock, and checks that every token is
// accounted for: the final balance is exactly what deposits and the floor
// earned minus what withdrawals spent.
func TestConcurrentBooksBalance(t *testing.T) {
	const (
		goroutines = 8
		perG       = 2000
	)
	// Ratio 0.25 and 10 tokens/s (10 units per ns) keep every quantity a whole
	// number of units; the cap is out of reach so nothing is clipped.
	b, err := New(Config{Ratio: 0.25, MinPerSecond: 10, MaxTokens: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	b.Balance(t0) // start the clock at t0

	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		allowed, refused uint64
		latest           time.Time
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ok, no uint64
			var now time.Time
			for i := range perG {
				// Interleaved clocks: goroutine g runs slightly ahead of g-1.
				now = t0.Add(time.Duration(i*goroutines+g) * time.Microsecond)
				b.Deposit(now)
				if i%3 == 0 {
					continue
				}
				if b.TryWithdraw(now) {
					ok++
				} else {
					no++
				}
			}
			mu.Lock()
			allowed += ok
			refused += no
			if now.After(latest) {
				latest = now
			}
			mu.Unlock()
		}()
	}
	wg.Wait()

	st := b.Stats()
	if st.Deposits != goroutines*perG {
		t.Errorf("Deposits = %d, want %d", st.Deposits, goroutines*perG)
	}
	if st.Withdrawals != allowed || st.Refusals != refused {
		t.Errorf("Stats = %+v, but callers saw %d allowed and %d refused", st, allowed, refused)
	}
	if allowed == 0 || refused == 0 {
		t.Errorf("allowed=%d refused=%d: the test should exercise both outcomes", allowed, refused)
	}
	earnedUnits := int64(st.Deposits)*unit/4 + int64(latest.Sub(t0))*10
	wantUnits := earnedUnits - int64(st.Withdrawals)*unit
	if got := b.Balance(latest); got != float64(wantUnits)/unit {
		t.Errorf("Balance = %v, want %v (earned %v tokens, spent %d)", got, float64(wantUnits)/unit, float64(earnedUnits)/unit, st.Withdrawals)
	}
}

func TestRefundReturnsTheToken(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b, err := New(Config{Ratio: 0.5, MinPerSecond: 0.001, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	b.Deposit(t0)
	b.Deposit(t0)
	if !b.TryWithdraw(t0) {
		t.Fatal("no token after two deposits of half a token")
	}
	if b.TryWithdraw(t0) {
		t.Fatal("a second token out of one")
	}
	b.Refund(t0)
	if got := b.Balance(t0); got < 0.999 || got > 1 {
		t.Fatalf("balance after refund %v, want 1", got)
	}
	b.Refund(t0) // capped: the cap is one token
	if got := b.Balance(t0); got > 1 {
		t.Fatalf("balance %v passed the cap", got)
	}
	if st := b.Stats(); st.Withdrawals != 0 || st.Refusals != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPeekAnswersAsTryWithdrawWithoutTouching: Peek says what TryWithdraw
// and RetryAfter would at the same time — on a budget never used, an empty
// one, one refilled by the floor, one with a token — and a thousand Peeks
// change neither the balance, the counters nor the clock the floor accrues
// from.
func TestPeekAnswersAsTryWithdrawWithoutTouching(t *testing.T) {
	cfg := Config{Ratio: 0.1, MinPerSecond: 2, MaxTokens: 3}
	peeked, _ := New(cfg)
	used, _ := New(cfg)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i, now := range []time.Time{at(0), at(100 * time.Millisecond), at(600 * time.Millisecond), at(time.Second), at(2 * time.Second)} {
		for range 1000 {
			peeked.Peek(now)
		}
		ok, ra := peeked.Peek(now)
		wantRA := used.RetryAfter(now)
		wantOK := used.TryWithdraw(now)
		if ok != wantOK || ra != wantRA {
			t.Fatalf("step %d: Peek = %v, %v; TryWithdraw = %v, RetryAfter = %v", i, ok, ra, wantOK, wantRA)
		}
		// Keep the two budgets alike: the peeked one takes what the
		// other took.
		if wantOK && !peeked.TryWithdraw(now) {
			t.Fatalf("step %d: Peek said yes, TryWithdraw no", i)
		} else if !wantOK {
			peeked.RetryAfter(now)
			peeked.TryWithdraw(now)
		}
		if peeked.Balance(now) != used.Balance(now) || peeked.Stats() != used.Stats() {
			t.Fatalf("step %d: peeked budget %v %+v, used %v %+v", i, peeked.Balance(now), peeked.Stats(), used.Balance(now), used.Stats())
		}
	}
	fresh, _ := New(cfg)
	fresh.Peek(at(time.Hour)) // must not start the floor's clock
	if fresh.TryWithdraw(at(time.Hour + time.Second)) {
		t.Fatal("a Peek started the floor's clock: a token a second after it, want none (the first use starts it)")
	}
}
