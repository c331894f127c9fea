package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// The Batch API's own behaviour (its files and batches calls, bad input,
// expiry and cancel, the refusals at submission) is tested end to end in
// package batchapi; here is what of it is the gateway's: the API off, the
// batch class's place in the gate, the chain's spend stage and books, the
// config.

// batchConfig is a gateway with the Batch API on, a store in the test's
// directory, and two tenants, acme and rival.
func batchConfig(t *testing.T, upstream string) config.Config {
	cfg := baseConfig(upstream)
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{HashKey("sk-acme")}},
		{Name: "rival", APIKeysSHA256: []string{HashKey("sk-rival")}, Classes: []string{"interactive"}, DisallowedClass: "refuse"},
	}
	cfg.Batch.Path = filepath.Join(t.TempDir(), "batch.db")
	return cfg
}

func chatLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"item %d"}],"max_tokens":8}}`+"\n", i, i)
	}
	return b.String()
}

func sdk(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// TestBatchOff: a gateway without batch.path answers the Batch API with a
// 404 that names the field.
func TestBatchOff(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	_, gw := startGateway(t, baseConfig(up.URL))
	resp, err := http.Get(gw.URL + "/v1/batches")
	if err != nil {
		t.Fatal(err)
	}
	if body := string(readAll(t, resp)); resp.StatusCode != 404 || !strings.Contains(body, "batch.path") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestBatchYieldsToLiveWork: while a batch runs, live calls go ahead of
// its items (which never crowd the queue: at most batch.max_waiting wait),
// and the batch still ends.
func TestBatchYieldsToLiveWork(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: 50 * time.Millisecond, Sigma: 0.01})
	cfg := batchConfig(t, up.URL)
	cfg.Admission.Concurrency = 2
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(60)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, option.WithJSONSet("sluice_completion_window", "1h"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "items to fill the slots", func() bool { return s.g.Gate().Stats().InFlight == 2 })
	maxDepth := 0
	for range 10 {
		resp := post(t, ctx, s.url, chatBody, map[string]string{"Authorization": "Bearer sk-acme"})
		readAll(t, resp)
		queued, _ := time.ParseDuration(resp.Header.Get("X-Sluice-Queue-Ms") + "ms")
		if resp.StatusCode != 200 {
			t.Fatalf("live call: %d", resp.StatusCode)
		}
		// Ahead of every item: it waits for one slot to end, never for
		// the items queued.
		if queued > 200*time.Millisecond {
			t.Errorf("live call queued %v behind the batch", queued)
		}
		maxDepth = max(maxDepth, s.g.Gate().Stats().Queued)
	}
	if maxDepth > cfg.Batch.WithDefaults().MaxWaiting+1 {
		t.Errorf("queue depth %d with a batch running", maxDepth)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.Status != openai.BatchStatusCompleted && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if b, err = acme.Batches.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 60 {
		t.Fatalf("batch %s %+v", b.Status, b.RequestCounts)
	}
	if n := testutilValue(s.g.metrics.responses.WithLabelValues("pipeline", "200")); n != 60 {
		t.Errorf("responses{class=pipeline,code=200} = %v, want 60", n)
	}
	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics := string(readAll(t, resp))
	for _, want := range []string{`sluice_batch_items_total{outcome="completed"} 60`, "sluice_batch_backlog_items 0", "sluice_batch_estimated_drain_seconds 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestBatchPausesForASpike: live calls at three times the slots in the
// middle of a batch: no item is admitted while they last beyond those
// already waiting, and the batch resumes after, with no item failed.
func TestBatchPausesForASpike(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 2, Median: 50 * time.Millisecond, Sigma: 0.01})
	cfg := batchConfig(t, up.URL)
	cfg.Admission.Concurrency = 2
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(80)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, option.WithJSONSet("sluice_completion_window", "1h"))
	if err != nil {
		t.Fatal(err)
	}
	items := func() float64 { return counter(t, s.g, "admissions", "pipeline", "acme", "first") }
	testkit.Eventually(t, "items to run", func() bool { return items() >= 10 })

	// Six callers in a closed loop on two slots, for a second.
	spikeCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var live, liveOK atomic.Int64
	for range 6 {
		wg.Go(func() {
			for spikeCtx.Err() == nil {
				resp, err := http.DefaultClient.Do(mustRequest(spikeCtx, s.url, "sk-rival"))
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				live.Add(1)
				if resp.StatusCode == 200 {
					liveOK.Add(1)
				}
			}
		})
	}
	testkit.Eventually(t, "the live queue to form", func() bool { return s.g.Gate().Stats().Queued >= 3 })
	before := items()
	time.Sleep(time.Second) // the spike's length: what is measured is what happens meanwhile
	during := items() - before
	stop()
	wg.Wait()
	if during > float64(cfg.Batch.WithDefaults().MaxWaiting) {
		t.Errorf("%v items admitted during the spike, want at most the %d waiting when it began", during, cfg.Batch.WithDefaults().MaxWaiting)
	}
	if live.Load() < 10 || liveOK.Load() != live.Load() {
		t.Errorf("live calls: %d of %d succeeded", liveOK.Load(), live.Load())
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.Status != openai.BatchStatusCompleted && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if b, err = acme.Batches.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 80 || b.RequestCounts.Failed != 0 {
		t.Fatalf("after the spike: %s %+v", b.Status, b.RequestCounts)
	}
}

func mustRequest(ctx context.Context, url, key string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// TestBatchDeferredPastTheSpendStage: past the spend ceiling's first stage
// (shed speculative work), items at the batch class are refused by the
// chain like speculative work — and deferred, not failed: the batch stays
// in progress with nothing failed, and no reservation is left open.
func TestBatchDeferredPastTheSpendStage(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := batchConfig(t, up.URL)
	cfg.Spend = testSpend()
	cfg.Spend.CeilingPerHour = 12 * c / 0.92 // one call: 92% of the ceiling, past shed_speculative_at
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	var lines strings.Builder
	for i := range 6 {
		fmt.Fprintf(&lines, `{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, bigModelBody)
	}
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines.String()), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, option.WithJSONSet("sluice_completion_window", "1h"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "an item run, and one deferred by the spend ceiling", func() bool {
		b, err = acme.Batches.Get(ctx, b.ID)
		return err == nil && b.RequestCounts.Completed >= 1 && batchItems(t, s.g, "deferred") >= 1
	})
	if rc := b.RequestCounts; b.Status != openai.BatchStatusInProgress || rc.Failed != 0 || rc.Completed < 1 || rc.Completed > 2 {
		t.Fatalf("past the first stage: %s %+v", b.Status, rc)
	}
	if n := counter(t, s.g, "rejections", "spend_ceiling", "pipeline", "acme"); n < 1 {
		t.Fatalf("rejections{spend_ceiling,pipeline} = %v", n)
	}
	if _, err := acme.Batches.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the batch to be cancelled", func() bool {
		b, err = acme.Batches.Get(ctx, b.ID)
		return err == nil && b.Status == openai.BatchStatusCancelled
	})
	if b.RequestCounts.Failed != 0 {
		t.Fatalf("cancelled with %+v", b.RequestCounts)
	}
	if snap := s.g.spend.Snapshot(time.Now()); snap.Reservations != 0 {
		t.Fatalf("%d reservations left open", snap.Reservations)
	}
}

