package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

func TestAIMDFollowsRateLimitSignals(t *testing.T) {
	a := newAIMD(config.UpstreamLimitConfig{DecreaseFactor: 0.5, Interval: config.Duration(time.Second)}, 8)
	t0 := time.Unix(0, 0)
	var gate int // what the gate was given
	set := func(n int) { gate = n }
	steps := []struct {
		at               time.Duration
		limited          bool
		want             int
		changed, lowered bool
	}{
		{0, true, 4, true, true},                         // halve
		{500 * time.Millisecond, true, 4, false, false},  // within the interval: one signal is enough
		{1100 * time.Millisecond, true, 2, true, true},   // 4+1 accrued, halved
		{2200 * time.Millisecond, true, 1, true, true},   // 2+1, halved
		{3300 * time.Millisecond, true, 1, false, false}, // never below 1
		{4300 * time.Millisecond, false, 2, true, false}, // +1 per interval since the last decrease
		{4400 * time.Millisecond, false, 2, false, false},
		{5300 * time.Millisecond, false, 3, true, false},
	}
	for i, s := range steps {
		got, changed, lowered := a.next(t0.Add(s.at), s.limited, set)
		if got != s.want || changed != s.changed || lowered != s.lowered {
			t.Fatalf("step %d: %d %v %v, want %d %v %v", i, got, changed, lowered, s.want, s.changed, s.lowered)
		}
		if gate != 0 && gate != got {
			t.Fatalf("step %d: the gate was given %d, the level is %d", i, gate, got)
		}
	}
}

// TestAIMDLowersToTheCallsAtTheProvider: a pool told 32 in front of a
// provider of 16 slots has a call refused that was sent with 17 calls at
// the provider: the level goes to 90% of them, 15, not to half of 32 (16,
// the factor's, which stays the fallback when the calls are not counted).
func TestAIMDLowersToTheCallsAtTheProvider(t *testing.T) {
	a := newAIMD(config.UpstreamLimitConfig{DecreaseFactor: 0.5, Interval: config.Duration(time.Second)}, 32)
	t0 := time.Unix(1000, 0)
	if n, changed, lowered := a.decide(t0, signal{refused: true, inFlight: 17, sent: t0.Add(-time.Millisecond)}, nil); n != 15 || !changed || !lowered {
		t.Fatalf("a refusal sent at 17 in flight: %d %v %v, want 15 true true", n, changed, lowered)
	}
	b := newAIMD(config.UpstreamLimitConfig{DecreaseFactor: 0.5, Interval: config.Duration(time.Second)}, 32)
	if n, _, _ := b.decide(t0, signal{refused: true}, nil); n != 16 {
		t.Fatalf("a refusal without a count: %d, want 16 (the factor's)", n)
	}
}

