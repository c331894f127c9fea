package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/loadgen"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/store/redistest"
)

// TestClusterPrimaryKilledMidStorm: two replicas share the provider's 16
// slots, their spend books and the Batch API through a real Redis Cluster
// (three primaries, three replicas); 4s into a storm of polite callers at
// 3× capacity the primary serving the fleet's slot is SIGKILLed. See
// primaryKilledMidStorm for what must hold.
func TestClusterPrimaryKilledMidStorm(t *testing.T) {
	cl := redistest.StartCluster(t)
	name := clusterName(t)
	primaryKilledMidStorm(t, &config.RedisStoreConfig{ClusterAddrs: cl.Addrs(), Cluster: name}, func() time.Time {
		sh, err := cl.ShardOf("sluice:{" + name + "}:leases")
		if err != nil {
			t.Fatal(err)
		}
		sh.Primary.Kill()
		_, at := redistest.Promoted(t, 15*time.Second, sh.Replicas...)
		return at
	})
}

// TestSentinelPrimaryKilledMidStorm: the same through a real Sentinel
// deployment (a primary, its replica, three Sentinels).
func TestSentinelPrimaryKilledMidStorm(t *testing.T) {
	st := redistest.StartSentinel(t)
	rc := &config.RedisStoreConfig{Sentinel: &config.SentinelConfig{Master: st.Master, Addrs: st.Addrs()}, Cluster: clusterName(t)}
	primaryKilledMidStorm(t, rc, func() time.Time {
		old := st.Primary()
		old.Kill()
		_, at := st.Promoted(old, 20*time.Second)
		return at
	})
}

// itemPrice is the mock's price of every model and the gateway's of the
// one the callers ask for, so that the books can be held to the bill.
var itemPrice = spend.Price{InputPerMTok: 1, OutputPerMTok: 4}

