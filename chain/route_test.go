package chain

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/retrybudget"
)

// poolCfg is a pool of conc slots whose gate assumes svc per call until it
// has samples.
func poolCfg(name, deployment, model string, conc int, svc time.Duration) PoolConfig {
	return PoolConfig{Name: name, Deployment: deployment, Model: model, Learn: true,
		Admission: admission.Config{Concurrency: conc, MaxQueue: 16, InitialServiceTime: svc}}
}

// twoPools serves model m from deployment a (model m-a), then b (m-b),
// one slot each, a second per call.
func twoPools() *RoutingConfig {
	return &RoutingConfig{
		Pools:  []PoolConfig{poolCfg("a/m", "a", "m-a", 1, time.Second), poolCfg("b/m", "b", "m-b", 1, time.Second)},
		Routes: map[string][]string{"m": {"a/m", "b/m"}},
	}
}

func routeCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	if cfg.RefusalSpread == 0 {
		cfg.RefusalSpread = -1 // Retry-After as the stage or gate computed it
	}
	c, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func arriveAt(t *testing.T, c *Core, now time.Time, r Request) (Decision, *Ticket) {
	t.Helper()
	tk := new(Ticket)
	d, err := c.Arrive(now, r, tk, true)
	if err != nil {
		t.Fatalf("arrive %+v: %v", r, err)
	}
	return d, tk
}

// tokensAt is pool i's token bucket level at now.
func tokensAt(c *Core, i int, now time.Time) float64 {
	return c.stages.route.pools[i].tpm.Load().available(now)
}

// A call goes to the first pool of its route that can start it at once;
// only when none can does it wait, at the first whose estimate meets its
// deadline without serving it late (route order, not the least loaded);
// the call its estimate cannot serve by its deadline there goes to the
// next, with that pool's deployment and model. A queue at the first pool
// while the next idles would only make its callers wait — and leave them
// less of their budget for a provider that slows meanwhile.
func TestRouteFirstPoolThatMeetsTheDeadline(t *testing.T) {
	c := routeCore(t, Config{Routing: twoPools()})
	d, first := arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(10 * time.Second)})
	if r := first.Request(); d.Verdict != admission.Granted || r.Pool != 0 || r.Upstream != "a" || r.UpstreamModel != "m-a" || r.Model != "m" {
		t.Fatalf("first call: %v, pool %d %s/%s model %s; want granted at a/m-a", d.Verdict, r.Pool, r.Upstream, r.UpstreamModel, r.Model)
	}
	// a busy: it would wait 1s there, and b starts it at once.
	d, second := arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(10 * time.Second)})
	if r := second.Request(); d.Verdict != admission.Granted || r.Pool != 1 || r.Upstream != "b" || r.UpstreamModel != "m-b" || r.Model != "m" {
		t.Fatalf("second call: %v, pool %d %s/%s; want granted at b/m-b", d.Verdict, r.Pool, r.Upstream, r.UpstreamModel)
	}
	// Both busy: a wait of 1s and 1s of service meet 2.5s at a, the
	// first.
	d, third := arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(2500 * time.Millisecond)})
	if d.Verdict != admission.Queued || third.Request().Pool != 0 {
		t.Fatalf("third call: %v at pool %d, want queued at pool 0", d.Verdict, third.Request().Pool)
	}
	// a's estimate (2s of wait behind the third, due as soon; 1s of
	// service) misses 2.5s; b's (1s, 1s) meets it.
	d, fourth := arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(2500 * time.Millisecond)})
	if r := fourth.Request(); d.Verdict != admission.Queued || r.Pool != 1 || r.Upstream != "b" {
		t.Fatalf("fourth call: %v, pool %d %s; want queued at b", d.Verdict, r.Pool, r.Upstream)
	}
	if a, b := c.Pools()[0], c.Pools()[1]; a.InFlight() != 1 || a.Queued() != 1 || b.InFlight() != 1 || b.Queued() != 1 {
		t.Fatalf("pools: a %d in flight %d queued, b %d in flight %d queued; want 1 1 1 1", a.InFlight(), a.Queued(), b.InFlight(), b.Queued())
	}
	// Released, the call's service time is the pool's own.
	if err := c.Release(t0.Add(time.Second), second, Outcome{Result: admission.Success, ServiceTime: time.Second}); err != nil {
		t.Fatal(err)
	}
	if b := c.Pools()[1]; b.Stats(t0).ServiceSamples != 1 || c.Pools()[0].Stats(t0).ServiceSamples != 0 {
		t.Fatalf("release went to the wrong gate: samples a %d b %d", c.Pools()[0].Stats(t0).ServiceSamples, b.Stats(t0).ServiceSamples)
	}
}

// A call that would wait at the first pool for its tokens goes to the
// next pool that starts it at once, as one that would wait for a slot
// does.
func TestRouteSpillsPastAWaitForTokens(t *testing.T) {
	rc := twoPools()
	rc.Pools[0].TPM = 6000 // 100 tokens a second
	rc.Pools[0].Admission.Concurrency = 2
	c := routeCore(t, Config{Routing: rc})
	deadline := t0.Add(10 * time.Minute)
	req := Request{Model: "m", InputTokens: 3000, MaxOutputTokens: 3000, Deadline: deadline}
	if _, tk := arriveAt(t, c, t0, req); tk.Request().Pool != 0 {
		t.Fatalf("first call went to pool %d, want a (its tokens are there)", tk.Request().Pool)
	}
	// a has a slot free, and its tokens for the call in 20s: in time,
	// and not late.
	d, tk := arriveAt(t, c, t0, Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000, Deadline: deadline})
	if r := tk.Request(); d.Verdict != admission.Granted || r.Pool != 1 || !r.NotBefore.IsZero() {
		t.Fatalf("call that would wait for a's tokens: %v at pool %d, not before %v; want granted at b at once", d.Verdict, r.Pool, r.NotBefore)
	}
}

