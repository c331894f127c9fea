package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// upstreamsConfig is a gateway in front of deployments east and west, both
// serving gpt-4o-mini (west also answers to the alias mini) with four
// slots, and claude on anthropic (an Anthropic-flavoured deployment).
func upstreamsConfig(east, west, claude string) config.Config {
	return config.Config{
		Upstreams: []config.DeploymentConfig{
			{Name: "east", URL: east, Concurrency: 4, Models: []config.ModelConfig{{Name: "gpt-4o-mini"}}},
			{Name: "west", URL: west, Concurrency: 4, Models: []config.ModelConfig{{Name: "gpt-4o-mini", Aliases: []string{"mini"}}}},
			{Name: "anthropic", URL: claude, Flavour: config.FlavourAnthropic, Concurrency: 4, APIKeyEnv: "TEST_PROVIDER_KEY",
				Models: []config.ModelConfig{{Name: "claude-3-5-haiku"}}},
		},
	}
}

func chatTo(t *testing.T, url, model string) (*openai.ChatCompletion, *http.Response, error) {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	var resp *http.Response
	comp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hi " + t.Name() + time.Now().String())},
		MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&resp))
	return comp, resp, err
}

// Calls go to the first deployment of their model's route and say which
// answered; an alias reaches the deployment that knows it, under the
// deployment's name for the model; a model no deployment serves is a 404
// naming it, in the caller's API shape; Anthropic's API reaches only the
// Anthropic deployment, with the key in x-api-key.
func TestUpstreamsRouteNameAndRefuseUnknownModels(t *testing.T) {
	eastMock, east := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	westMock, west := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	_, claude := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	g, gw := startGateway(t, upstreamsConfig(east.URL, west.URL, claude.URL))

	_, resp, err := chatTo(t, gw.URL, "gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(contract.HeaderUpstream); got != "east" {
		t.Fatalf("%s: %q, want east (the first of the route)", contract.HeaderUpstream, got)
	}
	comp, resp, err := chatTo(t, gw.URL, "mini")
	if err != nil {
		t.Fatal(err)
	}
	if up, m := resp.Header.Get(contract.HeaderUpstream), resp.Header.Get(contract.HeaderModel); up != "west" || m != "gpt-4o-mini" || comp.Model != "gpt-4o-mini" {
		t.Fatalf("alias mini: upstream %q, %s %q, model answered %q; want west, gpt-4o-mini", up, contract.HeaderModel, m, comp.Model)
	}
	if e, w := eastMock.Stats().Completed, westMock.Stats().Completed; e != 1 || w != 1 {
		t.Fatalf("east served %d, west %d; want 1 each", e, w)
	}
	// The state adds the pools up: three of four slots, two calls served.
	if st := g.State(); st.Concurrency != 12 || st.Counters["completed_success"] != 2 || len(st.Pools) != 3 || st.Models["west/gpt-4o-mini"].Samples != 1 {
		t.Fatalf("state: concurrency %d, completed %d, pools %d, models %v; want 12, 2, 3 and west/gpt-4o-mini's sample",
			st.Concurrency, st.Counters["completed_success"], len(st.Pools), st.Models)
	}

	_, _, err = chatTo(t, gw.URL, "gpt-5-turbo")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || !strings.Contains(apiErr.Message, `"gpt-5-turbo"`) {
		t.Fatalf("unknown model: %v, want 404 model_not_found naming it", err)
	}
	// claude-3-5-haiku on the OpenAI API: served, but not on that API.
	if _, _, err = chatTo(t, gw.URL, "claude-3-5-haiku"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || !strings.Contains(apiErr.Message, "openai API") {
		t.Fatalf("an Anthropic model on the OpenAI API: %v, want 404 naming the API", err)
	}

	ac := anthropic.NewClient(aoption.WithBaseURL(gw.URL), aoption.WithAPIKey("sk-test"), aoption.WithMaxRetries(0))
	msg, err := ac.Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: "claude-3-5-haiku", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	}, aoption.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Usage.OutputTokens != 8 || resp.Header.Get(contract.HeaderUpstream) != "anthropic" {
		t.Fatalf("messages: %+v via %q", msg.Usage, resp.Header.Get(contract.HeaderUpstream))
	}
	_, err = ac.Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: "gpt-4o-mini", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var aErr *anthropic.Error
	if !errors.As(err, &aErr) || aErr.StatusCode != http.StatusNotFound {
		t.Fatalf("an OpenAI model on Anthropic's API: %v, want a 404", err)
	}
	var body struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(aErr.RawJSON()), &body); err != nil || body.Type != "error" || body.Error.Type != "not_found_error" || !strings.Contains(body.Error.Message, `"gpt-4o-mini"`) {
		t.Fatalf("404 on /v1/messages: %s, want Anthropic's shape naming the model", aErr.RawJSON())
	}
}

