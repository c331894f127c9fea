package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/mockllm"
)

// The tests of this package run `sluice serve`, whose Batch API keeps its
// store in the state directory by default: under the temporary directory,
// not the home of whoever runs the tests.
func init() {
	_ = os.Setenv("XDG_STATE_HOME", filepath.Join(os.TempDir(), "sluice-test-state"))
}

// TestHelperServe is not a test: TestBatchSurvivesKill runs the test binary
// again with SLUICE_HELPER_SERVE set, and this runs `sluice serve` in that
// process, for the test to kill -9.
func TestHelperServe(t *testing.T) {
	args := os.Getenv("SLUICE_HELPER_SERVE")
	if args == "" {
		t.Skip("run by TestBatchSurvivesKill")
	}
	os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
}

// gatewayProcess is `sluice serve` in a process of its own.
type gatewayProcess struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
}

func startServeProcess(t *testing.T, config string) *gatewayProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$")
	cmd.Env = append(os.Environ(), "SLUICE_HELPER_SERVE=serve --config "+config)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &gatewayProcess{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// "sluice listening on http://ADDR (admin http://ADDR)"
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "sluice listening on ") {
				lines <- sc.Text()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-lines:
		url, _, _ := strings.Cut(strings.TrimPrefix(l, "sluice listening on "), " ")
		p.url = url
	case <-time.After(60 * time.Second):
		t.Fatalf("sluice serve did not start: %s", p.stderr.String())
	}
	return p
}