// A slow model's service times are its pool's: the fast model's pool
// estimates its wait from its own.
func TestRoutePoolsKeepTheirOwnServiceTimes(t *testing.T) {
	c := routeCore(t, Config{Routing: &RoutingConfig{
		Pools:  []PoolConfig{poolCfg("d/fast", "d", "fast", 1, time.Second), poolCfg("d/slow", "d", "slow", 1, time.Second)},
		Routes: map[string][]string{"fast": {"d/fast"}, "slow": {"d/slow"}},
	}})
	now := t0
	for range 20 {
		d, tk := arriveAt(t, c, now, Request{Model: "slow"})
		if d.Verdict != admission.Granted || tk.Request().Pool != 1 {
			t.Fatalf("slow call: %v at pool %d", d.Verdict, tk.Request().Pool)
		}
		now = now.Add(10 * time.Second)
		if err := c.Release(now, tk, Outcome{Result: admission.Success, ServiceTime: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if p95 := c.Pools()[1].Stats(now).ServiceP95; p95 < 9*time.Second {
		t.Fatalf("the slow pool's p95 is %v, want about 10s", p95)
	}
	if d, _ := arriveAt(t, c, now, Request{Model: "fast"}); d.Verdict != admission.Granted {
		t.Fatalf("fast call: %v", d.Verdict)
	}
	e, err := c.Estimate(now, Request{Model: "fast", Deadline: now.Add(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Request.Pool != 0 || e.EstimatedWait != time.Second || e.ServiceP95 != time.Second || e.Verdict != admission.Queued {
		t.Fatalf("fast call behind one: pool %d %v wait %v p95 %v; want pool 0 queued, 1s and 1s (not the slow model's 10s)",
			e.Request.Pool, e.Verdict, e.EstimatedWait, e.ServiceP95)
	}
}

// A model no route names is an UnknownModelError naming it; a model served
// only on another API is one naming the API; a call naming its API goes to
// a pool of that API whatever the route's order.
func TestRouteUnknownModelAndFlavour(t *testing.T) {
	ant := poolCfg("ant/gpt", "ant", "gpt", 4, time.Second)
	ant.Flavour = "anthropic"
	oai := poolCfg("oai/gpt", "oai", "gpt", 4, time.Second)
	oai.Flavour = "openai"
	claude := poolCfg("ant/claude", "ant", "claude", 4, time.Second)
	claude.Flavour = "anthropic"
	c := routeCore(t, Config{Routing: &RoutingConfig{
		Pools:  []PoolConfig{ant, oai, claude},
		Routes: map[string][]string{"gpt": {"ant/gpt", "oai/gpt"}, "claude": {"ant/claude"}},
	}})
	for _, tc := range []struct {
		model, flavour, wantFlavour string
	}{{"nope", "", ""}, {"nope", "openai", ""}, {"claude", "openai", "openai"}, {"", "google", "google"}} {
		_, err := c.Arrive(t0, Request{Model: tc.model, Flavour: tc.flavour}, new(Ticket), true)
		var um *UnknownModelError
		if !errors.As(err, &um) || um.Model != tc.model || um.Flavour != tc.wantFlavour {
			t.Fatalf("model %q on %q: %v, want an UnknownModelError{%q, %q}", tc.model, tc.flavour, err, tc.model, tc.wantFlavour)
		}
		if tc.model != "" && !strings.Contains(err.Error(), tc.model) || !strings.Contains(err.Error(), tc.wantFlavour) {
			t.Fatalf("the error %q does not name the model %q and API %q", err, tc.model, tc.wantFlavour)
		}
		if _, err := c.Estimate(t0, Request{Model: tc.model, Flavour: tc.flavour}); !errors.As(err, &um) {
			t.Fatalf("estimate of model %q on %q: %v, want an UnknownModelError", tc.model, tc.flavour, err)
		}
	}
	if c.Pools()[0].InFlight()+c.Pools()[1].InFlight()+c.Pools()[2].InFlight() != 0 {
		t.Fatal("an unknown model took a slot")
	}
	for _, tc := range []struct {
		model, flavour string
		pool           int
	}{{"gpt", "openai", 1}, {"gpt", "anthropic", 0}, {"gpt", "", 0}, {"claude", "anthropic", 2},
		{"", "openai", 1}, {"", "anthropic", 0}} { // no model (a listing): the first pool of the API
		d, tk := arriveAt(t, c, t0, Request{Model: tc.model, Flavour: tc.flavour})
		if d.Verdict != admission.Granted || tk.Request().Pool != tc.pool {
			t.Fatalf("model %q on %q: %v at pool %d, want granted at %d", tc.model, tc.flavour, d.Verdict, tk.Request().Pool, tc.pool)
		}
	}
}

// tpmPool is one pool of 6000 tokens a minute (100/s) serving model m.
func tpmPool(conc int) *RoutingConfig {
	p := poolCfg("d/m", "d", "m", conc, time.Second)
	p.TPM = 6000
	return &RoutingConfig{Pools: []PoolConfig{p}, Routes: map[string][]string{"m": {"d/m"}}}
}

// A pool's tokens per minute: a call is charged its prompt and max_tokens;
// once the bucket is spent, a call waits for the deficit at the refill rate
// (NotBefore), queued outside the gate until Advance presents it; a call
// whose wait for tokens passes its deadline is refused at once, told when
// the tokens are there; a paced call withdrawn gives its tokens back.
func TestRouteTokensPerMinutePace(t *testing.T) {
	c := routeCore(t, Config{Routing: tpmPool(100)})
	req := Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000} // 2000 tokens, 20s of refill
	for i := range 3 {
		d, tk := arriveAt(t, c, t0, req)
		if d.Verdict != admission.Granted || !tk.Request().NotBefore.IsZero() {
			t.Fatalf("call %d within the bucket: %v, NotBefore %v", i, d.Verdict, tk.Request().NotBefore)
		}
	}
	if got := tokensAt(c, 0, t0); got != 0 {
		t.Fatalf("after three calls of 2000: %v tokens, want 0", got)
	}
	paced := req
	paced.Deadline = t0.Add(time.Minute)
	// The estimate says what Arrive does: queued, for 20s.
	e, err := c.Estimate(t0, paced)
	if err != nil {
		t.Fatal(err)
	}
	if e.Verdict != admission.Queued || e.EstimatedWait != 20*time.Second || !e.Request.NotBefore.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("estimate of a call past the bucket: %v, wait %v, NotBefore %v; want queued, 20s", e.Verdict, e.EstimatedWait, e.Request.NotBefore.Sub(t0))
	}
	// Not willing to wait, it is refused, and takes nothing.
	nd, err := c.Arrive(t0, paced, new(Ticket), false)
	if err != nil {
		t.Fatal(err)
	}
	if nd.Verdict != admission.Rejected || nd.Rejection.Reason != admission.ReasonQueueWait || nd.Rejection.RetryAfter != 20*time.Second {
		t.Fatalf("a call past the bucket that may not wait: %v %+v; want refused queue_wait, retry after 20s", nd.Verdict, nd.Rejection)
	}
	if _, ok := c.NextPaced(); ok || tokensAt(c, 0, t0) != 0 {
		t.Fatal("a call that may not wait was paced or kept its tokens")
	}
	d, tk := arriveAt(t, c, t0, paced)
	if d.Verdict != admission.Queued || !tk.Request().NotBefore.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("call past the bucket: %v, NotBefore %v; want queued until t0+20s", d.Verdict, tk.Request().NotBefore.Sub(t0))
	}
	if at, ok := c.NextPaced(); !ok || !at.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("NextPaced = %v, %v; want t0+20s", at.Sub(t0), ok)
	}
	if c.Pools()[0].InFlight() != 3 || c.Pools()[0].Queued() != 0 {
		t.Fatal("a paced call reached its gate before its tokens")
	}

	// Its tokens would come 40s from now: past a 10s deadline.
	late := req
	late.Deadline = t0.Add(10 * time.Second)
	d, _ = arriveAt(t, c, t0, late)
	if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueWait || d.Rejection.RetryAfter != 40*time.Second {
		t.Fatalf("call whose tokens come after its deadline: %+v %+v, want queue_wait, retry after 40s", d, d.Rejection)
	}
	if got := tokensAt(c, 0, t0); got != -2000 {
		t.Fatalf("a refused call took tokens: level %v, want -2000", got)
	}

	if err := c.Advance(t0.Add(19 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 0 {
		t.Fatalf("Advance before NotBefore decided %d tickets", len(ev))
	}
	if err := c.Advance(t0.Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 1 || ev[0] != tk || !tk.Granted() {
		t.Fatalf("Advance at NotBefore: events %v, granted %v; want the paced ticket granted", ev, tk.Granted())
	}
	if _, ok := c.NextPaced(); ok || c.Pools()[0].InFlight() != 4 {
		t.Fatalf("after Advance: still paced %v, in flight %d", ok, c.Pools()[0].InFlight())
	}

	// Withdrawn while paced, a call gives its tokens back: the next one
	// waits 20s, not 40s.
	now := t0.Add(20 * time.Second)
	_, gone := arriveAt(t, c, now, paced)
	if !gone.Request().NotBefore.Equal(now.Add(20 * time.Second)) {
		t.Fatalf("NotBefore %v, want now+20s", gone.Request().NotBefore.Sub(now))
	}
	if !c.Cancel(now, gone, 0) {
		t.Fatal("Cancel of a paced ticket said it was not queued")
	}
	if _, ok := c.NextPaced(); ok {
		t.Fatal("a cancelled ticket is still paced")
	}
	if got := tokensAt(c, 0, now); got != 0 {
		t.Fatalf("after the cancel: %v tokens, want 0", got)
	}
	_, next := arriveAt(t, c, now, paced)
	if !next.Request().NotBefore.Equal(now.Add(20 * time.Second)) {
		t.Fatalf("after a cancel, the next call's NotBefore %v, want now+20s", next.Request().NotBefore.Sub(now))
	}
}

// A call its gate refuses is refused at once, though it would also have
// waited for tokens: it takes none and is not paced (it used to be paced
// until its tokens came, to be refused by its gate then — long after its
// deadline — holding tokens every other call waited behind).
func TestRouteRefusedByItsGateTakesNoTokens(t *testing.T) {
	c := routeCore(t, Config{Routing: tpmPool(1)})
	if d, _ := arriveAt(t, c, t0, Request{Model: "m", InputTokens: 5000, MaxOutputTokens: 1000}); d.Verdict != admission.Granted {
		t.Fatalf("first call: %v", d.Verdict)
	}
	// One slot, busy: 1s of wait and 1s of service miss a 1.5s deadline.
	d, _ := arriveAt(t, c, t0, Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000, Deadline: t0.Add(1500 * time.Millisecond)})
	if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueWait {
		t.Fatalf("a call its gate cannot serve in time: %v %+v, want refused queue_wait", d.Verdict, d.Rejection)
	}
	if _, ok := c.NextPaced(); ok {
		t.Fatal("a call its gate refuses is paced")
	}
	if got := tokensAt(c, 0, t0); got != 0 {
		t.Fatalf("a refused call took tokens: level %v, want 0", got)
	}
}

// Requests per minute pace like tokens: a call each 30s at 2 a minute.
func TestRouteRequestsPerMinutePace(t *testing.T) {
	p := poolCfg("d/m", "d", "m", 10, time.Second)
	p.RPM = 2
	c := routeCore(t, Config{Routing: &RoutingConfig{Pools: []PoolConfig{p}, Routes: map[string][]string{"m": {"d/m"}}}})
	for range 2 {
		if d, tk := arriveAt(t, c, t0, Request{Model: "m"}); d.Verdict != admission.Granted || !tk.Request().NotBefore.IsZero() {
			t.Fatalf("call within the rpm: %v, NotBefore %v", d.Verdict, tk.Request().NotBefore)
		}
	}
	d, tk := arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(time.Minute)})
	if d.Verdict != admission.Queued || !tk.Request().NotBefore.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("third call: %v, NotBefore %v; want paced to t0+30s", d.Verdict, tk.Request().NotBefore.Sub(t0))
	}
	d, _ = arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(20 * time.Second)})
	if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueWait || d.Rejection.RetryAfter != time.Minute {
		t.Fatalf("fourth call, 20s deadline: %v %+v; want queue_wait, retry after 60s", d.Verdict, d.Rejection)
	}
	if err := c.Advance(t0.Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if ev := c.Events(); len(ev) != 1 || !ev[0].Granted() {
		t.Fatalf("Advance at NotBefore: %v", ev)
	}
}

