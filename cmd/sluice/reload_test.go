package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServeLogged is startServe keeping serve's log.
func startServeLogged(t *testing.T, args ...string) (admin string, logs *lockedBuffer) {
	t.Helper()
	logs = &lockedBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, args, pw, logs)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	line := make([]byte, 256)
	n, _ := pr.Read(line)
	go io.Copy(io.Discard, pr)
	fields := strings.Fields(string(line[:n]))
	if len(fields) < 6 {
		t.Fatalf("first line %q; log:\n%s", line[:n], logs.String())
	}
	return strings.TrimSuffix(fields[5], ")"), logs
}

type servedState struct {
	Concurrency int `json:"concurrency"`
	MaxQueue    int `json:"max_queue"`
	Reloads     struct {
		OK     int `json:"ok"`
		Errors int `json:"errors"`
	} `json:"reloads"`
}

func getState(t *testing.T, admin string) servedState {
	t.Helper()
	resp, err := http.Get(admin + "/admin/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st servedState
	if err := jsonUnmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState polls the state until cond holds: the signal is handled on
// serve's own goroutine, at a moment the test cannot observe directly.
func waitState(t *testing.T, admin, what string, cond func(servedState) bool) servedState {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := getState(t, admin)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeReloadsOnSIGHUP runs the real command and sends the process a
// real SIGHUP: the file's new concurrency and bound apply, the flags given
// at start still override the file, and a file that does not validate is
// refused (logged, counted) with the running config kept.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 3, max_queue: 5}\n")
	// serve registers for SIGHUP before it prints its first line.
	admin, logs := startServeLogged(t, "--config", file, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	if st := getState(t, admin); st.Concurrency != 3 || st.MaxQueue != 5 {
		t.Fatalf("at start: %+v", st)
	}
	write("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 6, max_queue: 9}\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitState(t, admin, "the reload", func(st servedState) bool { return st.Reloads.OK == 1 })
	if st := getState(t, admin); st.Concurrency != 6 || st.MaxQueue != 9 {
		t.Fatalf("after SIGHUP: %+v, want concurrency 6 and max_queue 9 from the file", st)
	}
	write("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 0, max_queue: 2}\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, admin, "the refusal", func(st servedState) bool { return st.Reloads.Errors == 1 })
	if st.Concurrency != 6 || st.MaxQueue != 9 {
		t.Fatalf("after a refused reload: %+v, want the running config kept", st)
	}
	if l := logs.String(); !strings.Contains(l, "config reload refused") || !strings.Contains(l, "field=admission.concurrency") {
		t.Fatalf("serve's log does not name the refused field:\n%s", l)
	}
}

// TestServeFlagsOverrideTheFileOnReload: a flag given at start keeps
// overriding the file at each reload.
func TestServeFlagsOverrideTheFileOnReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 3, max_queue: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin, _ := startServeLogged(t, "--config", file, "--concurrency", "7", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	if err := os.WriteFile(file, []byte("upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 4, max_queue: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(admin+"/admin/v1/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("reload: %d %s", resp.StatusCode, b)
	}
	if st := getState(t, admin); st.Concurrency != 7 || st.MaxQueue != 2 {
		t.Fatalf("after the reload: %+v, want concurrency 7 from the flag, max_queue 2 from the file", st)
	}
}

// TestReloadOnSignal: each signal is one reload, and the loop ends with
// its context.
func TestReloadOnSignal(t *testing.T) {
	sig := make(chan os.Signal)
	done := make(chan struct{}, 3)
	ctx, cancel := context.WithCancel(t.Context())
	wait := reloadOnSignal(ctx, sig, func() error { done <- struct{}{}; return nil })
	sig <- syscall.SIGHUP
	sig <- syscall.SIGHUP
	<-done
	<-done
	cancel()
	wait()
	if len(done) != 0 {
		t.Fatalf("%d reloads too many", len(done))
	}
}

// TestTheWaitingRoomIsPrinted: check-config and serve's startup log say
// the waiting room's bound, derived when the config sets none.
func TestTheWaitingRoomIsPrinted(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		yaml, want string
	}{
		// 2 slots × the batch class's 5m ÷ 1s: 600.
		{"upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 2}\n", "max_queue 600, derived"},
		{"upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 2, max_queue: 7}\n", "max_queue 7, as set"},
		{"upstream: {url: \"http://127.0.0.1:1\"}\nadmission: {concurrency: 2, max_queue: 0}\n", "max_queue 0, as set"},
	} {
		file := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := runCheckConfig(context.Background(), []string{file}, &out, io.Discard); err != nil || !strings.Contains(out.String(), tc.want) {
			t.Errorf("check-config %q: %v %q, want %q", tc.yaml, err, out.String(), tc.want)
		}
	}
	_, logs := startServeLogged(t, "--upstream", "http://127.0.0.1:1", "--concurrency", "2", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	// Serve logs its first line once it serves, after the address is
	// printed.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "sluice gateway serving") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "max_queue=600") {
		t.Errorf("the startup log does not print the derived waiting room:\n%s", l)
	}
}
