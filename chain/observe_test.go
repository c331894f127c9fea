package chain

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
)

// A burst through an observing chain is decided as an enforcing chain
// decides it — the calls the one refuses are those the other would have
// refused, for the same reasons — and every observed call is let through.
func TestObservedBurstWouldRefuseWhatEnforcedRefuses(t *testing.T) {
	cfg := func(mode string) Config {
		return Config{
			Admission: admission.Config{Concurrency: 4, MaxQueue: 8, InitialServiceTime: 200 * time.Millisecond},
			Retries:   RetryConfig{Disabled: true},
			Mode:      mode,
		}
	}
	enforce, err := NewCore(cfg(""))
	if err != nil {
		t.Fatal(err)
	}
	observe, err := NewCore(cfg(ModeObserve))
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 40 {
		// Deadlines of one and two seconds in turn.
		req := Request{Model: "m", Deadline: t0.Add(time.Duration(1+i%2) * time.Second)}
		want, err := enforce.Arrive(t0, req, new(Ticket), true)
		if err != nil {
			t.Fatal(err)
		}
		tk := new(Ticket)
		got, err := observe.Arrive(t0, req, tk, true)
		if err != nil {
			t.Fatal(err)
		}
		if got.Verdict != admission.Granted {
			t.Fatalf("call %d observed: %v, want granted", i, got.Verdict)
		}
		w := tk.Request().WouldRejection()
		switch {
		case want.Verdict == admission.Rejected && (w == nil || w.Reason != want.Rejection.Reason):
			t.Errorf("call %d: enforced refused %v, observed would refuse %v", i, want.Rejection.Reason, w)
		case want.Verdict != admission.Rejected && w != nil:
			t.Errorf("call %d: enforced %v, observed would refuse %v", i, want.Verdict, w.Reason)
		}
		if want.Verdict == admission.Rejected {
			refused++
		}
	}
	if refused == 0 || refused == 40 {
		t.Fatalf("enforced refused %d of 40: the burst should be refused in part", refused)
	}
	if s := observe.Gate().Stats(t0); s.Queued != 0 || len(s.Rejected) != 0 {
		t.Errorf("observing gate: %d queued, %v refused; want none", s.Queued, s.Rejected)
	}
}