// The tokens charged are reconciled with the usage reported: the prompt as
// counted plus max_tokens (what the provider charged); without max_tokens
// the output as produced, and the pool's mean output is what the next such
// call is charged. A failed call gives its tokens back.
func TestRouteTokensReconciledWithUsage(t *testing.T) {
	c := routeCore(t, Config{Routing: tpmPool(10)})
	step := func(what string, want float64) {
		t.Helper()
		if got := tokensAt(c, 0, t0); got != want {
			t.Fatalf("%s: %v tokens, want %v", what, got, want)
		}
	}
	release := func(tk *Ticket, o Outcome) {
		t.Helper()
		if err := c.Release(t0, tk, o); err != nil {
			t.Fatal(err)
		}
	}
	_, tk := arriveAt(t, c, t0, Request{Model: "m", InputTokens: 100})
	step("no max_tokens, no output seen: charged 100 + the default output", 6000-100-1024)
	release(tk, Outcome{Result: admission.Success, Usage: contract.Usage{Input: 100, Output: 300}, UsageKnown: true})
	step("reconciled with 100 + 300", 5600)
	_, quiet := arriveAt(t, c, t0, Request{Model: "m", InputTokens: 100})
	step("no max_tokens: charged 100 + the mean output seen (300)", 5200)
	_, tk = arriveAt(t, c, t0, Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000})
	step("charged 1000 + 1000", 3200)
	release(tk, Outcome{Result: admission.Success, Usage: contract.Usage{Input: 500, Output: 200}, UsageKnown: true})
	step("reconciled with 500 counted + 1000 max_tokens", 3700)
	_, tk = arriveAt(t, c, t0, Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000})
	release(tk, Outcome{Result: admission.Failure})
	step("a failed call gives its 2000 back", 3700)
	_, tk = arriveAt(t, c, t0, Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000})
	release(tk, Outcome{Result: admission.Success})
	step("without usage, the charge stands", 1700)
	release(quiet, Outcome{Result: admission.Unused})
	step("an unused call gives its 400 back", 2100)
}

// degradeConfig: model big (one slot) degrades to small (four) for batch
// calls, or calls that allow it.
func degradeConfig() *RoutingConfig {
	return &RoutingConfig{
		Pools:          []PoolConfig{poolCfg("d/big", "d", "big-v1", 1, time.Second), poolCfg("d/small", "d", "small-v1", 4, time.Second)},
		Routes:         map[string][]string{"big": {"d/big"}, "small": {"d/small"}},
		Ladder:         map[string]string{"big": "small"},
		DegradeClasses: []string{admission.ClassBatch},
	}
}

