// Package redistest runs a real redis-server for tests: on a free loopback
// port, its data in a temporary directory, stopped at the end of the test. There is no
// fake Redis: what the tests pin is what Redis does.
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process on a fixed port, which Stop and
// Restart take down and bring back on the same port. Its data persists
// across them (an append-only file in a temporary directory, written at
// shutdown), as a production Redis's does.
type Server struct {
	t    testing.TB
	Addr string // host:port
	dir  string
	args []string // beyond the port, the address, the directory and persistence
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a redis-server for the test and stops it in t.Cleanup. When
// redis-server is not installed the test is skipped — but fails under
// CI=true, where .ci/run installs it.
func Start(t testing.TB) *Server {
	t.Helper()
	need(t, "redis-server")
	return startServer(t, nil)
}

// need skips the test when a program is not installed, or fails it under
// CI=true, where .ci/run installs it.
func need(t testing.TB, program string) {
	t.Helper()
	if _, err := exec.LookPath(program); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (CI=true): %v", program, err)
		}
		t.Skipf("%s is not installed: %v (apt-get install redis-server)", program, err)
	}
}

// startServer runs a redis-server with args beyond the port, on a free
// port; extra, when not nil, adds arguments that need the port (a
// sentinel's configuration file, a cluster bus port).
func startServer(t testing.TB, args []string, extra ...func(s *Server) []string) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	// redis-server has no port 0: pick a free port, and pick again if
	// another process took it before redis-server bound it.
	var err error
	for range 5 {
		s.Addr = freeAddr(t)
		s.args = args
		for _, f := range extra {
			s.args = append(s.args, f(s)...)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Stop shuts the server down (SIGTERM: it writes its data first) and
// waits for it to exit. Safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // in case it is paused
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Kill ends the server at once (SIGKILL: nothing written, no goodbye to
// its clients or its cluster) and waits for it to exit. Safe to call
// after Stop.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP) without ending it, as a
// host gone dark: its connections stay open and its port accepts, but
// nothing answers. Resume continues it.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Running reports whether the server is running (not stopped or killed).
func (s *Server) Running() bool { return s.cmd != nil }

// Restart starts the server again on the same port, after Stop or Kill.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("redis-server restart: %v", err)
	}
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "no", "--dir", s.dir, "--loglevel", "warning"}, s.args...)
	if len(s.args) > 0 && s.args[0] == "--sentinel" {
		// A sentinel's configuration file comes first, and it persists
		// nothing but that file.
		args = append([]string{filepath.Join(s.dir, "sentinel.conf")}, s.args...)
		args = append(args, "--port", port, "--bind", "127.0.0.1", "--dir", s.dir, "--loglevel", "warning")
	}
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	// Wait until it answers PING, or exits (the port was taken).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("exited before answering on %s", s.Addr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("no answer to PING on %s within 10s", s.Addr)
		}
	}
}

// ping sends an inline PING and reads +PONG.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 7)
	n, _ := c.Read(buf)
	return string(buf[:n]) == "+PONG\r\n"
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }
