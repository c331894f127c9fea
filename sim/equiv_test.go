package sim

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/mockllm"
	"github.com/sluicehq/sluice/retrybudget"
	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/spend"
)

// The gateway and the simulator run one admission chain (package chain)
// in two shells: the gateway's in real time over HTTP, the simulator's in
// virtual time. TestGatewayAndSimulatorDecideAlike sends one script of
// attempts through both and asks for the same verdict on every one, heard
// in the same order (which queued call is served first included).
//
// The script is built so that no verdict hinges on milliseconds: one slot,
// every call takes exactly equivService, attempts at least 50ms apart, and
// every verdict has at least 150ms to spare either way (a slot frees at
// 500ms at the earliest, the last arrival that depends on a full queue
// comes at 250ms; a timeout is either far longer than any wait or shorter
// than the service time alone). Two callers hear their verdicts 50ms apart
// at the least, which the gateway keeps to within a few milliseconds.
const (
	equivService = 500 * time.Millisecond
	equivModel   = "equiv-model"
	equivLong    = 10 * time.Second
)

// equivScript: what each attempt meets, on one slot and a queue of two.
var equivScript = []struct {
	arrival
	why string // what it exercises
}{
	{arrival{0, "acme", 0, equivLong, 1}, "a free slot: granted at once"},
	{arrival{50 * time.Millisecond, "acme", 0, equivLong, 0}, "queued behind the first, granted when it ends"},
	{arrival{100 * time.Millisecond, "acme-plain", 0, 200 * time.Millisecond, 2}, "no header, a timeout shorter than the service time: queue_wait"},
	{arrival{150 * time.Millisecond, "cheap", 0, equivLong, 0}, "a low-tier tenant queued: the queue is full"},
	{arrival{200 * time.Millisecond, "acme", 0, equivLong, 0}, "full queue: evicts the low-tier call, then is served"},
	{arrival{250 * time.Millisecond, "acme-speculative", 0, equivLong, 0}, "full queue, lowest rank: queue_full"},
	{arrival{300 * time.Millisecond, "acme", 1, equivLong, 0}, "a retry with an empty budget: retry_budget"},
	{arrival{350 * time.Millisecond, "cheap", 2, equivLong, 0}, "a retry of the other tenant: retry_budget"},
	// The queue has drained by 1000ms; the slot is busy until 1500ms.
	{arrival{1100 * time.Millisecond, "meter", 0, equivLong, 0}, "a tenant's first call: its cost reserved, served"},
	{arrival{1200 * time.Millisecond, "meter", 0, equivLong, 0}, "its spend rate is now past its budget: tenant_budget"},
	{arrival{1300 * time.Millisecond, "acme-plain", 0, equivLong, 2}, "no header, a copy of #2 that was refused: a retry past its budget, no slot free: retry_budget"},
	{arrival{1350 * time.Millisecond, "acme-plain", 0, equivLong, 1}, "no header, a copy of #0 that was served: a first attempt, served"},
}

// equivScenario is the simulator's side: the gateway's configuration as a
// scenario.
func equivScenario() *scenario.Scenario {
	sc := &scenario.Scenario{
		Name:     "equiv",
		Requests: 1,
		Upstream: scenario.Upstream{Concurrency: 1, Service: scenario.Service{Lognormal: &scenario.Lognormal{Median: equivService}}},
		Classes:  []scenario.Class{{Name: "interactive", Deadline: equivLong}, {Name: "speculative", Deadline: equivLong}},
		Traffic: []scenario.Source{
			{Name: "acme", Tenant: "acme", Class: "interactive", Model: equivModel},
			{Name: "acme-speculative", Tenant: "acme", Class: "speculative", Model: equivModel},
			{Name: "acme-plain", Tenant: "acme", Class: "interactive", Model: equivModel, Headers: "none"},
			{Name: "cheap", Tenant: "cheap", Tier: "low", Class: "interactive", Model: equivModel},
			{Name: "meter", Tenant: "meter", Class: "interactive", Model: equivModel},
		},
		Sluice: scenario.SluiceConfig{MaxQueue: 2, InitialServiceTime: equivService, RetryBudget: equivBudget},
		Spend:  equivSpend(),
	}
	for i := range sc.Traffic {
		// The gateway reads the prompt's size from the body and the
		// reservation from max_tokens; the budget below is so small that
		// any estimate of one call exceeds it.
		sc.Traffic[i].InputTokens, sc.Traffic[i].OutputTokens, sc.Traffic[i].MaxTokens = 10, 16, 16
	}
	return sc
}