// A batch call big's pool cannot serve in time goes one rung down; an
// interactive one does not, unless it allows it; a call big can serve in
// time is not degraded.
func TestRouteDegradeUnderLoad(t *testing.T) {
	c := routeCore(t, Config{Routing: degradeConfig()})
	if d, _ := arriveAt(t, c, t0, Request{Model: "big"}); d.Verdict != admission.Granted {
		t.Fatalf("filling big: %v", d.Verdict)
	}
	tight := t0.Add(1500 * time.Millisecond) // big: 1s of wait + 1s of service
	for _, tc := range []struct {
		name     string
		req      Request
		verdict  admission.Verdict
		degraded bool
	}{
		{"batch", Request{Model: "big", Class: admission.ClassBatch, Deadline: tight}, admission.Granted, true},
		{"interactive", Request{Model: "big", Class: admission.ClassInteractive, Deadline: tight}, admission.Rejected, false},
		{"interactive allowing it", Request{Model: "big", Class: admission.ClassInteractive, AllowDegrade: true, Deadline: tight}, admission.Granted, true},
		{"batch, big in time", Request{Model: "big", Class: admission.ClassBatch, Deadline: t0.Add(10 * time.Second)}, admission.Queued, false},
	} {
		d, tk := arriveAt(t, c, t0, tc.req)
		r := tk.Request()
		if d.Verdict != tc.verdict || r.Degraded != tc.degraded {
			t.Fatalf("%s: %v, degraded %v; want %v, %v", tc.name, d.Verdict, r.Degraded, tc.verdict, tc.degraded)
		}
		if tc.degraded && (r.Model != "small" || r.AskedModel != "big" || r.DegradedBy != DegradedByLoad || r.Pool != 1 || r.UpstreamModel != "small-v1") {
			t.Fatalf("%s: model %s asked %s by %q at pool %d (%s); want small, asked big, by load, pool 1 small-v1",
				tc.name, r.Model, r.AskedModel, r.DegradedBy, r.Pool, r.UpstreamModel)
		}
		if !tc.degraded && (r.Model != "big" || r.AskedModel != "" || r.DegradedBy != "" || r.Pool != 0) {
			t.Fatalf("%s: model %s asked %q by %q at pool %d; want big at pool 0", tc.name, r.Model, r.AskedModel, r.DegradedBy, r.Pool)
		}
	}
}

// A call the spend stage degraded is not degraded again under load, though
// its rung has one below it that would serve it in time: the degrade stage,
// before spend, judged the model asked (big, which has room), and the
// route stage only picks the pool of the model spend leaves. (Tiny has no
// price here: the call for small sent to tiny is priced as small, see
// TestDegradedUnderLoadToAnUnpricedRung.)
func TestRouteSpendDegradedNotDegradedAgain(t *testing.T) {
	c := routeCore(t, Config{
		Spend: limiter(t, unitPrices), // ladder big → small
		Routing: &RoutingConfig{
			Pools: []PoolConfig{poolCfg("d/unit", "d", "unit", 8, time.Second), poolCfg("d/big", "d", "big", 4, time.Second),
				poolCfg("d/small", "d", "small", 1, time.Second), poolCfg("d/tiny", "d", "tiny", 4, time.Second)},
			Routes:         map[string][]string{"unit": {"d/unit"}, "big": {"d/big"}, "small": {"d/small"}, "tiny": {"d/tiny"}},
			Ladder:         map[string]string{"big": "small", "small": "tiny"},
			DegradeClasses: []string{admission.ClassBatch},
		},
	})
	now := t0.Add(10 * time.Second)
	spendAt(t, c, now, "loader", 9.2) // past the ceiling's degrade stage
	d, tk := arriveAt(t, c, now, Request{Tenant: "other", Model: "small", InputTokens: 10, MaxOutputTokens: 1})
	if d.Verdict != admission.Granted || tk.Request().Pool != 2 {
		t.Fatalf("filling small: %v at pool %d", d.Verdict, tk.Request().Pool)
	}
	tight := now.Add(1500 * time.Millisecond)
	// A batch call for small, small busy: degraded under load to tiny.
	_, tk = arriveAt(t, c, now, Request{Tenant: "other", Class: admission.ClassBatch, Model: "small", InputTokens: 10, MaxOutputTokens: 1, Deadline: tight})
	if r := tk.Request(); r.Model != "tiny" || r.DegradedBy != DegradedByLoad || r.Pool != 3 {
		t.Fatalf("batch call for small: model %s by %q at pool %d, want tiny by load at 3", r.Model, r.DegradedBy, r.Pool)
	}
	// A batch call for big, degraded by spend to small: stays there.
	_, tk = arriveAt(t, c, now, Request{Tenant: "other", Class: admission.ClassBatch, Model: "big", InputTokens: 10, MaxOutputTokens: 1, Deadline: tight})
	if r := tk.Request(); r.Model != "small" || r.AskedModel != "big" || r.DegradedBy != DegradedBySpend || r.Pool != 2 {
		t.Fatalf("batch call for big under spend: model %s asked %s by %q at pool %d; want small, asked big, by spend, at 2",
			r.Model, r.AskedModel, r.DegradedBy, r.Pool)
	}
}

// healthCore: model m on pools a then b, eight slots each; probes every
// 1s, doubling to 4s.
func healthCore(t *testing.T) *Core {
	rc := twoPools()
	rc.Pools[0].Admission.Concurrency, rc.Pools[1].Admission.Concurrency = 8, 8
	rc.ProbeInterval, rc.MaxProbeInterval = time.Second, 4*time.Second
	return routeCore(t, Config{Routing: rc})
}

// routeTo sends a call to m at now and returns its ticket, granted.
func routeTo(t *testing.T, c *Core, now time.Time) *Ticket {
	t.Helper()
	d, tk := arriveAt(t, c, now, Request{Model: "m", Deadline: now.Add(10 * time.Second)})
	if d.Verdict != admission.Granted {
		t.Fatalf("call at t0+%v: %v", now.Sub(t0), d.Verdict)
	}
	return tk
}

func releaseAt(t *testing.T, c *Core, now time.Time, tk *Ticket, o Outcome) {
	t.Helper()
	if o.ServiceTime == 0 {
		o.ServiceTime = time.Millisecond
	}
	if err := c.Release(now, tk, o); err != nil {
		t.Fatal(err)
	}
}

// An unreachable deployment is down at once: calls go to the next pool,
// but one — the probe — per interval, which doubles on each failed probe
// up to the bound; a probe that succeeds brings the pool back.
func TestRouteHealthDownAndProbe(t *testing.T) {
	c := healthCore(t)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	poolAt := func(now time.Time, want int) *Ticket {
		t.Helper()
		tk := routeTo(t, c, now)
		if tk.Request().Pool != want {
			t.Fatalf("call at t0+%v went to pool %d, want %d", now.Sub(t0), tk.Request().Pool, want)
		}
		return tk
	}
	releaseAt(t, c, t0, poolAt(t0, 0), Outcome{Result: admission.Failure, Unreachable: true})
	if !c.stages.route.pools[0].health.isDown() {
		t.Fatal("an unreachable pool is not down")
	}
	poolAt(t0, 1)
	poolAt(ms(999), 1)
	// Each failed probe doubles the interval: 1s, 2s, 4s, 4s.
	probeAt := 1000
	for _, next := range []int{2000, 4000, 4000} {
		probe := poolAt(ms(probeAt), 0)
		poolAt(ms(probeAt), 1) // one probe at a time
		releaseAt(t, c, ms(probeAt), probe, Outcome{Result: admission.Failure})
		poolAt(ms(probeAt+next-1), 1)
		probeAt += next
	}
	probe := poolAt(ms(probeAt), 0)
	releaseAt(t, c, ms(probeAt), probe, Outcome{Result: admission.Success})
	if c.stages.route.pools[0].health.isDown() {
		t.Fatal("a pool whose probe succeeded is still down")
	}
	poolAt(ms(probeAt), 0)
	poolAt(ms(probeAt), 0)
}

