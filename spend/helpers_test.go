package spend_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// t0 is a minute boundary the tests count from.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func f64(v float64) *float64 { return &v }

// testConfig prices "unit" at $0.001 per input token (so a request's
// EstimatedInputTokens is its cost in tenths of a cent and the arithmetic of
// the tests stays exact), and a ladder big → small → tiny. The ceiling is
// $120/h over a 5-minute window: $10 of spend in the window is the ceiling.
func testConfig() spend.Config {
	return spend.Config{
		Prices: map[string]spend.Price{
			"unit":  {InputPerMTok: 1000},
			"big":   {InputPerMTok: 2.5, OutputPerMTok: 10, CachedInputPerMTok: f64(1.25)},
			"small": {InputPerMTok: 0.15, OutputPerMTok: 0.6},
			"tiny":  {InputPerMTok: 0.1, OutputPerMTok: 0.4},
		},
		Ladder:         map[string]string{"big": "small", "small": "tiny"},
		CeilingPerHour: 120,
		Tenants: map[string]spend.TenantBudget{
			"acme":   {PerHour: 12}, // $1 in the window
			"daily":  {PerDay: 2},
			"plenty": {PerHour: 1000},
		},
	}
}

func newLimiter(t testing.TB, cfg spend.Config, opts spend.Options) *spend.Limiter {
	t.Helper()
	l, err := spend.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// spendUSD admits and settles a call of "unit" costing usd (a multiple of
// $0.001) for tenant at time at, failing the test if it is refused.
func spendUSD(t testing.TB, l *spend.Limiter, at time.Time, tenant string, usd float64) {
	t.Helper()
	tokens := int64(usd*1000 + 0.5)
	d, err := l.Admit(at, spend.Request{Tenant: tenant, Model: "unit", Rank: 5, EstimatedInputTokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allow {
		t.Fatalf("spend of $%v for %s at %v refused: %v", usd, tenant, at, d.Err())
	}
	if _, err := l.Reconcile(at, d.Reservation, contract.Usage{Input: tokens}, true); err != nil {
		t.Fatal(err)
	}
}

func admit(t testing.TB, l *spend.Limiter, at time.Time, req spend.Request) spend.Decision {
	t.Helper()
	d, err := l.Admit(at, req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func near(a, b, tol float64) bool { return a-b <= tol && b-a <= tol }

func findScope(list []spend.ScopeSnapshot, name string) spend.ScopeSnapshot {
	for _, s := range list {
		if s.Name == name {
			return s
		}
	}
	return spend.ScopeSnapshot{}
}