// A deployment that refuses connections: the call moves to the next
// deployment of the route before any byte reached the caller, and succeeds;
// the deployment is then down, and gets no calls but one probe a second
// (each a connection refused, and a move to west) until it answers again.
func TestUpstreamsFailoverAndProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eastAddr := ln.Addr().String()
	ln.Close() // east is down: connections refused
	var refused atomic.Int64
	westMock, west := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	_, claude := testkit.StartMock(t, mockllm.Config{Slots: 4})
	tr := newTransport(16)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil && addr == eastAddr {
			refused.Add(1)
		}
		return c, err
	}
	opts := testOptions()
	opts.Transport = tr
	var logs logBuffer
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	g, err := New(upstreamsConfig("http://"+eastAddr, west.URL, claude.URL), opts)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	start := time.Now()
	var resp0 *http.Response
	for i := range 20 {
		_, resp, err := chatTo(t, gw.URL, "gpt-4o-mini")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i == 0 {
			resp0 = resp
		}
		if got := resp.Header.Get(contract.HeaderUpstream); got != "west" {
			t.Fatalf("call %d answered by %q, want west", i, got)
		}
	}
	elapsed := time.Since(start)
	if l := logs.line(t, resp0.Header.Get(contract.HeaderRequestID)); l["upstream"] != "west" || l["upstream_attempts"] != 2.0 {
		t.Fatalf("the access log of the first call: upstream %v after %v attempts, want west after 2", l["upstream"], l["upstream_attempts"])
	}
	// The first call, then one probe per elapsed second at most.
	if n, most := refused.Load(), 1+int64(elapsed/time.Second); n < 1 || n > most {
		t.Fatalf("east was tried %d times in %v, want at most %d", n, elapsed, most)
	}
	if w := westMock.Stats().Completed; w != 20 {
		t.Fatalf("west served %d, want 20", w)
	}
	if n := counter(t, g, "failovers", "east/gpt-4o-mini"); n < 1 {
		t.Fatalf("failovers from east counted %v", n)
	}
	// East comes back on its address.
	eastMock, err := mockllm.New(mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", eastAddr)
	if err != nil {
		t.Skipf("east's port was taken meanwhile: %v", err)
	}
	eastSrv := httptest.NewUnstartedServer(eastMock)
	eastSrv.Listener.Close()
	eastSrv.Listener = ln
	eastSrv.Start()
	t.Cleanup(func() { eastMock.Close(); eastSrv.Close() })
	testkit.Eventually(t, "east back after a probe", func() bool {
		_, resp, err := chatTo(t, gw.URL, "gpt-4o-mini")
		return err == nil && resp.Header.Get(contract.HeaderUpstream) == "east"
	})
}

// X-Sluice-Degrade takes only "allow".
func TestDegradeHeaderValue(t *testing.T) {
	_, east := testkit.StartMock(t, mockllm.Config{Slots: 4})
	_, gw := startGateway(t, upstreamsConfig(east.URL, east.URL, east.URL))
	resp := post(t, t.Context(), gw.URL, chatBody, map[string]string{contract.HeaderDegrade: "yes"})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), contract.HeaderDegrade) {
		t.Fatalf("X-Sluice-Degrade: yes → %d %s, want 400 naming the header", resp.StatusCode, b)
	}
}

