package batchapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
)

// window is sluice's own completion window, beside OpenAI's 24h.
func window(w string) option.RequestOption { return option.WithJSONSet("sluice_completion_window", w) }

// served is a gateway on loopback, running its batches' items, until the
// end of the test.
type served struct {
	g   *gateway.Gateway
	url string
}

// serve mounts a gateway built from cfg as a program would: its handler
// on a server of the test's, and RunBatch until the end of the test, when
// it drains and the running items get shutdown_grace to finish.
func serve(t *testing.T, cfg config.Config) *served {
	t.Helper()
	cfg.ShutdownGrace = config.Duration(5 * time.Second)
	g, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Getenv: func(k string) string {
		if k == "TEST_PROVIDER_KEY" {
			return "sk-provider-secret"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.RunBatch(ctx) }()
	t.Cleanup(func() {
		g.Drain()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunBatch: %v", err)
		}
		srv.Close()
	})
	return &served{g: g, url: srv.URL}
}

// batchConfig is a gateway with the Batch API on, a store in the test's
// directory, and two tenants, acme and rival.
func batchConfig(t *testing.T, upstream string) config.Config {
	cfg := config.Config{
		Upstream:  config.UpstreamConfig{URL: upstream, APIKeyEnv: "TEST_PROVIDER_KEY"},
		Admission: config.AdmissionConfig{Concurrency: 4, MaxQueue: new(16)},
	}
	cfg.Tenants = []chain.TenantConfig{
		{Name: "acme", APIKeysSHA256: []string{chain.HashKey("sk-acme")}},
		{Name: "rival", APIKeysSHA256: []string{chain.HashKey("sk-rival")}, Classes: []string{"interactive"}, DisallowedClass: "refuse"},
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

// readAll reads and closes a response body.
func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metric is the value of the gateway's metric name — with outcome, of
// sluice_batch_items_total — as a scrape reads it.
func metric(t *testing.T, g *gateway.Gateway, name, outcome string) float64 {
	t.Helper()
	families, err := g.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if outcome != "" && !hasLabel(m.GetLabel(), "outcome", outcome) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s %s", name, outcome)
	return 0
}

func hasLabel(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
