package chain

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/spend"
)

// The stages are asked in the order doc.go documents, and a configuration
// leaves out the stages it does not have.
func TestStagesInTheDocumentedOrder(t *testing.T) {
	typesOf := func(s *stages) []string {
		var out []string
		for _, st := range s.all {
			out = append(out, fmt.Sprintf("%T", st))
		}
		return out
	}
	namesOf := func(s *stages) []string {
		var out []string
		for _, o := range order {
			if o.of(s) != nil {
				out = append(out, o.name)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		types []string
		names []string
	}{
		{"every stage", Config{Retries: tightRetries, Spend: limiter(t, prices), Routing: degradeConfig()},
			[]string{"*chain.identify", "*chain.seen", "*chain.retries", "*chain.degrader", "*chain.spendStage", "*chain.router"},
			[]string{"identify", "recognise", "retries", "degrade", "spend", "route"}},
		{"no ladder, no spend, no retries, no recognition", Config{Admission: admission.Config{Concurrency: 1},
			Retries: RetryConfig{Disabled: true, Recognise: RecogniseConfig{Disabled: true}}},
			[]string{"*chain.identify", "*chain.router"},
			[]string{"identify", "route"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := routeCore(t, tc.cfg)
			if got := typesOf(c.stages); !slices.Equal(got, tc.types) {
				t.Fatalf("stages %v, want %v", got, tc.types)
			}
			if got := namesOf(c.stages); !slices.Equal(got, tc.names) {
				t.Fatalf("stage names %v, want %v", got, tc.names)
			}
		})
	}
}

// loadDegradeSpend prices big at $0.001 an input token and small at a
// tenth of it, with a ceiling of $120/h ($10 in the 5-minute rate window),
// and routes big (one slot) and small (four), big degrading to small for
// batch calls.
func loadDegradeSpend() (string, *RoutingConfig) {
	return `
prices:
  big:   {input_per_mtok: 1000}
  small: {input_per_mtok: 100}
ceiling_per_hour: 120
`, &RoutingConfig{
			Pools:          []PoolConfig{poolCfg("d/big", "d", "big", 1, time.Second), poolCfg("d/small", "d", "small", 4, time.Second)},
			Routes:         map[string][]string{"big": {"d/big"}, "small": {"d/small"}},
			Ladder:         map[string]string{"big": "small"},
			DegradeClasses: []string{admission.ClassBatch},
		}
}

// A call degraded under load holds one spend reservation, made at the
// rung's model: the degrade stage stands before spend, so spend never
// reserves at the model asked. The call here would cost $9.99 at big,
// $0.999 at small: had big's reservation been made first, the ceiling
// would have stood at 99.9% of its window when small's was asked for, and
// refused a batch call. Both shells; the estimate says the same.
func TestDegradedUnderLoadReservedOnceAtTheRung(t *testing.T) {
	const bigUSD, smallUSD = 9.99, 0.999
	filler := Request{Model: "big", Unpriced: true} // takes big's one slot, books nothing
	call := Request{Class: admission.ClassBatch, Model: "big", InputTokens: 9990}
	check := func(t *testing.T, l *spend.Limiter, now time.Time, r *Request) {
		t.Helper()
		if r.Model != "small" || r.AskedModel != "big" || r.DegradedBy != DegradedByLoad || r.Pool != 1 {
			t.Fatalf("call: model %s asked %s by %q at pool %d; want small, asked big, by load, at pool 1", r.Model, r.AskedModel, r.DegradedBy, r.Pool)
		}
		s := l.Snapshot(now)
		if s.Reservations != 1 || math.Abs(s.ReservedUSD-smallUSD) > 1e-9 || math.Abs(r.EstimatedUSD-smallUSD) > 1e-9 {
			t.Fatalf("%d reservations of $%g (the call's estimate $%g); want one of $%g, small's, not big's $%g",
				s.Reservations, s.ReservedUSD, r.EstimatedUSD, smallUSD, bigUSD)
		}
		if got := s.Global.RatePerHour; math.Abs(got-smallUSD*12) > 1e-6 {
			t.Fatalf("ceiling's rate $%g/h, want $%g/h: small's reservation alone", got, smallUSD*12)
		}
	}
	settled := func(t *testing.T, l *spend.Limiter, now time.Time) {
		t.Helper()
		s := l.Snapshot(now)
		if s.Reservations != 0 || math.Abs(s.Global.SpentUSD-smallUSD) > 1e-9 {
			t.Fatalf("settled: %d reservations, $%g spent; want 0, $%g at small's price", s.Reservations, s.Global.SpentUSD, smallUSD)
		}
		for _, m := range s.Models {
			if m.Name == "big" && (m.SpentUSD != 0 || m.RatePerHour != 0) {
				t.Fatalf("big booked $%g ($%g/h), want nothing", m.SpentUSD, m.RatePerHour)
			}
		}
	}
	usage := Outcome{Result: admission.Success, ServiceTime: time.Second, UsageKnown: true, Usage: contract.Usage{Input: 9990}}

	t.Run("Core", func(t *testing.T) {
		yaml, rc := loadDegradeSpend()
		l := limiter(t, yaml)
		c := routeCore(t, Config{Spend: l, Routing: rc})
		arriveAt(t, c, t0, filler)
		req := call
		req.Deadline = t0.Add(1500 * time.Millisecond) // big: 1s of wait + 1s of service
		e, err := c.Estimate(t0, req)
		if err != nil {
			t.Fatal(err)
		}
		if e.Verdict != admission.Granted || e.Request.Model != "small" || math.Abs(e.Request.EstimatedUSD-smallUSD) > 1e-9 {
			t.Fatalf("estimate: %v at %s for $%g; want granted at small for $%g", e.Verdict, e.Request.Model, e.Request.EstimatedUSD, smallUSD)
		}
		d, tk := arriveAt(t, c, t0, req)
		if d.Verdict != admission.Granted {
			t.Fatalf("call: %+v, want granted", d)
		}
		check(t, l, t0, tk.Request())
		if err := c.Release(t0.Add(time.Second), tk, usage); err != nil {
			t.Fatal(err)
		}
		settled(t, l, t0.Add(time.Second))
	})
	t.Run("Chain", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			yaml, rc := loadDegradeSpend()
			l := limiter(t, yaml)
			c, err := New(Config{Spend: l, Routing: rc, RefusalSpread: -1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Acquire(context.Background(), filler); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			p, err := c.Acquire(ctx, call)
			if err != nil {
				t.Fatal(err)
			}
			check(t, l, time.Now(), p.Request())
			time.Sleep(time.Second)
			if err := p.Done(usage); err != nil {
				t.Fatal(err)
			}
			settled(t, l, time.Now())
		})
	})
}

// A call degraded under load to a rung spend has no price for is priced
// at the model its caller asked (booked high), not refused as bad input
// for a model it never named.
func TestDegradedUnderLoadToAnUnpricedRung(t *testing.T) {
	_, rc := loadDegradeSpend()
	l := limiter(t, `
prices:
  big: {input_per_mtok: 1000}
unknown_model: reject
`)
	c := routeCore(t, Config{Spend: l, Routing: rc})
	arriveAt(t, c, t0, Request{Model: "big", Unpriced: true})
	d, tk := arriveAt(t, c, t0, Request{Class: admission.ClassBatch, Model: "big", InputTokens: 1000, Deadline: t0.Add(1500 * time.Millisecond)})
	r := tk.Request()
	if d.Verdict != admission.Granted || r.Model != "small" || r.DegradedBy != DegradedByLoad || r.Pool != 1 {
		t.Fatalf("call: %v, model %s by %q at pool %d; want granted at small, by load, pool 1", d.Verdict, r.Model, r.DegradedBy, r.Pool)
	}
	if s := l.Snapshot(t0); s.Reservations != 1 || math.Abs(s.ReservedUSD-1) > 1e-9 {
		t.Fatalf("%d reservations of $%g; want one of $1, at big's price", s.Reservations, s.ReservedUSD)
	}
}

// TestDegradeConfigValidateNamesTheEntry: the section's one validation,
// the gateway's degrade: and the simulator's sluice.degrade, names the
// entry at fault by its path inside the section.
func TestDegradeConfigValidateNamesTheEntry(t *testing.T) {
	served := func(m string) bool { return m == "big" || m == "small" || m == "tiny" }
	classes := []string{"batch", "interactive"}
	for _, tc := range []struct {
		cfg  DegradeConfig
		want string // "" for valid
	}{
		{DegradeConfig{Ladder: map[string]string{"big": "small", "small": "tiny"}, Classes: []string{"batch"}}, ""},
		{DegradeConfig{Ladder: map[string]string{"huge": "small"}}, `ladder.huge: model "huge" is served by no deployment`},
		{DegradeConfig{Ladder: map[string]string{"big": "huge"}}, `ladder.big: rung "huge" is served by no deployment`},
		{DegradeConfig{Ladder: map[string]string{"big": "small", "small": "big"}}, `ladder.small: the ladder loops back to "big"`},
		{DegradeConfig{Ladder: map[string]string{"big": "big"}}, `ladder.big: the ladder loops back to "big"`},
		{DegradeConfig{Classes: []string{"bulk"}}, `classes[0]: "bulk" is not a class of classes (batch, interactive)`},
		{DegradeConfig{Classes: []string{"batch", "batch"}}, `classes[1]: "batch" is listed twice (also classes[0])`},
	} {
		err := tc.cfg.Validate(served, classes)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%+v: got %v, want %s", tc.cfg, err, tc.want)
		}
	}
}