// TestBatchSurvivesKill: a `sluice serve` killed with SIGKILL in the middle
// of a batch, then started again on the same store: the batch completes,
// no item is lost, the output names each custom_id once, and the provider
// was called again at most for the items that were in flight at the kill:
// claimed, which is at most the slots and the waiting places
// (batch.max_waiting, 2).
func TestBatchSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sluice serve twice")
	}
	const n, concurrency = 300, 4
	mock, err := mockllm.New(mockllm.Config{Slots: concurrency, Median: 40 * time.Millisecond, Sigma: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(mock)
	defer func() { mock.Close(); up.Close() }()

	dir := t.TempDir()
	config := filepath.Join(dir, "sluice.yaml")
	yaml := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nupstream:\n  url: %s\nadmission:\n  concurrency: %d\nbatch:\n  path: %s\n",
		up.URL, concurrency, filepath.Join(dir, "batch.db"))
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, `{"custom_id":"item-%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"line %d"}}`+"\n", i, i)
	}

	gw := startServeProcess(t, config)
	ctx := t.Context()
	client := openai.NewClient(option.WithBaseURL(gw.url+"/v1/"), option.WithAPIKey("sk-any"), option.WithMaxRetries(0))
	f, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines.String()), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1Embeddings, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatal(err)
	}
	// Kill it a third of the way through, with calls at the provider.
	deadline := time.Now().Add(60 * time.Second)
	for mock.Stats().Delivered < n/3 || mock.Stats().InService == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the batch did not get a third of the way: %+v\n%s", mock.Stats(), gw.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := gw.cmd.Process.Kill(); err != nil { // SIGKILL: no drain, no shutdown
		t.Fatal(err)
	}
	_ = gw.cmd.Wait()
	atKill := mock.Stats()

	gw = startServeProcess(t, config)
	client = openai.NewClient(option.WithBaseURL(gw.url+"/v1/"), option.WithAPIKey("sk-any"), option.WithMaxRetries(0))
	deadline = time.Now().Add(90 * time.Second)
	for b.Status != openai.BatchStatusCompleted {
		if time.Now().After(deadline) || b.Status == openai.BatchStatusFailed || b.Status == openai.BatchStatusExpired {
			t.Fatalf("after the restart the batch is %s %+v\n%s", b.Status, b.RequestCounts, gw.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
		if b, err = client.Batches.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.RequestCounts.Completed != n || b.RequestCounts.Failed != 0 || b.ErrorFileID != "" {
		t.Fatalf("completed %+v, error file %q", b.RequestCounts, b.ErrorFileID)
	}
	resp, err := client.Files.Content(ctx, b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int `json:"status_code"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Response.StatusCode != 200 {
			t.Errorf("line %s", sc.Text())
		}
		seen[l.CustomID]++
	}
	for i := range n {
		if c := seen[fmt.Sprintf("item-%d", i)]; c != 1 {
			t.Errorf("item-%d appears %d times in the output", i, c)
		}
	}
	final := mock.Stats()
	dup := final.Received - n
	t.Logf("just after the kill the provider had received %d and delivered %d (%d still in service); after the restart %d received for %d items: %d run twice",
		atKill.Received, atKill.Delivered, atKill.InService, final.Received, n, dup)
	if dup < 0 || dup > concurrency+2 {
		t.Errorf("%d items ran twice, want at most %d (the items claimed at the kill)", dup, concurrency+2)
	}
}

// TestServeBatchDefaults: with no batch section, serve keeps the store in
// the state directory; --batch-db overrides it; batch.disabled keeps it
// off; a default store held by another sluice leaves this one serving
// without batches instead of failing.
func TestServeBatchDefaults(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	load := func(args ...string) (config.Config, *serveFlags) {
		t.Helper()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.load(fs)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, &f
	}
	up := []string{"--upstream", "http://127.0.0.1:1", "--concurrency", "2"}
	if cfg, _ := load(up...); cfg.Batch.Path != filepath.Join(state, "sluice", "batch.db") || cfg.Batch.Disabled {
		t.Errorf("default batch %+v", cfg.Batch)
	}
	if cfg, _ := load(append(up, "--batch-db", "/tmp/x/b.db")...); cfg.Batch.Path != "/tmp/x/b.db" {
		t.Errorf("--batch-db: %+v", cfg.Batch)
	}
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 2}\nbatch: {disabled: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := load("--config", file); cfg.Batch.Path != "" || !cfg.Batch.Disabled {
		t.Errorf("batch.disabled: %+v", cfg.Batch)
	}
	// A config that forwards /v1/files to the provider (no tenants) keeps
	// doing so.
	if err := os.WriteFile(file, []byte("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 2}\npassthrough: [{path: /v1/files, methods: [GET, POST]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := load("--config", file); cfg.Batch.Path != "" {
		t.Errorf("batch on over a passthrough of /v1/files: %+v", cfg.Batch)
	}

	// Two serves on one machine with the default store: the first holds
	// it, the second serves without the Batch API.
	args := append(up, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	startServe(t, args...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr syncBuffer
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, args, pw, &stderr); pw.Close() }()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "sluice listening on") {
		t.Fatalf("the second serve did not start: %v %s", <-done, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !strings.Contains(stderr.String(), "the Batch API is off: its default store is in use") {
		t.Errorf("no warning: %s", stderr.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBatchCommand: `sluice batch submit` uploads a file, creates the
// batch and follows it to the end with a progress bar; status, results
// and cancel talk to the same gateway.
func TestBatchCommand(t *testing.T) {
	mock, err := mockllm.New(mockllm.Config{Slots: 4, Median: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(mock)
	defer func() { mock.Close(); up.Close() }()
	cfg := config.Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: config.UpstreamConfig{URL: up.URL},
		Admission: config.AdmissionConfig{Concurrency: 4}, Batch: batchapi.Config{Path: filepath.Join(t.TempDir(), "b.db")}}
	// As the gateway package's tests: the shedding on a saturated CPU reads
	// the whole process, here the test's provider and its callers too.
	cfg.Server.Saturation.Disabled = true
	g, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.Listen(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	url := "http://" + srv.API.Addr().String()

	file := filepath.Join(t.TempDir(), "in.jsonl")
	var lines strings.Builder
	for i := range 30 {
		fmt.Fprintf(&lines, `{"custom_id":"c%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"x"}}`+"\n", i)
	}
	if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"batch", "submit", file, "--gateway", url, "--window", "1h", "--poll", "20ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("submit: exit %d: %s %s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, ": completed, 30 of 30 completed, 0 failed") || !strings.Contains(stderr.String(), "30/30") {
		t.Fatalf("submit printed %q, bar %q", out, stderr.String())
	}
	id := strings.TrimSuffix(strings.Fields(out)[1], ":")
	stdout.Reset()
	if code := run([]string{"batch", "results", id, "--gateway", url}, &stdout, &stderr); code != 0 || strings.Count(stdout.String(), "\n") != 30 {
		t.Fatalf("results: exit %d, %d lines", code, strings.Count(stdout.String(), "\n"))
	}
	stdout.Reset()
	if code := run([]string{"batch", "status", "--gateway", url, id}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "completed") {
		t.Fatalf("status: exit %d, %s", code, stdout.String())
	}
	stderr.Reset()
	if code := run([]string{"batch", "cancel", id, "--gateway", url}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "409") {
		t.Fatalf("cancel of a completed batch: exit %d, %s", code, stderr.String())
	}
	if code := run([]string{"batch", "results", "--gateway", url}, &stdout, &stderr); code != 1 {
		t.Fatalf("results without an id: exit %d", code)
	}
}