// A probe that says nothing of the deployment (the caller left) gives the
// probe back: the next call is the probe.
func TestRouteHealthProbeGivenBack(t *testing.T) {
	c := healthCore(t)
	releaseAt(t, c, t0, routeTo(t, c, t0), Outcome{Result: admission.Failure, Unreachable: true})
	at := t0.Add(time.Second)
	probe := routeTo(t, c, at)
	if probe.Request().Pool != 0 {
		t.Fatal("no probe after the interval")
	}
	releaseAt(t, c, at, probe, Outcome{Result: admission.Canceled})
	if tk := routeTo(t, c, at); tk.Request().Pool != 0 {
		t.Fatal("a cancelled probe kept the pool's probe: the next call went elsewhere")
	}
}

// Three failures in a row take a pool down; a success between them resets
// the count; a 429 is no failure of the deployment.
func TestRouteHealthFailuresInARow(t *testing.T) {
	fail := Outcome{Result: admission.Failure}
	for _, tc := range []struct {
		name     string
		outcomes []Outcome
		down     bool
	}{
		{"three failures", []Outcome{fail, fail, fail}, true},
		{"two failures", []Outcome{fail, fail}, false},
		{"a success between", []Outcome{fail, fail, {Result: admission.Success}, fail, fail}, false},
		{"429s", []Outcome{{Result: admission.Failure, RateLimited: true}, {Result: admission.Failure, RateLimited: true},
			{Result: admission.Failure, RateLimited: true}, {Result: admission.Failure, RateLimited: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthCore(t)
			for _, o := range tc.outcomes {
				tk := routeTo(t, c, t0)
				if tk.Request().Pool != 0 {
					t.Fatal("a call went past a pool that is up")
				}
				releaseAt(t, c, t0, tk, o)
			}
			next := routeTo(t, c, t0).Request().Pool
			if down := c.stages.route.pools[0].health.isDown(); down != tc.down || (next == 1) != tc.down {
				t.Fatalf("down %v, next call at pool %d; want down %v", down, next, tc.down)
			}
		})
	}
}

// failoverChain is a Chain over twoPools with retries as given.
func failoverChain(t *testing.T, retries RetryConfig) *Chain {
	t.Helper()
	c, err := New(Config{Routing: twoPools(), Retries: retries, RefusalSpread: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func inFlight(c *Chain, i int) int { return c.Pools()[i].Gate.Stats().InFlight }

// Failover moves an admitted call to the next pool: the first pool's slot
// is given back, the failure booked with its health; a pool tried is not
// tried again.
func TestFailoverMovesToTheNextPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		ctx := context.Background()
		p, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if r := p.Request(); r.Upstream != "a" || inFlight(c, 0) != 1 {
			t.Fatalf("first attempt at %s, a has %d in flight", r.Upstream, inFlight(c, 0))
		}
		if !p.Failover(ctx, Outcome{Result: admission.Failure, Unreachable: true}) {
			t.Fatal("no failover with b free")
		}
		if r := p.Request(); r.Upstream != "b" || r.UpstreamModel != "m-b" || r.Pool != 1 {
			t.Fatalf("after failover: %s/%s pool %d, want b/m-b pool 1", r.Upstream, r.UpstreamModel, r.Pool)
		}
		if inFlight(c, 0) != 0 || inFlight(c, 1) != 1 {
			t.Fatalf("in flight a %d, b %d; want 0, 1", inFlight(c, 0), inFlight(c, 1))
		}
		if !c.PoolState(0).Down {
			t.Fatal("the unreachable pool a is not down after the failover")
		}
		// a was tried: nowhere to go.
		if p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatalf("failover went back to a tried pool (%s)", p.Request().Upstream)
		}
		if p.Request().Upstream != "b" || inFlight(c, 1) != 1 {
			t.Fatal("a failover that did not happen moved the call")
		}
		if err := p.Done(Outcome{Result: admission.Success}); err != nil {
			t.Fatal(err)
		}
		if inFlight(c, 0)+inFlight(c, 1) != 0 {
			t.Fatal("Done after a failover left a slot taken")
		}
	})
}

// A failover spends a token of the global retry budget, and there is none
// without one.
func TestFailoverTakesARetryToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rich := retrybudget.Config{Ratio: 1, MinPerSecond: 1e-9, MaxTokens: 1} // a first attempt earns a token
		c := failoverChain(t, RetryConfig{Budget: rich, PerTenant: rich})
		ctx := context.Background()
		p, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatal("no failover with a token in the budget")
		}
		if bal, _ := c.RetryBalance(time.Now()); bal >= 1 {
			t.Fatalf("the failover took no token: balance %v", bal)
		}
		p.Drop()

		c = failoverChain(t, tightRetries) // a first attempt earns a tenth
		p, err = c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatal("failover with an empty retry budget")
		}
		if p.Request().Upstream != "a" || inFlight(c, 0) != 1 || inFlight(c, 1) != 0 {
			t.Fatal("a refused failover moved the call")
		}
		p.Drop()
	})
}

// No failover to a pool that cannot serve the call by its deadline.
func TestFailoverNotPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		ctx := context.Background()
		dl := time.Now().Add(1500 * time.Millisecond)
		p, err := c.Acquire(ctx, Request{Model: "m", Deadline: dl})
		if err != nil {
			t.Fatal(err)
		}
		q, err := c.Acquire(ctx, Request{Model: "m", Deadline: dl})
		if err != nil {
			t.Fatal(err)
		}
		if p.Request().Upstream != "a" || q.Request().Upstream != "b" {
			t.Fatalf("calls at %s and %s, want a and b", p.Request().Upstream, q.Request().Upstream)
		}
		if p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatal("failover to b, busy, whose estimate (1s wait + 1s) misses the 1.5s deadline")
		}
		if p.Request().Upstream != "a" || inFlight(c, 0) != 1 {
			t.Fatal("a refused failover moved the call or freed its slot")
		}
		q.Drop()
		if !p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatal("no failover to b once free")
		}
		p.Drop()
	})
}

// A failover to a pool whose tokens are spent waits for them.
func TestFailoverWaitsForTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rc := twoPools()
		rc.Pools[1].TPM = 6000
		rc.Pools[1].Admission.Concurrency = 8
		c, err := New(Config{Routing: rc, Retries: RetryConfig{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000, Deadline: time.Now().Add(time.Minute)}
		p, err := c.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		tight := req
		tight.Deadline = time.Now().Add(1500 * time.Millisecond)
		for range 3 { // a busy: these go to b and spend its 6000
			q, err := c.Acquire(ctx, tight)
			if err != nil || q.Request().Pool != 1 {
				t.Fatalf("filler: %v", err)
			}
		}
		start := time.Now()
		if !p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatal("no failover")
		}
		if waited := time.Since(start); waited != 20*time.Second {
			t.Fatalf("failover waited %v for 2000 tokens at 100/s, want 20s", waited)
		}
		p.Drop()
	})
}

// Acquire waits until a paced call's NotBefore; a caller who leaves while
// it waits gives its tokens back.
func TestAcquirePacesForTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(Config{Routing: tpmPool(8)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000}
		for range 3 {
			if _, err := c.Acquire(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		p, err := c.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 20*time.Second || !p.Request().NotBefore.Equal(start.Add(20*time.Second)) {
			t.Fatalf("Acquire past the bucket waited %v (NotBefore %v), want 20s", waited, p.Request().NotBefore.Sub(start))
		}
		if s := c.PoolState(0); !s.TokensKnown || s.Tokens != 0 {
			t.Fatalf("pool state %+v, want 0 tokens", s)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := c.Acquire(cctx, req)
			done <- err
		}()
		synctest.Wait() // pacing
		if s := c.PoolState(0); s.Tokens != -2000 {
			t.Fatalf("a pacing call holds %v tokens, want -2000", s.Tokens)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire cancelled while paced: %v", err)
		}
		if s := c.PoolState(0); s.Tokens != 0 {
			t.Fatalf("after a paced call left: %v tokens, want its 2000 back (0)", s.Tokens)
		}
	})
}

