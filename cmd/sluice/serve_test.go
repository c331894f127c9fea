package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway"
)

func TestServeFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "4"}, "--upstream"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--concurrency", "0"}, "--concurrency"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--concurrency", "2", "--max-queue", "-1"}, "--max-queue"},
		{[]string{"--upstream", "ftp://x", "--concurrency", "2"}, "upstream.url"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--concurrency", "2", "--listen", "nope"}, "listen"},
		{[]string{"--config", "/does/not/exist.yaml"}, "exist.yaml"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--concurrency", "2", "extra"}, "extra"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--concurrency", "2", "--log-format", "xml"}, "--log-format"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--mode", "shadow"}, "--mode"},
	} {
		var out, errOut bytes.Buffer
		err := runServe(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestServeFlagsOverrideTheFile runs the real command: the file says one
// concurrency, the flag another, and the running gateway follows the flag.
func TestServeFlagsOverrideTheFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 3, max_queue: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin, stop := startServe(t, "--config", file, "--concurrency", "7", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	st := serveState(t, admin)
	if st.Concurrency != 7 || st.MaxQueue != 5 {
		t.Fatalf("state %+v: want concurrency 7 from the flag, max_queue 5 from the file", st)
	}
	stop()
}

// TestServeLearnsTheConcurrency: `sluice serve --upstream URL` and no
// other flag starts, and its gate runs at the learner's initial limit,
// which the state dump reports with its bounds.
func TestServeLearnsTheConcurrency(t *testing.T) {
	admin, stop := startServe(t, "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--batch-db", filepath.Join(t.TempDir(), "b.db"))
	st := serveState(t, admin)
	if st.Concurrency != 4 || len(st.Learned) != 1 || st.Learned[0].Concurrency != 4 || st.Learned[0].Min != 1 || st.Learned[0].Max != 1000 {
		t.Fatalf("state: concurrency %d, learned %+v: want 4, learnt between 1 and 1000", st.Concurrency, st.Learned)
	}
	stop()
}

// startServe runs `sluice serve` with args until the test ends (or stop is
// called, which checks that it shut down cleanly) and returns the admin
// listener's base URL.
func startServe(t *testing.T, args ...string) (admin string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, args, pw, io.Discard)
		pw.Close()
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v after the signal", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	}
	t.Cleanup(stop)
	line := make([]byte, 256)
	n, _ := pr.Read(line)
	go io.Copy(io.Discard, pr)
	// "sluice listening on http://ADDR (admin http://ADDR)"
	fields := strings.Fields(string(line[:n]))
	if len(fields) < 6 {
		t.Fatalf("first line %q", line[:n])
	}
	return strings.TrimSuffix(fields[5], ")"), stop
}

// TestAdminPprofIsOptIn: the runtime's profiles are on the admin listener
// only when asked for, by the file or the flag.
func TestAdminPprofIsOptIn(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 2}\nadmin_pprof: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--upstream", "http://127.0.0.1:1", "--concurrency", "2", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"default", base, http.StatusNotFound},
		{"flag", append(base, "--admin-pprof"), http.StatusOK},
		{"file", []string{"--config", file, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin, _ := startServe(t, tc.args...)
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
				resp, err := http.Get(admin + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, tc.want)
				}
				if tc.want == http.StatusOK && !strings.Contains(string(body), "goroutine") {
					t.Errorf("GET %s: body does not look like a profile: %.200s", path, body)
				}
			}
			// The gateway's own admin endpoints stay where they were.
			resp, err := http.Get(admin + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET /healthz: %d", resp.StatusCode)
			}
		})
	}
}

func TestCheckConfigAndHashKey(t *testing.T) {
	var out bytes.Buffer
	if err := runCheckConfig(context.Background(), []string{"../../examples/sluice.yaml"}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "ok") {
		t.Fatalf("check-config example: %v %q", err, out.String())
	}
	out.Reset()
	if err := runCheckConfig(context.Background(), []string{"../../examples/upstreams.yaml"}, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "east/gpt-4o") || !strings.Contains(out.String(), "anthropic/claude-3-5-haiku") {
		t.Fatalf("check-config examples/upstreams.yaml: %v %q", err, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("upstream: {url: http://x}\nadmission: {concurrency: 1, max_queue: -2}\n"), 0o600)
	if err := runCheckConfig(context.Background(), []string{bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "admission.max_queue") {
		t.Fatalf("check-config bad: %v", err)
	}
	stdinReader = strings.NewReader("sk-secret\n")
	defer func() { stdinReader = os.Stdin }()
	out.Reset()
	if err := runHashKey(context.Background(), nil, &out, io.Discard); err != nil || strings.TrimSpace(out.String()) != gateway.HashKey("sk-secret") {
		t.Fatalf("hash-key: %v %q", err, out.String())
	}
	stdinReader = strings.NewReader("")
	if err := runHashKey(context.Background(), nil, io.Discard, io.Discard); err == nil {
		t.Fatal("hash-key accepted an empty key")
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// serveState reads a running `sluice serve`'s /admin/v1/state.
func serveState(t *testing.T, admin string) gateway.State {
	t.Helper()
	resp, err := http.Get(admin + "/admin/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	var st gateway.State
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := jsonUnmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