// equivSpend prices the model and gives tenant meter a budget that one
// call's spend, projected per hour, is far past.
func equivSpend() *spend.Config {
	return &spend.Config{
		Prices:  map[string]spend.Price{equivModel: {InputPerMTok: 1, OutputPerMTok: 1}},
		Tenants: map[string]spend.TenantBudget{"meter": {PerHour: 1e-6}},
	}
}

// equivBudget earns a retry token only after minutes: every retry of the
// script finds its tenant's budget empty.
var equivBudget = retrybudget.Config{Ratio: 0.01, MinPerSecond: 0.001, MaxTokens: 1}

// equivGateway is the gateway's side, in front of upstream.
func equivGateway(upstream string) config.Config {
	b := equivBudget
	cfg := config.Config{
		Upstream: config.UpstreamConfig{URL: upstream, APIKeyEnv: "EQUIV_PROVIDER_KEY"},
		Admission: config.AdmissionConfig{Concurrency: 1, MaxQueue: new(2),
			InitialServiceTime: config.Duration(equivService)},
		Tenants: []chain.TenantConfig{
			{Name: "acme", APIKeysSHA256: []string{gateway.HashKey("key-acme")}},
			{Name: "cheap", Tier: "low", APIKeysSHA256: []string{gateway.HashKey("key-cheap")}},
			{Name: "meter", APIKeysSHA256: []string{gateway.HashKey("key-meter")}},
		},
		Spend: equivSpend(),
		// The gateway's own retries of the provider would draw on the
		// global budget; the mock never fails, and one attempt keeps it so.
		Retries: chain.RetryConfig{Budget: b, PerTenant: b, UpstreamAttempts: 1},
	}
	// The simulator has no CPU to saturate: the gateway's shedding on a
	// saturated process, which reads the test's own callers and provider
	// too (under -race, at CI's load), would refuse calls the script
	// expects decided by the chain alone.
	cfg.Server.Saturation.Disabled = true
	return cfg
}

// equivPlain are the sources whose callers send no attempt header
// (headers: none).
var equivPlain = map[string]bool{"acme-plain": true}

// equivHeaders are the headers a caller of each source sends.
var equivHeaders = map[string]map[string]string{
	"acme":             {"Authorization": "Bearer key-acme", "X-Sluice-Priority": "interactive"},
	"acme-speculative": {"Authorization": "Bearer key-acme", "X-Sluice-Priority": "speculative"},
	"acme-plain":       {"Authorization": "Bearer key-acme", "X-Sluice-Priority": "interactive"},
	"cheap":            {"Authorization": "Bearer key-cheap", "X-Sluice-Priority": "interactive"},
	"meter":            {"Authorization": "Bearer key-meter", "X-Sluice-Priority": "interactive"},
}

func TestGatewayAndSimulatorDecideAlike(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real HTTP for a second")
	}
	script := make([]arrival, len(equivScript))
	for i, s := range equivScript {
		script[i] = s.arrival
	}
	simulated, err := replay(t.Context(), equivScenario(), "spend", script)
	if err != nil {
		t.Fatal(err)
	}
	served := sendScript(t, equivGateway, script)

	verdicts := func(hs []heard) []string {
		out := make([]string, len(hs))
		for i, h := range hs {
			out[i] = h.Verdict
		}
		return out
	}
	if !slices.Equal(verdicts(simulated), verdicts(served)) || !slices.Equal(heardOrder(simulated), heardOrder(served)) {
		var b strings.Builder
		fmt.Fprintf(&b, "%-3s %-7s %-17s %-8s %-24s %-24s %s\n", "#", "at", "source", "attempt", "simulator (heard at)", "gateway (heard at)", "meant to exercise")
		for i, s := range equivScript {
			mark := ""
			if simulated[i].Verdict != served[i].Verdict {
				mark = "  <- differs"
			}
			fmt.Fprintf(&b, "%-3d %-7v %-17s %-8d %-24s %-24s %s%s\n", i, s.At, s.Source, s.Attempt,
				fmt.Sprintf("%s (%v)", simulated[i].Verdict, simulated[i].At.Round(time.Millisecond)),
				fmt.Sprintf("%s (%v)", served[i].Verdict, served[i].At.Round(time.Millisecond)), s.why, mark)
		}
		fmt.Fprintf(&b, "order heard: simulator %v, gateway %v\n", heardOrder(simulated), heardOrder(served))
		t.Fatalf("the gateway and the simulator decided differently:\n%s", b.String())
	}
	// The script means to exercise every verdict below; a change that made
	// both shells agree on something else would hollow the test out.
	want := []string{"served", "served", "queue_wait", "evicted", "served", "queue_full", "retry_budget", "retry_budget",
		"served", "tenant_budget", "retry_budget", "served"}
	if got := verdicts(simulated); !slices.Equal(got, want) {
		t.Errorf("both decided %v, the script is meant to exercise %v", got, want)
	}
}