// primaryKilledMidStorm runs two replicas with the store rc (and the
// store's defaults otherwise: its 50ms timeout, its breaker, its lease
// interval) behind a balancer, a batch submitted before the storm, and
// kill — which kills the topology's primary and returns when the
// topology had recovered — 4s into the storm. Then:
//
//   - no answer is a 5xx without a sluice reason;
//   - the provider never had more than 16 + 2 calls at once;
//   - every replica calls Redis successfully again within 2s of the
//     topology's recovery;
//   - once the calls have ended, every replica's books (the fleet's spend
//     today) are within 1% of the provider's bill within 5s;
//   - the batch submitted before the kill and one submitted after it both
//     complete, and the provider received each of their items once.
func primaryKilledMidStorm(t *testing.T, rc *config.RedisStoreConfig, kill func() time.Time) {
	mc := storm("", "").mock()
	mc.Models = map[string]mockllm.ModelSpec{mockllm.DefaultModelKey: {LatencyFactor: 1,
		InputUSDPerMTok: itemPrice.InputPerMTok, OutputUSDPerMTok: itemPrice.OutputPerMTok}}
	p, err := StartProvider(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := ReplicaConfig(p.URL, slots, "", "")
	cfg.Store = &config.StoreConfig{Redis: rc}
	cfg.Spend = &spend.Config{Prices: map[string]spend.Price{loadgen.DefaultModel: itemPrice}}
	f := &Fleet{Provider: p}
	var urls []string
	for range 2 {
		r, err := StartReplica(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		f.Replicas = append(f.Replicas, r)
		urls = append(urls, r.URL)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := f.WaitShared(ctx, slots); err != nil {
		t.Fatal(err)
	}
	bal, err := StartBalancer(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer bal.Close()

	const items = 20
	before := submitBatch(t, f.Replicas[0].URL, "before", items)

	o := storm("", "")
	p.Reset()
	var peak int
	stopPeak, peakDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(peakDone)
		for {
			peak = max(peak, p.Peak())
			select {
			case <-stopPeak:
				peak = max(peak, p.Peak())
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	done := make(chan *loadgen.Report, 1)
	go func() {
		rep, err := loadgen.Run(t.Context(), loadgen.Config{Target: bal.URL, Rate: 3 * o.Capacity(), Duration: 12 * time.Second, Seed: 11,
			Classes: []loadgen.Class{{Name: "interactive", Weight: 1, Deadline: 5 * time.Second}}, Policy: loadgen.Polite{}, MaxInFlight: 4000})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	var trace []string
	stopTrace := make(chan struct{})
	traceDone := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(traceDone)
		last := ""
		for {
			var parts []string
			for _, r := range f.Replicas {
				c, _ := ClusterState(r.Admin)
				st := r.G.Gate().Stats()
				if c != nil {
					parts = append(parts, fmt.Sprintf("%s/%d/conc%d/inf%d", c.Mode, c.Slots, st.Concurrency, st.InFlight))
				}
			}
			line := fmt.Sprintf("%v prov=%d", parts, p.InFlight())
			if line != last {
				trace = append(trace, fmt.Sprintf("%6dms %s", time.Since(t0).Milliseconds(), line))
				last = line
			}
			select {
			case <-stopTrace:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stopTrace)
		<-traceDone
		if t.Failed() {
			t.Log("the replicas (mode/lease/gate's concurrency/in flight) and the provider's calls in flight, as they changed:\n" + strings.Join(trace, "\n"))
		}
	}()
	time.Sleep(4 * time.Second) // the storm under way
	// The batch before the kill must still be running across it, or the
	// test would show nothing of the claims' failover.
	bc := batchClient(f.Replicas[0].URL)
	bt, err := bc.Batches.Get(t.Context(), before)
	if err != nil {
		t.Fatal(err)
	}
	if bt.Status == openai.BatchStatusCompleted {
		t.Fatalf("the batch submitted before the kill completed before it: %+v", bt.RequestCounts)
	}
	killed := time.Now()
	recovered := kill()
	var back time.Duration
	for {
		up := 0
		for _, r := range f.Replicas {
			if s, err := storeState(r.Admin); err == nil && s.Up {
				up++
			}
		}
		if up == len(f.Replicas) {
			back = time.Since(recovered)
			break
		}
		if time.Since(recovered) > 10*time.Second {
			t.Fatalf("10s after the topology recovered, %d of %d replicas call Redis successfully", up, len(f.Replicas))
		}
		time.Sleep(5 * time.Millisecond)
	}
	after := submitBatch(t, f.Replicas[1].URL, "after", items)
	rep := <-done
	close(stopPeak)
	<-peakDone
	if rep == nil {
		t.FailNow()
	}

	// The books: once the provider has finished every call, each
	// replica's view of the fleet's spend today reaches the bill.
	deadline := time.Now().Add(10 * time.Second)
	for p.InFlight() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ended := time.Now()
	var books []float64
	var bill float64
	for {
		bill = p.Mock.Stats().CostUSD
		ok := true
		books = books[:0]
		for _, r := range f.Replicas {
			s, err := spendToday(r.Admin)
			books = append(books, s)
			if err != nil || math.Abs(s-bill) > 0.01*bill {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Since(ended) > 5*time.Second {
			t.Errorf("5s after the calls ended the replicas' books say %v, the bill %.6f: want within 1%%", books, bill)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	converged := time.Since(ended)
	var off float64 // the largest deviation of a replica's books from the bill
	for _, b := range books {
		off = max(off, math.Abs(b-bill)/bill)
	}

	for _, b := range []struct{ id, url string }{{before, f.Replicas[1].URL}, {after, f.Replicas[0].URL}} {
		waitBatch(t, b.url, b.id, items)
	}
	calls := p.ItemCalls()
	for _, tag := range []string{"before", "after"} {
		for i := range items {
			if n := calls[fmt.Sprintf("%s%s-%d", ItemMarker, tag, i)]; n != 1 {
				t.Errorf("the provider received item %s-%d %d times, want once", tag, i, n)
			}
		}
	}

	t.Logf("primary killed %v into the storm; topology recovered %v after the kill; every replica back on Redis %v after that; "+
		"provider peak %d; storm: %d requests, %.1f%% on time, unexplained 5xx %d; books %v, within %.3f%% of the bill ($%.6f) %v after the calls ended; two batches of %d complete, every item once (the first %d done at the kill)",
		4*time.Second, recovered.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond), peak, rep.Requests,
		100*rep.SuccessRatio, Unexplained5xx(rep), books, 100*off, bill, converged.Round(time.Millisecond), items, bt.RequestCounts.Completed)
	if back > 2*time.Second {
		t.Errorf("the replicas were back on Redis %v after the topology recovered, want within 2s", back)
	}
	if peak > slots+2 {
		t.Errorf("the provider had %d calls at once, want ≤ %d", peak, slots+2)
	}
	if n := Unexplained5xx(rep); n != 0 {
		t.Errorf("%d answers were 5xx without a sluice reason: %v", n, rep.Rejections)
	}
}

// storeState reads the store part of a replica's state dump.
func storeState(admin string) (*struct {
	Up    bool   `json:"up"`
	State string `json:"state"`
}, error) {
	var st struct {
		Store *struct {
			Up    bool   `json:"up"`
			State string `json:"state"`
		} `json:"store"`
	}
	if err := getJSON(admin+"/admin/v1/state", &st); err != nil {
		return nil, err
	}
	if st.Store == nil {
		return nil, fmt.Errorf("no store in the state dump")
	}
	return st.Store, nil
}

// spendToday is a replica's view of the fleet's spend over the last day.
func spendToday(admin string) (float64, error) {
	var st struct {
		Spend *struct {
			Global struct {
				LastDayUSD float64 `json:"last_day_usd"`
			} `json:"global"`
		} `json:"spend"`
	}
	if err := getJSON(admin+"/admin/v1/state", &st); err != nil {
		return 0, err
	}
	if st.Spend == nil {
		return 0, fmt.Errorf("no spend in the state dump")
	}
	return st.Spend.Global.LastDayUSD, nil
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func batchClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-fleet"), option.WithMaxRetries(0))
}

// submitBatch uploads a batch of n chat items named tag-0 … tag-(n-1) and
// creates it, trying again on a refusal (the store may be away) for up
// to 10s; it returns the batch's id.
func submitBatch(t *testing.T, url, tag string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"%s%s-%d"}],"max_tokens":8}}`+"\n",
			tag, i, loadgen.DefaultModel, ItemMarker, tag, i)
	}
	c := batchClient(url)
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		var file *openai.FileObject
		file, err = c.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(b.String()), tag+".jsonl", "application/jsonl"),
			Purpose: openai.FilePurposeBatch})
		if err == nil {
			var bt *openai.Batch
			bt, err = c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: file.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
				CompletionWindow: "24h"})
			if err == nil {
				return bt.ID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("batch %s not created within 10s: %v", tag, err)
	return ""
}

// waitBatch waits up to 90s for batch id to complete, read through url,
// and checks its output has each of its n items once.
func waitBatch(t *testing.T, url, id string, n int) {
	t.Helper()
	c := batchClient(url)
	deadline := time.Now().Add(90 * time.Second)
	var bt *openai.Batch
	var err error
	for {
		bt, err = c.Batches.Get(t.Context(), id)
		if err == nil && bt.Status == openai.BatchStatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s not completed within 90s: %+v %v", id, bt, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if bt.RequestCounts.Completed != int64(n) || bt.RequestCounts.Failed != 0 {
		t.Errorf("batch %s: %+v, want %d completed", id, bt.RequestCounts, n)
	}
	resp, err := c.Files.Content(t.Context(), bt.OutputFileID)
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
	if len(seen) != n {
		t.Errorf("batch %s: %d custom_ids in the output, want %d", id, len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s is %d times in the output", id, k)
		}
	}
}