// A deadline only in the context routes like Request.Deadline: the call
// goes to the pool that can serve it by then.
func TestAcquireRoutesByTheContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		if _, err := c.Acquire(context.Background(), Request{Model: "m"}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		p, err := c.Acquire(ctx, Request{Model: "m"})
		if err != nil {
			t.Fatalf("a call a can not serve in time but b can: %v", err)
		}
		if p.Request().Upstream != "b" {
			t.Fatalf("call at %s, want b", p.Request().Upstream)
		}
	})
}

// ObserveLimits: a pool without a configured limit learns one from the
// provider's headers and paces by it (when it learns: the one pool of a
// chain without routing does not); a configured one is lowered to what the
// provider says remains, never raised, and keeps its capacity.
func TestObserveLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rc := twoPools()
		rc.Pools[0].Admission.Concurrency, rc.Pools[1].Admission.Concurrency = 8, 8
		rc.Routes["n"] = []string{"b/m"}
		// m at a alone: with b on its route, a call that must wait
		// for a's tokens goes to b (TestRouteSpillsPastAWaitForTokens).
		rc.Routes["m"] = []string{"a/m"}
		rc.Pools[1].TPM = 6000
		c, err := New(Config{Routing: rc})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000}
		p, err := c.Acquire(ctx, req)
		if err != nil || p.Request().Pool != 0 {
			t.Fatalf("first call: %v", err)
		}
		p.ObserveLimits(Limits{Limit: 60, Remaining: 0}, Limits{}) // not Known: nothing
		if s := c.PoolState(0); s.TokensKnown || s.RequestsKnown {
			t.Fatalf("a pool learned a limit from nothing: %+v", s)
		}
		p.ObserveLimits(Limits{}, Limits{Limit: 6000, Remaining: 1000, Known: true})
		if s := c.PoolState(0); !s.TokensKnown || s.Tokens != 1000 || s.RequestsKnown {
			t.Fatalf("after the provider's tokens header: %+v, want 1000 tokens learned", s)
		}
		start := time.Now()
		if _, err := c.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 10*time.Second {
			t.Fatalf("a call of 2000 with 1000 left at 100/s waited %v, want 10s", waited)
		}

		q, err := c.Acquire(ctx, Request{Model: "n", InputTokens: 1000, MaxOutputTokens: 1000})
		if err != nil || q.Request().Pool != 1 {
			t.Fatalf("call to b: %v", err)
		}
		if s := c.PoolState(1); s.Tokens != 4000 {
			t.Fatalf("b after 2000: %v", s.Tokens)
		}
		q.ObserveLimits(Limits{}, Limits{Limit: 12000, Remaining: 500, Known: true})
		if s := c.PoolState(1); s.Tokens != 500 {
			t.Fatalf("b told 500 remain: %v tokens, want 500", s.Tokens)
		}
		q.ObserveLimits(Limits{}, Limits{Limit: 12000, Remaining: 5000, Known: true})
		if s := c.PoolState(1); s.Tokens != 500 {
			t.Fatalf("b told 5000 remain: %v tokens, want kept at 500", s.Tokens)
		}
		if l := c.stages.route.pools[1].tpm.Load().limit; l != 6000 {
			t.Fatalf("a configured bucket took the provider's limit: %v", l)
		}
	})
}

// Estimate with routing answers from the pool the call would be routed to,
// with the routed request, and takes nothing.
func TestEstimateRouted(t *testing.T) {
	rc := twoPools()
	rc.Pools[1].Admission.InitialServiceTime = 1200 * time.Millisecond
	rc.Pools[1].TPM = 6000
	c := routeCore(t, Config{Routing: rc})
	arriveAt(t, c, t0, Request{Model: "m"}) // a busy
	req := Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000, Deadline: t0.Add(1500 * time.Millisecond)}
	for range 3 {
		e, err := c.Estimate(t0, req)
		if err != nil {
			t.Fatal(err)
		}
		if e.Request.Pool != 1 || e.Request.Upstream != "b" || e.Request.UpstreamModel != "m-b" ||
			e.Verdict != admission.Granted || e.ServiceP95 != 1200*time.Millisecond {
			t.Fatalf("estimate: pool %d %s/%s, %v p95 %v; want b's gate: granted, p95 1.2s",
				e.Request.Pool, e.Request.Upstream, e.Request.UpstreamModel, e.Verdict, e.ServiceP95)
		}
	}
	if got := tokensAt(c, 1, t0); got != 6000 || c.Pools()[1].InFlight() != 0 {
		t.Fatalf("estimates took %v tokens or a slot", 6000-got)
	}

	synctest.Test(t, func(t *testing.T) {
		ch, err := New(Config{Routing: rc})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Acquire(context.Background(), Request{Model: "m"}); err != nil {
			t.Fatal(err)
		}
		req := req
		req.Deadline = time.Now().Add(1500 * time.Millisecond)
		e, err := ch.Estimate(req)
		if err != nil {
			t.Fatal(err)
		}
		if e.Request.Pool != 1 || e.Request.Upstream != "b" || e.Verdict != admission.Granted || e.ServiceP95 != 1200*time.Millisecond {
			t.Fatalf("Chain estimate: pool %d %s, %v p95 %v; want b's gate", e.Request.Pool, e.Request.Upstream, e.Verdict, e.ServiceP95)
		}
		if s := ch.PoolState(1); s.Tokens != 6000 || inFlight(ch, 1) != 0 {
			t.Fatal("a Chain estimate took tokens or a slot")
		}
	})
}

