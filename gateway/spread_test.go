package gateway

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/retrybudget"
)

// TestRefusedTogetherRetrySpread, end to end over loopback: 30 clients of
// the official SDK (openai-go, its default two retries, which honour
// retry-after-ms to the millisecond with no jitter of their own) are
// refused in one instant by a gateway with one slot in front of a
// provider with one slot — one free slot per service time. With the
// refusals spread, their retries come back one admission apart and at
// least 80% of the retries that arrive are admitted; with the spread off
// (admission.refusal_spread: 0), they come back as one wave, one is
// admitted, the rest refused again, and fewer than half are.
//
// The service time is 100ms, so that the spread (29 callers one slot
// apart) takes about three seconds; SLUICE_SPREAD_SERVICE=1s runs it at
// the one free slot per second of docs/perf.md.
func TestRefusedTogetherRetrySpread(t *testing.T) {
	service := 100 * time.Millisecond
	if v := os.Getenv("SLUICE_SPREAD_SERVICE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SLUICE_SPREAD_SERVICE: %v", err)
		}
		service = d
	}
	for _, tc := range []struct {
		name   string
		spread *config.Duration
	}{
		{"spread", nil}, // the default
		{"off", new(config.Duration(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, admitted, took := retryWave(t, service, tc.spread)
			share := admitted / arrived
			t.Logf("refusal spread %s: %.0f retries arrived, %.0f admitted (%.0f%%), in %v",
				tc.name, arrived, admitted, 100*share, took.Round(10*time.Millisecond))
			switch {
			case arrived == 0:
				t.Fatal("no retry arrived")
			case tc.spread == nil && share < 0.8:
				t.Errorf("with the spread %.0f%% of the retries that arrived were admitted, want ≥ 80%%", 100*share)
			case tc.spread != nil && share >= 0.5:
				t.Errorf("without the spread %.0f%% of the retries were admitted: the test does not tell the spread's effect", 100*share)
			}
		})
	}
}

// retryWave runs the wave and returns the retries that arrived at the
// gateway, those it admitted, and how long the callers took.
func retryWave(t *testing.T, service time.Duration, spread *config.Duration) (arrived, admitted float64, took time.Duration) {
	t.Helper()
	const callers = 30
	// The mock's gpt-4o-mini takes half its median: service a call.
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 1, Median: 2 * service})
	cfg := baseConfig(up.URL)
	// One slot and one place in the waiting room; the retry budget out
	// of the way (what is measured is when the retries come, not how
	// many may).
	cfg.Admission = config.AdmissionConfig{Concurrency: 1, MaxQueue: new(1), InitialServiceTime: config.Duration(service), RefusalSpread: spread}
	wide := retrybudget.Config{MinPerSecond: 1000}
	cfg.Retries.Budget, cfg.Retries.PerTenant = wide, wide
	s := serve(t, cfg)
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey("sk-test"))
	params := openai.ChatCompletionNewParams{
		Model:     "gpt-4o-mini",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hi")},
		MaxTokens: openai.Int(8),
	}
	// A few calls one after the other: the gate measures the service time
	// (with the hop's overhead) it paces the spread by.
	for range 3 {
		if _, err := client.Chat.Completions.New(t.Context(), params); err != nil {
			t.Fatal(err)
		}
	}
	retries := func() (float64, float64) {
		return counter(t, s.g, "attempts", "retry"), sumCounterWhere(t, s.g, "sluice_admissions_total", "attempt", "retry")
	}
	arrived0, admitted0 := retries()

	// Generous: 30 callers one slot apart, twice over, and the hop.
	ctx, cancel := context.WithTimeout(t.Context(), 2*callers*service+30*time.Second)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			<-start
			_, _ = client.Chat.Completions.New(ctx, params) // refused for good is an outcome too
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	took = time.Since(t0)
	if ctx.Err() != nil {
		t.Fatalf("the callers were still retrying after %v", took)
	}
	arrived1, admitted1 := retries()
	return arrived1 - arrived0, admitted1 - admitted0, took
}

// sumCounterWhere sums the counter name over its series whose label has
// the value; an empty label sums every series.
func sumCounterWhere(t *testing.T, g *Gateway, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				sum += m.GetCounter().GetValue()
				continue
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
