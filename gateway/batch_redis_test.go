package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redistest"
)

// TestBatchRedisReplicas: with store.redis (and no batch.path), a batch
// submitted to replica a is run by a and b together, and the items a
// third replica claimed and never finished — it died — are taken over
// once its lease lapses. The output, read from b, has every custom_id
// once, and the provider got each item once: nobody ran the dead
// replica's items twice, and no item ran on both live replicas.
func TestBatchRedisReplicas(t *testing.T) {
	rs := redistest.Start(t)
	mock, up := testkit.StartMock(t, mockllm.Config{Slots: 8, Median: 20 * time.Millisecond})
	cluster := strings.ReplaceAll(t.Name(), "/", "-")
	cfg := batchConfig(t, up.URL)
	cfg.Batch.Path = "" // Redis keeps the batches
	cfg.Limits.MaxTimeout = config.Duration(2 * time.Second)
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: rs.URL(), Cluster: cluster, Timeout: config.Duration(time.Second),
		Lease: &config.LeaseConfig{Disabled: true}}} // each replica its own 4 slots
	a, b := serve(t, cfg), serve(t, cfg)
	ctx := t.Context()
	// The live replicas run no item until the dead one has claimed its
	// own: otherwise they might have run them all first.
	release := make(chan struct{})
	var once sync.Once
	start := func() { once.Do(func() { close(release) }) }
	t.Cleanup(start)
	for _, r := range []*served{a, b} {
		r.g.batch.SetHooks(batchapi.Hooks{BeforeItem: func(batch.Claim) { <-release }})
	}

	const n = 60
	acmeA, acmeB := sdk(a.url, "sk-acme"), sdk(b.url, "sk-acme")
	f, err := acmeA.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(chatLines(n)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	bt, err := acmeA.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: "24h"}, option.WithJSONSet("sluice_completion_window", "1h"))
	if err != nil {
		t.Fatal(err)
	}
	// The dead replica: it claims items as a third consumer, for a lease
	// of a second, and never runs them.
	client, err := store.NewClient(store.ClientOptions{URL: rs.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.NewRedis(store.Options{Client: client, Cluster: cluster, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	testkit.Eventually(t, "the batch to validate", func() bool {
		bt, err = acmeA.Batches.Get(ctx, bt.ID)
		return err == nil && bt.Status == openai.BatchStatusInProgress
	})
	dead, err := store.NewJobs(r, store.JobsOptions{}).Claim(context.Background(), time.Now(), "dead-replica", time.Second, 3)
	if err != nil || len(dead) != 3 {
		t.Fatalf("the dead replica claimed %d: %v", len(dead), err)
	}
	start()

	deadline := time.Now().Add(60 * time.Second)
	for bt.Status != openai.BatchStatusCompleted {
		if time.Now().After(deadline) {
			t.Fatalf("batch still %s: %+v", bt.Status, bt.RequestCounts)
		}
		time.Sleep(50 * time.Millisecond)
		if bt, err = acmeB.Batches.Get(ctx, bt.ID); err != nil {
			t.Fatal(err)
		}
	}
	if bt.RequestCounts.Completed != n || bt.RequestCounts.Failed != 0 {
		t.Fatalf("completed %+v", bt.RequestCounts)
	}
	resp, err := acmeB.Files.Content(ctx, bt.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		seen[l.CustomID]++
	}
	for i := range n {
		if id := "req-" + strconv.Itoa(i); seen[id] != 1 {
			t.Errorf("%s is %d times in the output", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("%d custom_ids in the output, want %d", len(seen), n)
	}
	if got := mock.Stats().Received; got != n {
		t.Errorf("the provider received %d calls for %d items", got, n)
	}
	ranA, ranB := batchItems(t, a.g, "completed"), batchItems(t, b.g, "completed")
	if ranA == 0 || ranB == 0 || ranA+ranB != n {
		t.Errorf("replica a ran %d items, b %d; want both some, %d together", ranA, ranB, n)
	}
	t.Logf("a ran %d, b %d; the dead replica's %d were taken over", ranA, ranB, len(dead))
}

// TestBatchRedisOnByDefault: store.redis alone turns the Batch API on (no
// batch.path needed), batch.disabled turns it off, and a passthrough of
// /v1/files to the provider leaves it off rather than refusing the config.
func TestBatchRedisOnByDefault(t *testing.T) {
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Store = &config.StoreConfig{Redis: &config.RedisStoreConfig{URL: "redis://127.0.0.1:1"}}
	if !cfg.BatchOn() {
		t.Error("store.redis without batch.path: the Batch API is off")
	}
	off := cfg
	off.Batch.Disabled = true
	if off.BatchOn() {
		t.Error("batch.disabled: the Batch API is on")
	}
	pass := cfg
	pass.Passthrough = []config.PassthroughConfig{{Path: "/v1/files", Methods: []string{"GET", "POST"}}}
	if err := pass.Validate(); err != nil || pass.BatchOn() {
		t.Errorf("passthrough of /v1/files with store.redis: %v, on=%v; want valid and off", err, pass.BatchOn())
	}
}