// Routing configurations that cannot work are errors naming what is wrong.
func TestRoutingConfigErrors(t *testing.T) {
	ok := func() *RoutingConfig {
		return &RoutingConfig{
			Pools:  []PoolConfig{poolCfg("d/big", "d", "big", 1, time.Second), poolCfg("d/small", "d", "small", 1, time.Second)},
			Routes: map[string][]string{"big": {"d/big"}, "small": {"d/small"}},
		}
	}
	if _, err := NewCore(Config{Routing: ok()}); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*RoutingConfig)
		want   []string
	}{
		{"unknown pool in a route", func(r *RoutingConfig) { r.Routes["big"] = []string{"d/big", "nowhere/big"} }, []string{`"big"`, `"nowhere/big"`}},
		{"pool on no route", func(r *RoutingConfig) {
			r.Pools = append(r.Pools, poolCfg("lonely/x", "lonely", "x", 1, time.Second))
		}, []string{`"lonely/x"`, "no route"}},
		{"ladder loop", func(r *RoutingConfig) { r.Ladder = map[string]string{"big": "small", "small": "big"} }, []string{`ladder["big"]`, "loops"}},
		{"several faults, the first by name", func(r *RoutingConfig) {
			r.Routes["a"], r.Routes["z"] = []string{"nowhere/a"}, []string{"nowhere/z"}
		}, []string{`"nowhere/a"`}},
		{"ladder to itself", func(r *RoutingConfig) { r.Ladder = map[string]string{"big": "big"} }, []string{`"big"`, "loops"}},
		{"ladder to an unrouted model", func(r *RoutingConfig) { r.Ladder = map[string]string{"big": "medium"} }, []string{`"medium"`}},
		{"negative rpm", func(r *RoutingConfig) { r.Pools[1].RPM = -1 }, []string{"d/small", "rpm -1"}},
		{"negative tpm", func(r *RoutingConfig) { r.Pools[0].TPM = -5 }, []string{"d/big", "tpm -5"}},
		{"duplicate pool", func(r *RoutingConfig) {
			r.Pools = append(r.Pools, poolCfg("d/big", "e", "big", 1, time.Second))
		}, []string{`"d/big"`, "pools[2]"}},
		{"pool twice in a route", func(r *RoutingConfig) { r.Routes["big"] = []string{"d/big", "d/big"} }, []string{`"d/big"`, "twice"}},
		{"empty route", func(r *RoutingConfig) { r.Routes["medium"] = nil }, []string{`"medium"`}},
		{"pool without a model", func(r *RoutingConfig) { r.Pools[1].Model = "" }, []string{"pools[1]"}},
		{"no pools", func(r *RoutingConfig) { r.Pools, r.Routes = nil, nil }, []string{"no pools"}},
		{"probe above its bound", func(r *RoutingConfig) { r.ProbeInterval, r.MaxProbeInterval = time.Minute, time.Second }, []string{"probe"}},
		{"bad pool gate", func(r *RoutingConfig) { r.Pools[1].Admission.Concurrency = 0 }, []string{"pools[1]", "d/small"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := ok()
			tc.change(rc)
			_, err := NewCore(Config{Routing: rc})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
			if _, err2 := New(Config{Routing: rc}); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("New: %v, want the same error as NewCore", err2)
			}
		})
	}
}

// A failover does not go to a pool found down (pick falls back on one when
// every pool is down, for a first attempt): the down deployment sees only
// its probe.
func TestFailoverNotToAPoolDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := failoverChain(t, RetryConfig{Disabled: true})
		ctx := context.Background()
		p, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		q, err := c.Acquire(ctx, Request{Model: "m", Deadline: time.Now().Add(1500 * time.Millisecond)})
		if err != nil || q.Request().Upstream != "b" {
			t.Fatalf("second call: %v", err)
		}
		if err := q.Done(Outcome{Result: admission.Failure, Unreachable: true}); err != nil {
			t.Fatal(err)
		}
		if !c.PoolState(1).Down {
			t.Fatal("b unreachable is not down")
		}
		if p.Failover(ctx, Outcome{Result: admission.Failure}) {
			t.Fatal("failover to b, down and not due its probe")
		}
		if p.Request().Upstream != "a" || inFlight(c, 0) != 1 || inFlight(c, 1) != 0 {
			t.Fatal("a refused failover moved the call")
		}
		// Once b is due its probe, the failover may be it.
		time.Sleep(DefaultProbeInterval)
		if !p.Failover(ctx, Outcome{Result: admission.Failure}) || p.Request().Upstream != "b" {
			t.Fatal("no failover to b as its probe")
		}
		p.Drop()
	})
}

// A failover that cannot be made — its caller left while it waited for
// the next pool's tokens — gives back the retry token and the tokens.
func TestFailoverAbandonedGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rc := twoPools()
		rc.Pools[1].TPM = 6000
		rc.Pools[1].Admission.Concurrency = 8
		rich := retrybudget.Config{Ratio: 1, MinPerSecond: 1e-9, MaxTokens: 1}
		c, err := New(Config{Routing: rc, Retries: RetryConfig{Budget: rich, PerTenant: rich}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := Request{Model: "m", InputTokens: 1000, MaxOutputTokens: 1000, Deadline: time.Now().Add(time.Minute)}
		p, err := c.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		tight := req
		tight.Deadline = time.Now().Add(1500 * time.Millisecond)
		for range 3 { // these go to b and spend its 6000
			if q, err := c.Acquire(ctx, tight); err != nil || q.Request().Pool != 1 {
				t.Fatalf("filler: %v", err)
			}
		}
		before, _ := c.RetryBalance(time.Now())
		cctx, cancel := context.WithCancel(ctx)
		moved := make(chan bool, 1)
		go func() { moved <- p.Failover(cctx, Outcome{Result: admission.Failure}) }()
		synctest.Wait() // waiting for b's tokens
		if s := c.PoolState(1); s.Tokens != -2000 {
			t.Fatalf("b while the failover waits: %v tokens, want -2000", s.Tokens)
		}
		cancel()
		if <-moved {
			t.Fatal("a cancelled failover moved the call")
		}
		if s := c.PoolState(1); s.Tokens != 0 {
			t.Fatalf("b after the failover left: %v tokens, want 0", s.Tokens)
		}
		if after, _ := c.RetryBalance(time.Now()); after != before {
			t.Fatalf("retry balance %v after a failover not made, want %v as before", after, before)
		}
		if p.Request().Upstream != "a" || inFlight(c, 0) != 1 {
			t.Fatal("a failover not made moved the call")
		}
		p.Drop()
	})
}

// A call degraded under load is booked at the model it calls: the degrade
// stage moves it before the spend stage reserves, and the books hold the
// rung's cost once it is settled.
func TestRouteLoadDegradedBookedAtTheRung(t *testing.T) {
	l := limiter(t, prices)
	c := routeCore(t, Config{Spend: l, Routing: &RoutingConfig{
		Pools:          []PoolConfig{poolCfg("d/big", "d", "big", 1, time.Second), poolCfg("d/small", "d", "small", 4, time.Second)},
		Routes:         map[string][]string{"big": {"d/big"}, "small": {"d/small"}},
		Ladder:         map[string]string{"big": "small"},
		DegradeClasses: []string{admission.ClassBatch},
	}})
	req := Request{Model: "big", InputTokens: 1000, MaxOutputTokens: 1000}
	_, filler := arriveAt(t, c, t0, req)
	bigUSD := filler.Request().EstimatedUSD
	req.Class, req.Deadline = admission.ClassBatch, t0.Add(1500*time.Millisecond)
	d, tk := arriveAt(t, c, t0, req)
	r := tk.Request()
	if d.Verdict != admission.Granted || r.DegradedBy != DegradedByLoad {
		t.Fatalf("batch call: %v degraded by %q, want granted by load", d.Verdict, r.DegradedBy)
	}
	want := bigUSD * (0.15 + 0.6) / (2.5 + 10) // the same tokens at small's prices
	if math.Abs(r.EstimatedUSD-want) > 1e-12 {
		t.Fatalf("estimated $%g, want $%g (small's price), not big's $%g", r.EstimatedUSD, want, bigUSD)
	}
	before := l.Snapshot(t0).Global.SpentUSD
	if err := c.Release(t0.Add(time.Second), tk, Outcome{Result: admission.Success, UsageKnown: true,
		Usage: contract.Usage{Input: 1000, Output: 1000}}); err != nil {
		t.Fatal(err)
	}
	if got := l.Snapshot(t0.Add(time.Second)).Global.SpentUSD - before; math.Abs(got-want) > 1e-9 {
		t.Fatalf("booked $%g, want $%g at small's prices", got, want)
	}
}