// TestAIMDDecisions: the rest of the rule, step by step, a pool told 32
// with the defaults (factor 0.5, interval 1s): one decrease an interval,
// except for a refusal of a call sent after the last one, which lowers
// the level again, no lower than half the level the interval's decreases
// started from; a remaining count at zero caps the level at the calls
// holding a gate slot, or at the count, not below half the level; a
// signal that would not lower the level changes nothing, not even the
// clock of its climb.
func TestAIMDDecisions(t *testing.T) {
	a := newAIMD(config.UpstreamLimitConfig{}, 32)
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	holding := func(n int) func() int { return func() int { return n } }
	var gate int
	set := func(n int) { gate = n }
	steps := []struct {
		ms               int
		sig              signal
		want             int
		changed, lowered bool
	}{
		// The first burst: sent together, refused together; the count is
		// the calls at the provider when the refusal came back.
		{0, signal{refused: true, inFlight: 32, sent: at(-1)}, 28, true, true},
		{1, signal{refused: true, inFlight: 31, sent: at(-1)}, 28, false, false},             // sent with the first: old news
		{5, signal{refused: true, inFlight: 20, sent: at(2)}, 18, true, true},                // sent after: 28 is too high
		{7, signal{refused: true, inFlight: 17, sent: at(6)}, 16, true, true},                // 15, but no lower than half of 32 within the interval
		{8, signal{refused: true, inFlight: 3, sent: at(7)}, 16, false, false},               // the provider's slots held by calls hung up on
		{500, signal{exhausted: true, inFlight: 12, holding: holding(12)}, 16, false, false}, // within the interval
		{1007, signal{}, 17, true, false},                                                    // +1 an interval since the last decrease
		// A remaining count at zero caps at the calls holding a gate slot,
		// which the count at the provider (15) runs behind.
		{1010, signal{exhausted: true, inFlight: 15, holding: holding(16)}, 16, true, true},
		{2009, signal{exhausted: true, inFlight: 16, holding: holding(16)}, 16, false, false}, // 17 from 2010 on: not yet
		{2010, signal{exhausted: true, inFlight: 16, holding: holding(16)}, 16, false, false}, // held at 16: 17 never given
		{3010, signal{}, 17, true, false},
		{3020, signal{refused: true, inFlight: 17, sent: at(3019)}, 15, true, true},
		{3500, signal{refused: true, inFlight: 17, sent: at(3010)}, 15, false, false},    // sent before the decrease
		{4020, signal{refused: true, inFlight: 18, sent: at(4019)}, 16, true, false},     // 16 is not below the level: nothing
		{5020, signal{}, 17, true, false},                                                // and the climb went on from 3020
		{5100, signal{exhausted: true, inFlight: 1, holding: holding(1)}, 8, true, true}, // a forecast: no lower than the factor's
		{6100, signal{refused: true, inFlight: 1, sent: at(6099)}, 1, true, true},        // 0.9 of one call: one, the floor
		{6500, signal{refused: true, inFlight: 1, sent: at(6499)}, 1, false, false},
	}
	for i, s := range steps {
		got, changed, lowered := a.decide(at(s.ms), s.sig, set)
		if got != s.want || changed != s.changed || lowered != s.lowered {
			t.Fatalf("step %d (%dms): %d %v %v, want %d %v %v", i, s.ms, got, changed, lowered, s.want, s.changed, s.lowered)
		}
		if gate != 0 && gate != got {
			t.Fatalf("step %d: the gate was given %d, the level is %d", i, gate, got)
		}
	}
}

// TestAIMDCountsTheCallsAtTheProvider: a pool told 8 counts its calls at
// the provider, as a learning pool does, and every one is counted off
// again, answered, refused or reset; the refusals of a provider of 2
// slots lower the level from the count (at least 2: 90% of the 2 it was
// serving and the refused call) rather than halving it blindly, and no
// lower than half of 8 after the interval's first decrease.
func TestAIMDCountsTheCallsAtTheProvider(t *testing.T) {
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Mode: mockllm.Mode429, Median: 300 * time.Millisecond, ResetRate: 0.2, Seed: 1})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 8, MaxQueue: new(32)}
	cfg.UpstreamLimit = config.UpstreamLimitConfig{Interval: config.Duration(time.Hour)} // no climb back during the test
	cfg.Retries.Disabled = true
	g, gw := startGateway(t, cfg)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			resp := post(t, t.Context(), gw.URL, chatBody, nil)
			readAll(t, resp)
		})
	}
	wg.Wait()
	a := g.pools[0].limit
	a.mu.Lock()
	left := a.atProvider
	a.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d calls still counted at the provider after every answer", left)
	}
	if st := mock.Stats(); st.Rejected429 == 0 || st.Faults.Reset == 0 {
		t.Fatalf("the provider refused %d calls and reset %d: the test needs both", st.Rejected429, st.Faults.Reset)
	}
	if c := g.Gate().Stats().Concurrency; c < 2 || c >= 8 {
		t.Fatalf("concurrency %d after the provider's 429s, want 2 to 7", c)
	}
}

// TestAIMDRecoversWithoutAnswers: after a storm the level climbs one slot
// an interval from the last decrease with no answer at all, and is back at
// the configured concurrency (ceiling − low) intervals later. Stepping
// only on answers left it at the low forever once traffic stopped.
func TestAIMDRecoversWithoutAnswers(t *testing.T) {
	a := newAIMD(config.UpstreamLimitConfig{Interval: config.Duration(time.Second)}, 16)
	t0 := time.Unix(1000, 0)
	a.next(t0, true, nil)                  // 16 → 8
	a.next(t0.Add(time.Second), true, nil) // 8+1 → 4
	last := t0.Add(time.Second)
	for _, tc := range []struct {
		after time.Duration
		want  int
	}{
		{0, 4}, {999 * time.Millisecond, 4}, {time.Second, 5}, {5 * time.Second, 9},
		{12 * time.Second, 16}, {time.Hour, 16}, {-time.Second, 4}, // a clock gone back holds the low
	} {
		a.mu.Lock()
		got := a.levelLocked(last.Add(tc.after))
		a.mu.Unlock()
		if got != tc.want {
			t.Errorf("%v after the last decrease: %d, want %d", tc.after, got, tc.want)
		}
	}
	if n, changed, _ := a.next(last.Add(12*time.Second), false, nil); n != 16 || !changed {
		t.Fatalf("refresh after 12 quiet intervals: %d %v, want 16 true", n, changed)
	}
}

