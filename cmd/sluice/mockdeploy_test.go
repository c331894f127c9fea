package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/mockllm"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMockDeploymentErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"", "empty"},
		{"deployments: []\n", "deployments: at least one"},
		{"deployments: [{name: a, listen: x}]\n", `deployments[0].listen: want host:port, got "x"`},
		{"deployments: [{name: '', listen: ':0'}]\n", "deployments[0].name:"},
		{"deployments: [{name: a, listen: ':0'}, {name: a, listen: ':0'}]\n", `deployments[1].name: "a" is already deployments[0]`},
		{"deployments: [{name: a, listen: ':0', slots: -1}]\n", "deployments[0].slots: must be >= 0"},
		{"deployments: [{name: a, listen: ':0', mode: lifo}]\n", "deployments[0].mode:"},
		{"deployments: [{name: a, listen: ':0', latency_factor: 0}]\n", "deployments[0].latency_factor: must be in (0, 1000]"},
		{"deployments: [{name: a, listen: ':0', models: {m: {rpm: -1}}}]\n", `deployments[0].models["m"].RPM: must be >= 0`},
		{"deployments: [{name: a, listen: ':0', speed: 2}]\n", "field speed not found"},
	} {
		p := writeFile(t, "d.yaml", tc.text)
		_, err := loadMockDeployments(p, mockllm.DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "--deployments: ") {
			t.Errorf("%q: err = %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
	p := writeFile(t, "d.yaml", "deployments: [{name: a, listen: ':0'}]\n")
	if _, _, _, err := parseMockFlags([]string{"--deployments", p, "--listen", "127.0.0.1:0"}, io.Discard); err == nil ||
		!strings.HasPrefix(err.Error(), "--listen: not with --deployments") {
		t.Errorf("--listen with --deployments: %v", err)
	}
}

// The flags are the defaults of every deployment; latency_factor scales
// the median.
func TestMockDeploymentsInheritTheFlags(t *testing.T) {
	p := writeFile(t, "d.yaml", `
deployments:
  - {name: primary, listen: "127.0.0.1:0", models: {m: {rpm: 60, tpm: 1000}}}
  - {name: slow, listen: "127.0.0.1:0", latency_factor: 4, slots: 2}
`)
	cfg, _, file, err := parseMockFlags([]string{"--deployments", p, "--median", "100ms", "--sigma", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := loadMockDeployments(file, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(deps) != 2 || deps[0].cfg.Median != 100*time.Millisecond || deps[0].cfg.Slots != 8 ||
		deps[0].cfg.Models["m"].RPM != 60 || deps[1].cfg.Median != 400*time.Millisecond ||
		deps[1].cfg.Slots != 2 || deps[1].cfg.Models != nil || deps[1].cfg.Sigma != 0 {
		t.Fatalf("deployments %+v", deps)
	}
}

// Two deployments from one process: each on its own port, with its own
// speed, limits and outage switch.
func TestMockCommandServesDeployments(t *testing.T) {
	p := writeFile(t, "d.yaml", `
deployments:
  - name: primary
    listen: "127.0.0.1:0"
    models: {m: {rpm: 2}}
  - name: secondary
    listen: "127.0.0.1:0"
    latency_factor: 3
`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runMock(ctx, []string{"--deployments", p, "--median", "20ms", "--sigma", "0"}, outW, io.Discard)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	base := map[string]string{}
	for _, name := range []string{"primary", "secondary"} {
		if !lines.Scan() {
			t.Fatalf("no address line for %s; command returned %v", name, <-done)
		}
		addr, ok := strings.CutPrefix(lines.Text(), "mock "+name+" listening on ")
		if !ok {
			t.Fatalf("line %q, want %s's address", lines.Text(), name)
		}
		base[name] = addr
	}
	rest := make(chan []string)
	go func() {
		var l []string
		for lines.Scan() {
			l = append(l, lines.Text())
		}
		rest <- l
	}()
	call := func(name string) *http.Response {
		t.Helper()
		resp, err := http.Post(base[name]+mockllm.PathChatCompletions, "application/json",
			strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for range 2 {
		if r := call("primary"); r.StatusCode != 200 {
			t.Fatalf("primary: %d", r.StatusCode)
		}
	}
	if r := call("primary"); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("primary over its rpm: %d", r.StatusCode)
	}
	r := call("secondary")
	if r.StatusCode != 200 || r.Header.Get("X-Mock-Service-Ms") != "60" {
		t.Fatalf("secondary: %d service %q ms, want 200 in 60", r.StatusCode, r.Header.Get("X-Mock-Service-Ms"))
	}
	resp, err := http.Post(base["secondary"]+mockllm.PathOutage, "application/json", strings.NewReader(`{"mode":"500"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("outage: %v %v", resp, err)
	}
	resp.Body.Close()
	if r := call("secondary"); r.StatusCode != 500 {
		t.Fatalf("secondary in outage: %d", r.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l := <-rest
	if len(l) != 2 || !strings.HasPrefix(l[0], "mock primary stats: ") || !strings.HasPrefix(l[1], "mock secondary stats: ") {
		t.Fatalf("final lines %q", l)
	}
	var st mockllm.Stats
	if err := json.Unmarshal([]byte(strings.TrimPrefix(l[0], "mock primary stats: ")), &st); err != nil || st.RateLimited != 1 {
		t.Fatalf("primary stats %+v %v", st, err)
	}
}