// A call that may be degraded and would wait more than a third of its
// budget for its model — in time by the estimate, but near where its queue
// turns newest-first under overload and leaves it behind — goes one rung
// down at once; one that may not waits.
func TestRouteDegradesRatherThanWaitAThirdOfTheBudget(t *testing.T) {
	c := routeCore(t, Config{Routing: degradeConfig()})
	for range 3 { // big's slot and two queued: a newcomer waits 3s
		arriveAt(t, c, t0, Request{Model: "big", Class: admission.ClassInteractive})
	}
	deadline := t0.Add(8 * time.Second) // 3s of wait + 1s of service fits; 3s > 8s/3 (not > 8s/2)
	d, tk := arriveAt(t, c, t0, Request{Model: "big", Class: admission.ClassBatch, Deadline: deadline})
	if r := tk.Request(); d.Verdict != admission.Granted || r.Model != "small" || r.DegradedBy != DegradedByLoad {
		t.Fatalf("batch call: %v, model %s by %q; want granted at small, by load", d.Verdict, r.Model, r.DegradedBy)
	}
	d, tk = arriveAt(t, c, t0, Request{Model: "big", Class: admission.ClassInteractive, Deadline: deadline})
	if r := tk.Request(); d.Verdict != admission.Queued || r.Model != "big" {
		t.Fatalf("interactive call: %v, model %s; want queued at big", d.Verdict, r.Model)
	}
	d, tk = arriveAt(t, c, t0, Request{Model: "big", Class: admission.ClassBatch, Deadline: t0.Add(20 * time.Second)})
	if r := tk.Request(); d.Verdict != admission.Queued || r.Degraded {
		t.Fatalf("batch call with 20s: %v, degraded %v; want queued at big (4s of wait is under a third)", d.Verdict, r.Degraded)
	}
}

// Calls refused together for their tokens are told times one refill of a
// call apart — here 200 tokens at 100/s, 2s — not the gate's interval, so
// that their retries come back at the rate the bucket admits them.
func TestRouteTokenRefusalsSpreadByTheRefill(t *testing.T) {
	c := routeCore(t, Config{Routing: tpmPool(100), RefusalSpread: time.Minute})
	req := Request{Model: "m", InputTokens: 100, MaxOutputTokens: 100, Deadline: t0.Add(time.Second)}
	for range 30 { // the bucket's 6000 tokens
		arriveAt(t, c, t0, req)
	}
	var got []time.Duration
	for range 3 {
		d, _ := arriveAt(t, c, t0, req)
		if d.Verdict != admission.Rejected || d.Rejection.Reason != admission.ReasonQueueWait {
			t.Fatalf("past the bucket: %v %+v, want refused queue_wait", d.Verdict, d.Rejection)
		}
		got = append(got, d.Rejection.RetryAfter)
	}
	for i := 1; i < len(got); i++ {
		if step := got[i] - got[i-1]; step != 2*time.Second {
			t.Fatalf("Retry-After %v: steps of %v, want 2s (one call's refill)", got, step)
		}
	}
}

// A pool that would serve a call late — it would wait over a third of its
// budget, near where its queue turns newest-first, or join a queue already
// serving newest-first, whose short estimate is an overtaking of the
// callers already there — is passed over for the next pool of the route
// that would not; when every pool would, the one of the soonest start
// takes it. Without this the first deployment, once overloaded, takes
// every call and the next stays idle.
func TestRoutePassesOverAPoolThatWouldServeLate(t *testing.T) {
	c := routeCore(t, Config{Routing: twoPools()})
	// a's slot, b's (a call spills to b rather than wait at a), then two
	// queued at a: a newcomer would wait 3s at a, 1s at b.
	for i, want := range []int{0, 1, 0, 0} {
		if _, tk := arriveAt(t, c, t0, Request{Model: "m"}); tk.Request().Pool != want {
			t.Fatalf("call %d with no deadline went to pool %d, want %d", i+1, tk.Request().Pool, want)
		}
	}
	deadline := t0.Add(5 * time.Second) // 3s + 1s fits; 3s > 5s/3 is late
	d, tk := arriveAt(t, c, t0, Request{Model: "m", Deadline: deadline})
	if r := tk.Request(); d.Verdict != admission.Queued || r.Pool != 1 {
		t.Fatalf("call that would wait 3s of 5s at a, 1s at b: %v at pool %d, want queued at b", d.Verdict, r.Pool)
	}
	// b now: a newcomer would wait 2s, late too (over 5s/3) but sooner
	// than a's 3s — b again.
	if _, tk = arriveAt(t, c, t0, Request{Model: "m", Deadline: deadline}); tk.Request().Pool != 1 {
		t.Fatalf("call with 5s went to pool %d, want b", tk.Request().Pool)
	}
	// Both would serve a 5s call late (3s of wait each): the first of
	// the route among the soonest.
	d, tk = arriveAt(t, c, t0, Request{Model: "m", Deadline: deadline})
	if r := tk.Request(); d.Verdict != admission.Queued || r.Pool != 0 {
		t.Fatalf("call both pools would serve late: %v at pool %d, want queued at a", d.Verdict, r.Pool)
	}
	// a 4s, b 3s, both late for 5.5s: b, the sooner start.
	d, tk = arriveAt(t, c, t0, Request{Model: "m", Deadline: t0.Add(5500 * time.Millisecond)})
	if r := tk.Request(); d.Verdict != admission.Queued || r.Pool != 1 {
		t.Fatalf("call both pools would serve late: %v at pool %d, want queued at b (the sooner start)", d.Verdict, r.Pool)
	}
}

// One upstream is one pool: a chain without routing has DefaultPool, of
// its Admission's gate, which serves every model under its own name (the
// gate keeps each model's service times), and which does not learn limits
// from the provider's headers — it has none to configure.
func TestOneUpstreamIsOnePool(t *testing.T) {
	c, err := New(Config{Admission: admission.Config{Concurrency: 2, MaxQueue: 4}})
	if err != nil {
		t.Fatal(err)
	}
	pools := c.Pools()
	if len(pools) != 1 || pools[0].Name != DefaultPool || pools[0].Model != AnyModel || pools[0].Gate != c.Gate() {
		t.Fatalf("pools %+v, want one, %s, for every model, the chain's gate", pools, DefaultPool)
	}
	ctx := context.Background()
	for _, model := range []string{"m", "n"} {
		p, err := c.Acquire(ctx, Request{Model: model, Deadline: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if r := p.Request(); r.Upstream != DefaultPool || r.UpstreamModel != model || r.Pool != 0 {
			t.Fatalf("%s: pool %d, deployment %q, model %q; want 0, %s, %s", model, r.Pool, r.Upstream, r.UpstreamModel, DefaultPool, model)
		}
		p.ObserveLimits(Limits{Limit: 10, Remaining: 9, Known: true}, Limits{Limit: 1000, Remaining: 900, Known: true})
		p.Done(Outcome{Result: admission.Success, ServiceTime: time.Second})
	}
	if keys := c.Gate().Keys(); len(keys) != 2 {
		t.Errorf("service times kept for %v, want each model's", keys)
	}
	if s := c.PoolState(0); s.TokensKnown || s.RequestsKnown {
		t.Errorf("the one pool learned limits from the provider's headers: %+v", s)
	}
}