// The estimate endpoint answers for the pool the call would go to: the
// deployment, and a 404 naming a model no deployment serves.
func TestEstimateNamesTheDeployment(t *testing.T) {
	_, east := testkit.StartMock(t, mockllm.Config{Slots: 4})
	_, west := testkit.StartMock(t, mockllm.Config{Slots: 4})
	_, gw := startGateway(t, upstreamsConfig(east.URL, west.URL, east.URL))
	get := func(q string) (*http.Response, contract.Estimate) {
		t.Helper()
		resp, err := http.Get(gw.URL + contract.EstimatePath + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		var e contract.Estimate
		if resp.StatusCode == http.StatusOK {
			decodeJSON(t, resp, &e)
		} else {
			resp.Body.Close()
		}
		return resp, e
	}
	if resp, e := get("model=mini"); resp.StatusCode != http.StatusOK || e.Upstream != "west" || !e.Admit {
		t.Fatalf("estimate for mini: %d %+v, want admitted at west", resp.StatusCode, e)
	}
	if resp, _ := get("model=nope"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("estimate for an unknown model: %d, want 404", resp.StatusCode)
	}
}

// A pool with no tpm configured learns its deployment's limit from the
// first answer's x-ratelimit headers, and paces from then on: with a
// limit of 600 tokens a minute and calls of about 110, the seventh call
// waits for its tokens instead of drawing the provider's 429.
func TestPoolLearnsTheTokenLimitFromTheHeaders(t *testing.T) {
	m, up := testkit.StartMock(t, mockllm.Config{Slots: 8, Models: map[string]mockllm.ModelSpec{"gpt-4o-mini": {TPM: 600}}})
	g, gw := startGateway(t, config.Config{Upstreams: []config.DeploymentConfig{{Name: "east", URL: up.URL, Concurrency: 4, Models: []config.ModelConfig{{Name: "gpt-4o-mini"}}}}})
	if st := g.State(); st.Pools[0].Tokens != nil {
		t.Fatalf("a bucket before any answer: %v", *st.Pools[0].Tokens)
	}
	body := func(i int) string { // distinct prompts: a copy of a failed call would be a retry
		return fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%03d%s"}],"max_tokens":100}`, i, strings.Repeat("x", 37))
	}
	resp := post(t, t.Context(), gw.URL, body(0), map[string]string{contract.HeaderTimeoutMs: "1000"})
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d", resp.StatusCode)
	}
	st := g.State()
	if st.Pools[0].Tokens == nil || *st.Pools[0].Tokens > 600-100 {
		t.Fatalf("after the first answer: tokens %v, want a learned bucket below 500", st.Pools[0].Tokens)
	}
	// The rest of the minute's tokens go in five calls; the next ones
	// would need ~11 s of refill each, past their 1 s deadline: refused
	// here, not by the provider.
	var refused int
	for i := range 8 {
		resp := post(t, t.Context(), gw.URL, body(i+1), map[string]string{contract.HeaderTimeoutMs: "1000"})
		readAll(t, resp)
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(contract.HeaderReason) == "queue_wait" {
			refused++
		}
	}
	if n := m.Stats().RateLimited; n != 0 || refused == 0 {
		t.Fatalf("the provider refused %d calls (want 0); the gateway refused %d for their tokens (want some)", n, refused)
	}
}

// A reload with upstreams gives every pool's gate the new waiting room and
// keeps its slots; one that changes the deployments is refused, naming the
// field, with nothing changed.
func TestReloadReachesEveryPool(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 4})
	cfg := upstreamsConfig(up.URL, up.URL, up.URL)
	next := cfg
	opts := testOptions()
	opts.ConfigSource = func() (config.Config, error) { return next, nil }
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	next.Admission.MaxQueue = new(5)
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, p := range g.State().Pools {
		pool := g.pools[slices.IndexFunc(g.pools, func(q *gatewayPool) bool { return q.info.Name == p.Name })]
		if mq := pool.info.Gate.MaxQueue(); mq != 5 || p.Concurrency != 4 {
			t.Fatalf("pool %s after the reload: max_queue %d, concurrency %d; want 5 and 4", p.Name, mq, p.Concurrency)
		}
	}
	next = upstreamsConfig(up.URL, up.URL, up.URL)
	next.Upstreams[1].Concurrency = 9
	var re *ReloadError
	if err := g.Reload(); !errors.As(err, &re) || !re.RestartRequired || !strings.HasPrefix(re.Field, "upstreams[1]") {
		t.Fatalf("changing a deployment: %v, want restart_required naming upstreams[1]", err)
	}
}

// A passed-through call that names no model (GET /v1/models) goes to the
// first deployment of its API.
func TestUpstreamsPassThroughWithoutAModel(t *testing.T) {
	_, east := testkit.StartMock(t, mockllm.Config{Slots: 4})
	_, west := testkit.StartMock(t, mockllm.Config{Slots: 4})
	cfg := upstreamsConfig(east.URL, west.URL, west.URL)
	cfg.Passthrough = []config.PassthroughConfig{{Path: "/v1/models", Methods: []string{http.MethodGet}}}
	_, gw := startGateway(t, cfg)
	resp, err := http.Get(gw.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(contract.HeaderUpstream) != "east" || !strings.Contains(string(b), "gpt-4o-mini") {
		t.Fatalf("GET /v1/models: %d via %q: %.200s", resp.StatusCode, resp.Header.Get(contract.HeaderUpstream), b)
	}
}
