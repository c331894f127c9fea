package chain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/retrybudget"
	"github.com/sluicehq/sluice/spend"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func limiter(t *testing.T, yaml string) *spend.Limiter {
	t.Helper()
	cfg, err := spend.ParseConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	l, err := spend.New(cfg, spend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const prices = `
prices:
  big:   {input_per_mtok: 2.5, output_per_mtok: 10}
  small: {input_per_mtok: 0.15, output_per_mtok: 0.6}
ladder: {big: small}
ceiling_per_hour: 1000
`

// tightRetries lets no retry through on credit: a retry needs ten first
// attempts' deposits.
var tightRetries = RetryConfig{
	Budget:    retrybudget.Config{Ratio: 0.1, MinPerSecond: 1e-9, MaxTokens: 1},
	PerTenant: retrybudget.Config{Ratio: 0.1, MinPerSecond: 1e-9, MaxTokens: 1},
}

// A refusal by a stage costs nothing of the stages after it, and a refusal
// by the gate gives back what the stages before it took.
func TestStagesInOrderAndGiveBack(t *testing.T) {
	l := limiter(t, prices)
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 1, InitialServiceTime: time.Second},
		Retries:   tightRetries,
		Spend:     l,
	})
	if err != nil {
		t.Fatal(err)
	}
	arrive := func(r Request) (Decision, *Ticket) {
		t.Helper()
		tk := new(Ticket)
		d, err := c.Arrive(t0, r, tk, false)
		if err != nil {
			t.Fatal(err)
		}
		return d, tk
	}
	// A retry with nothing in the budget: refused by the retry stage, so
	// the spend stage never reserved anything.
	d, _ := arrive(Request{Class: admission.ClassInteractive, Attempt: 1, Model: "big", Deadline: t0.Add(time.Minute)})
	if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonRetryBudget {
		t.Fatalf("retry with an empty budget: %+v, want retry_budget", d)
	}
	if s := l.Snapshot(t0); s.Reservations != 0 {
		t.Fatalf("a call refused before the spend stage left %d reservations", s.Reservations)
	}
	// A first attempt takes the slot (and a reservation).
	d, first := arrive(Request{Class: admission.ClassInteractive, Model: "big", Deadline: t0.Add(time.Minute)})
	if d.Verdict != admission.Granted {
		t.Fatalf("first call: %+v, want granted", d)
	}
	if got := first.Request().Tenant; got != AnonymousTenant {
		t.Fatalf("tenant %q, want %q", got, AnonymousTenant)
	}
	if n := l.Snapshot(t0).Reservations; n != 1 {
		t.Fatalf("%d reservations after a granted call, want 1", n)
	}
	// A second one cannot wait (TryAcquire-style): the gate refuses it, and
	// its reservation is given back.
	d, _ = arrive(Request{Class: admission.ClassInteractive, Model: "big", Deadline: t0.Add(time.Minute)})
	if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueWait {
		t.Fatalf("second call: %+v, want queue_wait", d)
	}
	if n := l.Snapshot(t0).Reservations; n != 1 {
		t.Fatalf("%d reservations after the gate refused a call, want 1 (the granted call's)", n)
	}
	// The granted call ends with its usage: settled and released.
	if err := c.Release(t0.Add(time.Second), first, Outcome{Result: admission.Success, ServiceTime: time.Second,
		Usage: contract.Usage{Input: 100, Output: 50}, UsageKnown: true}); err != nil {
		t.Fatal(err)
	}
	s := l.Snapshot(t0.Add(time.Second))
	if s.Reservations != 0 || s.Global.SpentUSD <= 0 {
		t.Fatalf("after release: %d reservations, $%v spent; want 0 and the call's cost", s.Reservations, s.Global.SpentUSD)
	}
	if st := c.Gate().Stats(t0.Add(time.Second)); st.InFlight != 0 {
		t.Fatalf("in flight %d after release", st.InFlight)
	}
}