// TestBatchItemsAreBooked: an item's call is priced, reserved and booked
// like a live call of its tenant's: three items cost three calls, on the
// tenant's books, with no reservation left open.
func TestBatchItemsAreBooked(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	c := callCost(t, up.URL)
	cfg := batchConfig(t, up.URL)
	cfg.Spend = testSpend()
	s := serve(t, cfg)
	ctx := t.Context()
	acme := sdk(s.url, "sk-acme")
	var lines strings.Builder
	for i := range 3 {
		fmt.Fprintf(&lines, `{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, bigModelBody)
	}
	f, err := acme.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines.String()), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := acme.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, option.WithJSONSet("sluice_completion_window", "1h"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the batch to complete", func() bool {
		b, err = acme.Batches.Get(ctx, b.ID)
		return err == nil && b.Status == openai.BatchStatusCompleted
	})
	snap := s.g.spend.Snapshot(time.Now())
	if got := snap.Global.LastHourUSD; got < 2.99*c || got > 3.01*c {
		t.Errorf("booked %v for three items, want 3 × %v", got, c)
	}
	if len(snap.Tenants) != 1 || snap.Tenants[0].Name != "acme" || snap.Tenants[0].LastHourUSD != snap.Global.LastHourUSD {
		t.Errorf("tenants' books %+v", snap.Tenants)
	}
	if snap.Reservations != 0 {
		t.Errorf("%d reservations left open", snap.Reservations)
	}
}

// TestBatchConfigErrors: the batch section's faults name the field.
func TestBatchConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Config)
		want string
	}{
		{"passthrough over the Batch API", func(c *config.Config) {
			c.Passthrough = []config.PassthroughConfig{{Path: "/v1/files/", Methods: []string{"GET"}}}
		}, `passthrough[0].path: "/v1/files/" covers /v1/files`},
		{"rank", func(c *config.Config) { c.Batch.Rank = new(99) }, "batch.rank"},
		{"max_waiting", func(c *config.Config) { c.Batch.MaxWaiting = -1 }, "batch.max_waiting"},
		{"max_file_bytes", func(c *config.Config) { c.Batch.MaxFileBytes = 2 << 30 }, "batch.max_file_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig("http://127.0.0.1:1")
			cfg.Batch.Path = filepath.Join(t.TempDir(), "b.db")
			tc.edit(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	// Off, the same passthrough forwards /v1/files (no tenants).
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Passthrough = []config.PassthroughConfig{{Path: "/v1/files/", Methods: []string{"GET"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// batchItems is sluice_batch_items_total{outcome} of g, as a scrape reads
// it: the Batch API's executor's counter.
func batchItems(t *testing.T, g *Gateway, outcome string) uint64 {
	t.Helper()
	families, err := g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_batch_items_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	t.Fatalf("no sluice_batch_items_total{outcome=%q}", outcome)
	return 0
}