// An observed tenant past its budget is not refused: the refusal is
// recorded, the call keeps its model (the ladder's rung recorded), and its
// spend is booked — while an enforced tenant beside it is refused.
func TestObservedTenantIsBookedNotRefused(t *testing.T) {
	l := limiter(t, `
prices:
  big:   {input_per_mtok: 2.5, output_per_mtok: 10}
  small: {input_per_mtok: 0.15, output_per_mtok: 0.6}
ladder: {big: small}
ceiling_per_hour: 1000
tenants:
  watched: {per_hour: 0.01}
  held:    {per_hour: 0.01}
`)
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 1000, InitialServiceTime: time.Second},
		Retries:   RetryConfig{Disabled: true},
		Spend:     l,
		Tenants:   []TenantConfig{{Name: "watched", Mode: ModeObserve}, {Name: "held"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	call := func(tenant string, i int) (Decision, *Ticket) {
		t.Helper()
		tk := new(Ticket)
		now := t0.Add(time.Duration(i) * time.Millisecond)
		d, err := c.Arrive(now, Request{Tenant: tenant, Model: "big", Deadline: now.Add(time.Minute), InputTokens: 1000, MaxOutputTokens: 500}, tk, true)
		if err != nil {
			t.Fatal(err)
		}
		if d.Verdict == admission.Granted {
			if err := c.Release(now, tk, Outcome{Result: admission.Success, ServiceTime: time.Millisecond,
				Usage: contract.Usage{Input: 1000, Output: 500}, UsageKnown: true}); err != nil {
				t.Fatal(err)
			}
		}
		return d, tk
	}
	var heldRefused, wouldRefuse, wouldDegrade int
	for i := range 40 {
		if d, _ := call("held", i); d.Verdict == admission.Rejected {
			heldRefused++
		}
		d, tk := call("watched", i)
		r := tk.Request()
		if d.Verdict != admission.Granted || r.Model != "big" || r.Degraded {
			t.Fatalf("observed call %d: %v to %q (degraded %v), want granted to big", i, d.Verdict, r.Model, r.Degraded)
		}
		if w := r.WouldRejection(); w != nil {
			if w.Reason != admission.ReasonTenantBudget {
				t.Fatalf("observed call %d would be refused for %v, want tenant_budget", i, w.Reason)
			}
			wouldRefuse++
		}
		if r.WouldDegrade == "small" {
			wouldDegrade++
		}
	}
	if heldRefused == 0 || wouldRefuse != heldRefused {
		t.Errorf("enforced tenant refused %d times, observed would be %d; want the same, and some", heldRefused, wouldRefuse)
	}
	if wouldDegrade == 0 {
		t.Error("the observed tenant was never recorded as degraded before its budget refused it")
	}
	s := l.Snapshot(t0.Add(time.Minute))
	var watched, held float64
	for _, ts := range s.Tenants {
		switch ts.Name {
		case "watched":
			watched = ts.SpentUSD
		case "held":
			held = ts.SpentUSD
		}
	}
	if watched <= 2*held {
		t.Errorf("spend booked: watched $%v, held $%v; every observed call must be booked", watched, held)
	}
	if s.Global.RefusedBudget != int64(heldRefused) {
		t.Errorf("the limiter counted %d refusals, want only the enforced tenant's %d", s.Global.RefusedBudget, heldRefused)
	}
}

// A tenant that may not use a class is not refused it in observe mode,
// and the mode is a tenant's own or the chain's; a bad one is named.
func TestObserveModeOfTenantsAndClasses(t *testing.T) {
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 10},
		Retries:   RetryConfig{Disabled: true},
		Mode:      ModeObserve,
		Tenants: []TenantConfig{
			{Name: "strict", Mode: ModeEnforce, Classes: []string{"batch"}, DisallowedClass: "refuse"},
			{Name: "loose", Classes: []string{"batch"}, DisallowedClass: "refuse"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Arrive(t0, Request{Tenant: "strict", Class: "interactive"}, new(Ticket), true); err == nil {
		t.Error("an enforced tenant was let use a class it may not")
	}
	tk := new(Ticket)
	d, err := c.Arrive(t0, Request{Tenant: "loose", Class: "interactive"}, tk, true)
	if err != nil || d.Verdict != admission.Granted {
		t.Fatalf("observed tenant in a class it may not use: %v, %v; want granted", d.Verdict, err)
	}
	if _, ok := tk.Request().Would.(*ClassError); !ok {
		t.Errorf("observed call would be %v, want the class refusal recorded", tk.Request().Would)
	}
	for _, cfg := range []Config{
		{Admission: admission.Config{Concurrency: 1}, Mode: "watch"},
		{Admission: admission.Config{Concurrency: 1}, Tenants: []TenantConfig{{Name: "a", Mode: "shadow"}}},
	} {
		if _, err := NewCore(cfg); err == nil {
			t.Errorf("mode %q / %+v accepted", cfg.Mode, cfg.Tenants)
		}
	}
}

// A sustained storm at five times a provider's capacity, observed: every call
// is sent, the provider queues what it cannot serve and each call takes
// longer and longer — yet what observe mode would refuse stays what an
// enforcing chain, in front of the same provider, refuses. (Were each
// call's own slot held for its own duration, as a call's is when
// enforced, observe mode would refuse 1,937 of the 2,000 where enforce
// mode refuses 3,195: see shadow.go.)
func TestObservedStormWouldRefuseWhatEnforcedRefuses(t *testing.T) {
	const (
		slots    = 4
		service  = 100 * time.Millisecond
		every    = 5 * time.Millisecond // 200/s: five times 40/s
		run      = 10 * time.Second
		deadline = time.Second
	)
	cfg := func(mode string) Config {
		return Config{
			Admission: admission.Config{Concurrency: slots, MaxQueue: 1000, InitialServiceTime: service},
			Retries:   RetryConfig{Disabled: true},
			Mode:      mode,
		}
	}
	type running struct {
		tk        *Ticket
		sent, end time.Time
	}
	// storm drives c with the arrivals, in front of a provider of slots
	// that serves in order of arrival, and counts the calls refused (or
	// that would be) and those sent.
	storm := func(c *Core) (refused, sent int) {
		var free [slots]time.Time // when each provider slot frees
		var inService []running
		send := func(now time.Time, tk *Ticket) {
			sent++
			i := 0
			for j := range free {
				if free[j].Before(free[i]) {
					i = j
				}
			}
			start := now
			if free[i].After(now) {
				start = free[i]
			}
			free[i] = start.Add(service)
			inService = append(inService, running{tk, now, free[i]})
		}
		decided := func(now time.Time) {
			for _, tk := range c.Events() {
				if tk.Granted() {
					send(now, tk)
				} else {
					refused++
				}
			}
		}
		next := t0
		for now := t0; now.Before(t0.Add(run + 30*time.Second)); now = now.Add(time.Millisecond) {
			var due []running
			kept := inService[:0]
			for _, r := range inService {
				if r.end.After(now) {
					kept = append(kept, r)
				} else {
					due = append(due, r)
				}
			}
			inService = kept
			for _, r := range due {
				if err := c.Release(now, r.tk, Outcome{Result: admission.Success, ServiceTime: now.Sub(r.sent)}); err != nil {
					t.Fatal(err)
				}
				decided(now)
			}
			if now.Before(t0.Add(run)) && !now.Before(next) {
				next = next.Add(every)
				tk := new(Ticket)
				d, err := c.Arrive(now, Request{Model: "m", Deadline: now.Add(deadline)}, tk, true)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case d.Verdict == admission.Rejected:
					refused++
				case d.Verdict == admission.Granted:
					if tk.Request().Would != nil {
						refused++
					}
					send(now, tk)
				}
			}
		}
		return refused, sent
	}
	enforce, err := NewCore(cfg(""))
	if err != nil {
		t.Fatal(err)
	}
	observe, err := NewCore(cfg(ModeObserve))
	if err != nil {
		t.Fatal(err)
	}
	refused, _ := storm(enforce)
	would, sent := storm(observe)
	arrivals := int(run / every)
	t.Logf("%d arrivals at five times the capacity: enforced refused %d, observed would refuse %d (and sent %d)", arrivals, refused, would, sent)
	if sent != arrivals {
		t.Errorf("observe mode sent %d of %d calls", sent, arrivals)
	}
	if refused < arrivals/3 {
		t.Fatalf("enforced refused %d of %d: the storm should refuse about four in five", refused, arrivals)
	}
	if d := would - refused; d > arrivals/20 || d < -arrivals/20 {
		t.Errorf("observed would refuse %d, enforced refused %d: more than 5%% of %d apart", would, refused, arrivals)
	}
	if n := observe.Gate().InFlight(); n != 0 {
		t.Errorf("the observing gate holds %d slots after the storm, want 0", n)
	}
}