// A queued call whose caller leaves, and one the gate evicts, give back
// their reservations; a call cut short is booked as wasted.
func TestQueuedCallsGiveBackAndCanceledIsWasted(t *testing.T) {
	l := limiter(t, prices)
	c, err := NewCore(Config{
		Admission: admission.Config{Concurrency: 1, MaxQueue: 1, InitialServiceTime: time.Second},
		Retries:   RetryConfig{Disabled: true},
		Spend:     l,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := func(class string) Request {
		return Request{Class: class, Model: "big", Deadline: t0.Add(time.Minute), InputTokens: 1000, MaxOutputTokens: 1000}
	}
	running, queued, evictor := new(Ticket), new(Ticket), new(Ticket)
	for _, x := range []struct {
		tk    *Ticket
		class string
		want  admission.Verdict
	}{{running, admission.ClassBatch, admission.Granted}, {queued, admission.ClassBatch, admission.Queued}, {evictor, admission.ClassInteractive, admission.Queued}} {
		d, err := c.Arrive(t0, req(x.class), x.tk, true)
		if err != nil || d.Verdict != x.want {
			t.Fatalf("%s: %+v, %v; want %v", x.class, d, err, x.want)
		}
	}
	ev := c.Events()
	if len(ev) != 1 || ev[0] != queued || ev[0].Rejection().Reason != admission.ReasonEvicted {
		t.Fatalf("events %v, want the batch call evicted", ev)
	}
	if n := l.Snapshot(t0).Reservations; n != 2 {
		t.Fatalf("%d reservations, want 2 (running and the interactive one queued)", n)
	}
	if !c.Cancel(t0.Add(time.Millisecond), evictor, 0) {
		t.Fatal("Cancel of a queued ticket returned false")
	}
	if n := l.Snapshot(t0).Reservations; n != 1 {
		t.Fatalf("%d reservations after the queued caller left, want 1", n)
	}
	// The running call's caller leaves: settled now, without usage, as
	// wasted; the slot stays until the call ends.
	if err := c.Settle(t0.Add(100*time.Millisecond), running, Outcome{Result: admission.Canceled, ServiceTime: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	s := l.Snapshot(t0.Add(time.Second))
	if s.Reservations != 0 || s.Global.WastedUSD <= 0 {
		t.Fatalf("after the caller left: %d reservations, $%v wasted; want 0 and the estimate", s.Reservations, s.Global.WastedUSD)
	}
	if got := c.Gate().InFlight(); got != 1 {
		t.Fatalf("in flight %d after Settle, want 1: the slot is held until Release", got)
	}
	if err := c.Release(t0.Add(time.Second), running, Outcome{Result: admission.Success, ServiceTime: time.Second}); err != nil {
		t.Fatal(err)
	}
	if got, spent := c.Gate().InFlight(), l.Snapshot(t0.Add(time.Second)).Global.SpentUSD; got != 0 || spent != s.Global.SpentUSD {
		t.Fatalf("after Release: in flight %d, spent $%v (was $%v); a settled call must not be booked twice", got, spent, s.Global.SpentUSD)
	}
}

func TestIdentify(t *testing.T) {
	keyed := []TenantConfig{{Name: "acme", Tier: "high", APIKeysSHA256: []string{HashKey("k-acme")}}, {Name: "bolt", Tier: "low", APIKeysSHA256: []string{HashKey("k-bolt")}}}
	ch, err := New(Config{Admission: admission.Config{Concurrency: 1}, Tenants: keyed})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key    string
		tenant string
		tier   admission.Tier
		ok     bool
	}{{"k-acme", "acme", admission.TierHigh, true}, {"k-bolt", "bolt", admission.TierLow, true}, {"", "", 0, false}, {"k-acm", "", 0, false}} {
		name, tier, ok := ch.Identify(tc.key)
		if name != tc.tenant || tier != tc.tier || ok != tc.ok {
			t.Errorf("Identify(%q) = %q, %v, %v; want %q, %v, %v", tc.key, name, tier, ok, tc.tenant, tc.tier, tc.ok)
		}
	}
	// The stage itself: by key, or a named tenant's tier from its config.
	if _, err := ch.Acquire(context.Background(), Request{APIKey: "nope"}); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Acquire with an unknown key: %v, want ErrUnknownKey", err)
	}
	p, err := ch.Acquire(context.Background(), Request{Tenant: "bolt", Tier: admission.TierHigh})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Request(); r.Tier != admission.TierLow {
		t.Fatalf("named tenant bolt: tier %v, want its configured low", r.Tier)
	}
	p.Done(Outcome{})
	// Without keyed tenants everyone is anonymous.
	open, _ := New(Config{Admission: admission.Config{Concurrency: 1}})
	if name, _, ok := open.Identify("anything"); !ok || name != AnonymousTenant {
		t.Fatalf("no keyed tenants: %q %v", name, ok)
	}
	if _, err := New(Config{Admission: admission.Config{Concurrency: 1}, Tenants: []TenantConfig{{Name: "a"}, {Name: "a"}}}); err == nil || !strings.Contains(err.Error(), "tenants[1].name") {
		t.Fatalf("duplicate tenant: %v, want an error naming tenants[1].name", err)
	}
	if _, err := New(Config{Admission: admission.Config{Concurrency: 1}, Tenants: []TenantConfig{{Name: "a", APIKeysSHA256: []string{"xyz"}}}}); err == nil || !strings.Contains(err.Error(), "tenants[0].api_keys_sha256[0]") {
		t.Fatalf("bad digest: %v, want an error naming the field", err)
	}
}

// step is one scripted call: at is its offset, hold how long it runs once
// granted.
type step struct {
	at      time.Duration
	class   string
	attempt int
	timeout time.Duration
	model   string
	hold    time.Duration
}

// The blocking shell and the core run the same stages: one script gives the
// same verdicts, reasons and books through both.
func TestChainAndCoreAgree(t *testing.T) {
	script := []step{
		{0, "interactive", 0, 10 * time.Second, "big", 2 * time.Second},
		{10 * time.Millisecond, "batch", 0, 10 * time.Second, "big", time.Second},
		{20 * time.Millisecond, "speculative", 0, 10 * time.Second, "big", time.Second},
		{30 * time.Millisecond, "interactive", 1, 10 * time.Second, "big", time.Second}, // retry: no budget
		{40 * time.Millisecond, "interactive", 0, 500 * time.Millisecond, "big", time.Second},
		{50 * time.Millisecond, "interactive", 0, 10 * time.Second, "unpriced", time.Second},
		{60 * time.Millisecond, "batch", 0, 10 * time.Second, "small", time.Second},
	}
	cfg := func(l *spend.Limiter) Config {
		return Config{
			Admission: admission.Config{Concurrency: 1, MaxQueue: 2, InitialServiceTime: time.Second},
			Retries:   tightRetries,
			Spend:     l,
		}
	}
	// The core, in virtual time: an event loop of arrivals and ends.
	coreVerdicts := func() ([]string, spend.Snapshot) {
		l := limiter(t, prices+"unknown_model: reject\n")
		c, err := NewCore(cfg(l))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(script))
		type end struct {
			at time.Duration
			tk *Ticket
			i  int
		}
		var ends []end
		run := func(now time.Duration, tk *Ticket) {
			i := tk.Owner.(int)
			out[i] = "ok"
			ends = append(ends, end{now + script[i].hold, tk, i})
		}
		collect := func(now time.Duration) {
			for _, tk := range c.Events() {
				if tk.Granted() {
					run(now, tk)
				} else {
					out[tk.Owner.(int)] = tk.Rejection().Reason.String()
				}
			}
		}
		finishUntil := func(now time.Duration) {
			for len(ends) > 0 {
				first := 0
				for j := range ends {
					if ends[j].at < ends[first].at {
						first = j
					}
				}
				if ends[first].at > now {
					return
				}
				e := ends[first]
				ends = append(ends[:first], ends[first+1:]...)
				if err := c.Release(t0.Add(e.at), e.tk, Outcome{Result: admission.Success, ServiceTime: script[e.i].hold}); err != nil {
					t.Fatal(err)
				}
				collect(e.at)
			}
		}
		for i, s := range script {
			finishUntil(s.at)
			tk := &Ticket{Owner: i}
			d, err := c.Arrive(t0.Add(s.at), Request{Class: s.class, Attempt: s.attempt, Model: s.model, Deadline: t0.Add(s.at + s.timeout)}, tk, true)
			switch {
			case err != nil:
				out[i] = "error"
			case d.Verdict == admission.Granted:
				run(s.at, tk)
			case d.Verdict == admission.Rejected:
				out[i] = d.Rejection.Reason.String()
			}
			collect(s.at)
		}
		finishUntil(time.Hour)
		return out, l.Snapshot(t0.Add(time.Hour))
	}
	want, wantBooks := coreVerdicts()
	t.Logf("verdicts: %v", want)

	// The chain, in real time under synctest's fake clock.
	var got []string
	var gotBooks spend.Snapshot
	synctest.Test(t, func(t *testing.T) {
		l := limiter(t, prices+"unknown_model: reject\n")
		ch, err := New(cfg(l))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ch.now = time.Now
		got = make([]string, len(script))
		for i, s := range script {
			time.Sleep(time.Until(start.Add(s.at)))
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
				defer cancel()
				p, err := ch.Acquire(ctx, Request{Class: s.class, Attempt: s.attempt, Model: s.model})
				var rej *admission.Rejection
				switch {
				case errors.As(err, &rej):
					got[i] = rej.Reason.String()
					return
				case err != nil:
					got[i] = "error"
					return
				}
				got[i] = "ok"
				time.Sleep(s.hold)
				p.Done(Outcome{Result: admission.Success, ServiceTime: s.hold})
			}()
			synctest.Wait() // each arrival decided before the next
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		gotBooks = l.Snapshot(start.Add(time.Hour))
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("verdicts:\n chain %v\n core  %v", got, want)
	}
	// The script must exercise every stage's refusal and a queue, or it
	// would prove little.
	for _, v := range []string{"ok", "retry_budget", "queue_wait", "error"} {
		if !strings.Contains(fmt.Sprint(want), v) {
			t.Fatalf("the script's verdicts %v never show %s", want, v)
		}
	}
	if gotBooks.Global.SpentUSD != wantBooks.Global.SpentUSD || gotBooks.Reservations != 0 || wantBooks.Reservations != 0 {
		t.Fatalf("books: chain $%v (%d open), core $%v (%d open)", gotBooks.Global.SpentUSD, gotBooks.Reservations, wantBooks.Global.SpentUSD, wantBooks.Reservations)
	}
}

func TestTenantsHeldToTheirClasses(t *testing.T) {
	ch, err := New(Config{Admission: admission.Config{Concurrency: 4}, Tenants: []TenantConfig{
		{Name: "nightly", Classes: []string{"batch", "speculative"}},
		{Name: "strict", Classes: []string{"batch"}, DisallowedClass: "refuse"},
		{Name: "web"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, asked, want string
		refused             bool
	}{
		{"nightly", "interactive", "batch", false},
		{"nightly", "batch", "batch", false},
		{"nightly", "speculative", "speculative", false},
		{"strict", "interactive", "", true},
		{"strict", "batch", "batch", false},
		{"web", "interactive", "interactive", false},
	} {
		p, err := ch.Acquire(context.Background(), Request{Tenant: tc.tenant, Class: tc.asked})
		var ce *ClassError
		switch {
		case tc.refused:
			if !errors.As(err, &ce) || ce.Class != tc.asked {
				t.Errorf("%s asking %s: %v, want a ClassError", tc.tenant, tc.asked, err)
			}
			continue
		case err != nil:
			t.Fatalf("%s asking %s: %v", tc.tenant, tc.asked, err)
		}
		if r := p.Request(); r.Class != tc.want || r.AskedClass != tc.asked {
			t.Errorf("%s asking %s: class %s (asked %s), want %s", tc.tenant, tc.asked, r.Class, r.AskedClass, tc.want)
		}
		p.Done(Outcome{})
	}
	if _, err := New(Config{Admission: admission.Config{Concurrency: 1}, Tenants: []TenantConfig{{Name: "a", Classes: []string{"vip"}}}}); err == nil || !strings.Contains(err.Error(), "tenants[0].classes[0]") {
		t.Fatalf("unknown class: %v", err)
	}
}

// TestAcquireTakesTheEarlierDeadline: the chain judges a call by the
// deadline the gate will (admission.CallDeadline), and the permit's
// Request carries it back to the shell — a later Request.Deadline does not
// outlive the context's.
func TestAcquireTakesTheEarlierDeadline(t *testing.T) {
	ch, err := New(Config{Admission: admission.Config{Concurrency: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	want, _ := ctx.Deadline()
	p, err := ch.Acquire(ctx, Request{Deadline: want.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Drop()
	if got := p.Request().Deadline; !got.Equal(want) {
		t.Fatalf("permit's deadline %v, want the context's %v", got, want)
	}
}

// TestRetryConfigValidateNamesTheKey: the retries section validates
// itself, naming the key inside the section, and fills the shell's own
// retries' defaults.
func TestRetryConfigValidateNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		cfg  RetryConfig
		want string
	}{
		{RetryConfig{UpstreamAttempts: MaxUpstreamAttempts + 1}, "upstream_attempts: 11 is out of range, want 0..10"},
		{RetryConfig{UpstreamAttempts: -1}, "upstream_attempts: -1 is out of range, want 0..10"},
		{RetryConfig{UpstreamBackoff: 2 * time.Minute}, "upstream_backoff: 2m0s is out of range, want 0s..1m0s"},
		{RetryConfig{Budget: retrybudget.Config{Ratio: -1}}, "budget.ratio"},
		{RetryConfig{PerTenant: retrybudget.Config{MaxTokens: -1}}, "per_tenant.max_tokens"},
		{RetryConfig{Recognise: RecogniseConfig{Window: -1}}, "recognise.window"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %s…", tc.cfg, err, tc.want)
		}
	}
	if err := (RetryConfig{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
	if a, b := (RetryConfig{}).Upstream(); a != DefaultUpstreamAttempts || b != DefaultUpstreamBackoff {
		t.Errorf("defaults: %d, %v", a, b)
	}
	if a, b := (RetryConfig{UpstreamAttempts: 1, UpstreamBackoff: time.Second}).Upstream(); a != 1 || b != time.Second {
		t.Errorf("set: %d, %v", a, b)
	}
}
