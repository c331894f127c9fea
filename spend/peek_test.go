package spend_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// TestPeekAnswersAsAdmitWithoutBooking: at every stage of the ceiling and
// of a tenant's budget, for every rank, Peek gives the decision Admit then
// gives — allowed, over quota, degraded to which model, refused with which
// reason and Retry-After — and a hundred Peeks leave the books, the
// reservations and every counter of the snapshot as they were.
func TestPeekAnswersAsAdmitWithoutBooking(t *testing.T) {
	now := t0.Add(10 * time.Second)
	for _, frac := range []float64{0.5, 0.85, 0.93, 0.97, 1.0} {
		for _, tenant := range []string{"x", "acme", "unseen"} {
			for rank := range 6 {
				t.Run(fmt.Sprintf("%.2f/%s/rank%d", frac, tenant, rank), func(t *testing.T) {
					l := newLimiter(t, testConfig(), spend.Options{})
					spendUSD(t, l, now, "acme", frac*1) // acme's budget is $1 in the window
					spendUSD(t, l, now, "loader", frac*9)
					req := spend.Request{Tenant: tenant, Model: "big", Rank: rank, EstimatedInputTokens: 100, MaxOutputTokens: 10}
					before := l.Snapshot(now)
					var p spend.Decision
					for range 100 {
						var err error
						if p, err = l.Peek(now, req); err != nil {
							t.Fatal(err)
						}
					}
					if after := l.Snapshot(now); !reflect.DeepEqual(before, after) {
						t.Fatalf("Peek changed the books:\nbefore %+v\nafter  %+v", before, after)
					}
					d := admit(t, l, now, req)
					if p.Reservation != nil {
						t.Fatal("Peek made a reservation")
					}
					p.Reservation = d.Reservation
					if !reflect.DeepEqual(p, d) {
						t.Fatalf("Peek %+v (rejection %+v)\nAdmit %+v (rejection %+v)", p, p.Rejection, d, d.Rejection)
					}
				})
			}
		}
	}
}

// TestPeekWithoutAModelAsksTheBudgets: with no model, Peek prices nothing
// but still says whether the budgets would refuse.
func TestPeekWithoutAModelAsksTheBudgets(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, now, "loader", 10)
	d, err := l.Peek(now, spend.Request{Tenant: "x", Rank: 4})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allow || d.Rejection == nil || d.Rejection.Reason.String() != "spend_ceiling" || d.EstimatedUSD != 0 {
		t.Fatalf("past the ceiling: %+v", d)
	}
	if _, err := l.Admit(now, spend.Request{Tenant: "x", Rank: 4}); err == nil {
		t.Fatal("Admit without a model: want ErrUnknownModel")
	}
}

// TestRefusalSpacing: a refusal carries the time the rate it ran into
// affords one call like it, so that callers refused together can be told
// to come back that far apart.
func TestRefusalSpacing(t *testing.T) {
	now := t0.Add(10 * time.Second)
	l := newLimiter(t, testConfig(), spend.Options{})
	spendUSD(t, l, now, "loader", 10)
	// $0.012 a call against the ceiling's $120/h at rank 5 (threshold 1):
	// 360 ms a call.
	d := admit(t, l, now, spend.Request{Tenant: "x", Model: "unit", Rank: 5, EstimatedInputTokens: 12})
	if d.Rejection == nil || d.Rejection.Interval != 360*time.Millisecond {
		t.Fatalf("refusal %+v, want an interval of 360ms", d.Rejection)
	}
}
