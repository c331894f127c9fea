package spend_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

func tenantSnap(t *testing.T, s spend.Snapshot, name string) spend.ScopeSnapshot {
	t.Helper()
	for _, ts := range s.Tenants {
		if ts.Name == name {
			return ts
		}
	}
	t.Fatalf("no tenant %s in the snapshot", name)
	return spend.ScopeSnapshot{}
}

// TestReconfigureKeepsTheBooks changes prices, a budget and the ladder of a
// running Limiter: the books (spend, rates, counters) read the same across
// the reload, a reservation made before it settles at the price it was
// admitted at, and what follows is decided by the new policy.
func TestReconfigureKeepsTheBooks(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, t0, "acme", 0.5)
	spendUSD(t, l, t0, "other", 2)
	// In flight across the reload: $0.1 reserved at the old price.
	inflight, err := l.Admit(t0, spend.Request{Tenant: "other", Model: "unit", Rank: 4, EstimatedInputTokens: 100})
	if err != nil || !inflight.Allow {
		t.Fatalf("admit: %v %v", err, inflight.Err())
	}
	before := l.Snapshot(t0)

	next := testConfig()
	next.Prices["unit"] = spend.Price{InputPerMTok: 2000} // twice the price
	next.Tenants = map[string]spend.TenantBudget{"acme": {PerHour: 6}, "other": {PerHour: 30}}
	delete(next.Ladder, "small")
	if err := l.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	after := l.Snapshot(t0)
	if after.Global.SpentUSD != before.Global.SpentUSD || after.Global.RatePerHour != before.Global.RatePerHour ||
		after.Reservations != 1 || after.ReservedUSD != before.ReservedUSD {
		t.Fatalf("global books moved across the reload:\nbefore %+v\nafter  %+v", before.Global, after.Global)
	}
	for _, name := range []string{"acme", "other"} {
		b, a := tenantSnap(t, before, name), tenantSnap(t, after, name)
		if a.SpentUSD != b.SpentUSD || a.RatePerHour != b.RatePerHour || a.KnownCalls != b.KnownCalls {
			t.Fatalf("%s's books moved: before %+v after %+v", name, b, a)
		}
	}
	if a := tenantSnap(t, after, "acme"); a.LimitPerHour != 6 || a.LimitPerDay != 0 {
		t.Fatalf("acme's budget after the reload: %+v, want $6/h", a)
	}
	if d := tenantSnap(t, after, "daily"); d.LimitPerDay != 0 || d.Stage != spend.StageNormal {
		t.Fatalf("daily's budget was removed, yet %+v", d)
	}
	// The reservation settles at the price it was admitted at: $0.1.
	cost, err := l.Reconcile(t0, inflight.Reservation, contract.Usage{Input: 100}, true)
	if err != nil || math.Abs(cost-0.1) > 1e-9 {
		t.Fatalf("in-flight call settled at $%v (%v), want $0.1 at the old price", cost, err)
	}
	// New calls are priced at the new price: 100 tokens, $0.2.
	d, err := l.Admit(t0, spend.Request{Tenant: "plenty", Model: "unit", Rank: 4, EstimatedInputTokens: 100})
	if err != nil || math.Abs(d.EstimatedUSD-0.2) > 1e-9 {
		t.Fatalf("new call estimated at $%v (%v), want $0.2", d.EstimatedUSD, err)
	}
	l.Cancel(t0, d.Reservation)
	// acme spent $0.5 in the window: $6/h over the 5-minute window at
	// its new budget is $0.5, so its work is refused now.
	d, err = l.Admit(t0.Add(time.Second), spend.Request{Tenant: "acme", Model: "unit", Rank: 4, EstimatedInputTokens: 1})
	if err != nil || d.Allow || d.Rejection.Reason != admission.ReasonTenantBudget {
		t.Fatalf("acme at its lowered budget: %+v %v, want refused tenant_budget", d, err)
	}
}

// TestReconfigureRefusesABadConfig: the error names the field and the
// running policy stays.
func TestReconfigureRefusesABadConfig(t *testing.T) {
	l := newLimiter(t, testConfig(), spend.Options{})
	bad := testConfig()
	bad.Ladder = map[string]string{"small": "big"}
	err := l.Reconfigure(bad)
	if err == nil || !strings.Contains(err.Error(), "ladder.small") {
		t.Fatalf("a dearer rung: %v, want an error naming ladder.small", err)
	}
	d, err := l.Admit(t0, spend.Request{Model: "unit", Rank: 4, EstimatedInputTokens: 100})
	if err != nil || math.Abs(d.EstimatedUSD-0.1) > 1e-9 {
		t.Fatalf("after a refused reload: $%v (%v), want the old price", d.EstimatedUSD, err)
	}
}