// TestAdaptiveLimitRecoversWhenIdle: a gateway whose concurrency a 429
// storm lowered an hour ago, and which has had no traffic since, estimates
// and admits the next request against the configured concurrency.
func TestAdaptiveLimitRecoversWhenIdle(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	cfg := baseConfig(up.URL)
	cfg.Admission = config.AdmissionConfig{Concurrency: 16, MaxQueue: new(16)}
	cfg.UpstreamLimit = config.UpstreamLimitConfig{Interval: config.Duration(time.Second)}
	g, gw := startGateway(t, cfg)
	storm := func() {
		t.Helper()
		past := time.Now().Add(-time.Hour)
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
		g.observe(sent{}, past, resp, nil)                  // 16 → 8
		g.observe(sent{}, past.Add(time.Second), resp, nil) // 9 → 4
		if c := g.Gate().Stats().Concurrency; c != 4 {
			t.Fatalf("after the storm: concurrency %d, want 4", c)
		}
	}
	storm()
	resp, err := http.Get(gw.URL + contract.EstimatePath)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("estimate: %d %s", resp.StatusCode, b)
	}
	if c := g.Gate().Stats().Concurrency; c != 16 {
		t.Fatalf("after an idle hour the estimate saw concurrency %d, want 16", c)
	}
	storm()
	// A call held at the provider: the concurrency it was admitted at is
	// read while it is in flight, before its answer could raise it.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set(mockllm.HeaderLatencyMs, "60000")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testkit.Eventually(t, "the call in flight", func() bool { return g.Gate().Stats().InFlight == 1 })
	c := g.Gate().Stats().Concurrency
	cancel()
	<-done
	if c != 16 {
		t.Fatalf("after an idle hour a request was admitted at concurrency %d, want 16", c)
	}
}

// TestProviderHeadersPaceBeforeThe429: the mock's per-model limits, in
// OpenAI's and Anthropic's headers, lower the gate's concurrency on the
// answer after which the next such call would be refused, before the
// provider has refused anything: requests at zero, or tokens fewer than
// the call's charge (with 30 tokens a minute and 12 a call, 6 are left after
// two calls — not zero, but too few for a third).
func TestProviderHeadersPaceBeforeThe429(t *testing.T) {
	// 16 characters of prompt are 4 tokens, plus max_tokens 8: 12 a call.
	const anthropicBody = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"0123456789abcdef"}]}`
	const openAIBody = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"0123456789abcdef"}]}`
	for _, tc := range []struct {
		name, path, body string
		limit            mockllm.ModelSpec
	}{
		{"anthropic requests", "/v1/messages", anthropicBody, mockllm.ModelSpec{RPM: 2}},
		{"anthropic tokens", "/v1/messages", anthropicBody, mockllm.ModelSpec{TPM: 30}},
		{"openai requests", "/v1/chat/completions", openAIBody, mockllm.ModelSpec{RPM: 2}},
		{"openai tokens", "/v1/chat/completions", openAIBody, mockllm.ModelSpec{TPM: 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock, up := testkit.StartMock(t, mockllm.Config{Models: map[string]mockllm.ModelSpec{"m": tc.limit}})
			cfg := baseConfig(up.URL)
			cfg.Admission = config.AdmissionConfig{Concurrency: 8, MaxQueue: new(16)}
			cfg.UpstreamLimit = config.UpstreamLimitConfig{Interval: config.Duration(time.Hour)} // no climb back during the test
			g, gw := startGateway(t, cfg)
			for i, want := range []int{8, 4} {
				resp := postPath(t, t.Context(), gw.URL, tc.path, tc.body, nil)
				if b := readAll(t, resp); resp.StatusCode != 200 {
					t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
				}
				if c := g.Gate().Stats().Concurrency; c != want {
					t.Fatalf("after call %d: concurrency %d, want %d", i, c, want)
				}
			}
			if st := mock.Stats(); st.RateLimited != 0 {
				t.Fatalf("the provider refused %d calls", st.RateLimited)
			}
			if d := testutilValue(g.metrics.limitDecreases); d != 1 {
				t.Fatalf("limit decreases %v, want 1", d)
			}
		})
	}
}