// heardOrder is the order in which the callers heard their verdicts: the
// order of the decisions, grants included (which queued call was served
// first), as script indices.
func heardOrder(hs []heard) []int {
	order := make([]int, len(hs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpDur(hs[a].At, hs[b].At) })
	return order
}

// sendScript serves the mock provider and a gateway configured by gw in
// front of it on loopback, sends each scripted attempt at its offset in
// real time, and returns what each caller got, and when: "served" for a
// 200, the X-Sluice-Reason of a refusal, or what went wrong.
func sendScript(t *testing.T, gw func(upstream string) config.Config, script []arrival) []heard {
	t.Helper()
	// Runs last: every server, connection and caller is gone by then.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mock, err := mockllm.New(mockllm.Config{Median: equivService,
		Models: map[string]mockllm.ModelSpec{equivModel: {LatencyFactor: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	upURL, stopUp, err := loopback.Serve(mock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stopUp()
	g, err := gateway.New(gw(upURL), gateway.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Getenv: func(k string) string {
			if k == "EQUIV_PROVIDER_KEY" {
				return "sk-provider"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	gwURL, stopGw, err := loopback.Serve(g, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stopGw()
	tr := &http.Transport{MaxIdleConnsPerHost: len(script)}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// Connections are opened before the clock starts, so that no attempt
	// pays a TCP handshake the others do not.
	var warm sync.WaitGroup
	for range script {
		warm.Go(func() {
			if resp, err := client.Get(gwURL + "/sluice/healthz-unknown"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	warm.Wait()

	// Each attempt its own prompt, as each is its own request in the
	// simulator (its fingerprint), unless the script says it asks what
	// another asked (Prompt): the same bytes after a refusal are a retry to
	// the chain's recognise stage.
	body := func(i int) string {
		prompt := 100 + i
		if p := script[i].Prompt; p != 0 {
			prompt = p
		}
		return fmt.Sprintf(`{"model":"%s","messages":[{"role":"user","content":"hello %03d"}],"max_tokens":16}`, equivModel, prompt)
	}
	got := make([]heard, len(script))
	start := time.Now()
	var wg sync.WaitGroup
	for i, a := range script {
		wg.Go(func() {
			// The offset is the test's input: each attempt is sent at its
			// time, as a trace would be replayed.
			time.Sleep(time.Until(start.Add(a.At)))
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, gwURL+"/v1/chat/completions", strings.NewReader(body(i)))
			if err != nil {
				got[i] = heard{err.Error(), time.Since(start)}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			for k, v := range equivHeaders[a.Source] {
				req.Header.Set(k, v)
			}
			req.Header.Set("X-Sluice-Timeout-Ms", strconv.FormatInt(a.Timeout.Milliseconds(), 10))
			if !equivPlain[a.Source] {
				req.Header.Set("X-Sluice-Attempt", strconv.Itoa(a.Attempt))
			}
			resp, err := client.Do(req)
			if err != nil {
				got[i] = heard{"error: " + err.Error(), time.Since(start)}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			got[i].At = time.Since(start)
			switch {
			case err != nil:
				got[i].Verdict = "error reading the body: " + err.Error()
			case resp.StatusCode == http.StatusOK:
				got[i].Verdict = verdictServed
			case resp.Header.Get("X-Sluice-Reason") != "":
				got[i].Verdict = resp.Header.Get("X-Sluice-Reason")
			default:
				got[i].Verdict = fmt.Sprintf("status %d: %.80s", resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	return got
}
