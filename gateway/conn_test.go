package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/mockllm"
)

// startServer runs a Server until the test ends and returns the API
// address.
func startServer(t *testing.T, cfg Config) (*Gateway, string) {
	t.Helper()
	sv := serve(t, cfg)
	return sv.g, strings.TrimPrefix(sv.url, "http://")
}

// dialFrom opens a raw connection to addr from the loopback address from
// (127.0.0.1, 127.0.0.2, …: all of 127/8 is loopback on Linux).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readToEOF reads c until the server closes it, giving up after limit. It
// returns what was read and how long the close took.
func readToEOF(t *testing.T, c net.Conn, limit time.Duration) ([]byte, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(limit)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err := io.Copy(&buf, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open after %v (read %q)", limit, buf.String())
	}
	// A reset after the answer is a close too.
	return buf.Bytes(), time.Since(start)
}

// connServer is a config whose timeouts are short enough for tests.
func connServer(upstream string, s ServerConfig) Config {
	cfg := baseConfig(upstream)
	cfg.Server = s
	return cfg
}

const (
	acmeKey    = "sk-tenant-acme"
	chatStream = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"stream":true}`
)

func withTenant(cfg Config) Config {
	cfg.Upstream.APIKeyEnv = "TEST_PROVIDER_KEY"
	cfg.Tenants = []TenantConfig{{Name: "acme", APIKeysSHA256: []string{HashKey(acmeKey)}}}
	return cfg
}

// rawRequest is a chat completion as bytes, with the given key (none when
// empty).
func rawRequest(key, body string) string {
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", auth, len(body), body)
}

// roundTrip writes req on c and reads one response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestSlowBodyIsCutAtTheReadBodyTimeout: a client that declares a body and
// trickles it, a byte every 20ms, is answered and let go once
// read_body_timeout has passed since its headers, however steadily it
// sends.
func TestSlowBodyIsCutAtTheReadBodyTimeout(t *testing.T) {
	_, up := startMock(t, mockllm.Config{})
	const timeout = 300 * time.Millisecond
	_, addr := startServer(t, connServer(up.URL, ServerConfig{ReadBodyTimeout: Duration(timeout)}))
	c := dialFrom(t, "127.0.0.1", addr)
	if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	got, took := readToEOF(t, c, 5*time.Second)
	close(stop)
	<-trickled
	if took < timeout-50*time.Millisecond || took > timeout+2*time.Second {
		t.Errorf("closed after %v, want about %v", took, timeout)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 400")) || !bytes.Contains(got, []byte("timeout")) {
		t.Errorf("answer %q, want a 400 naming the timeout", got)
	}
}

// TestIdleConnectionsAreClosed: a connection that says nothing is closed at
// read_header_timeout; one that goes quiet after an answer, a 401
// included, at idle_timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	_, up := startMock(t, mockllm.Config{})
	const timeout = 300 * time.Millisecond
	_, addr := startServer(t, withTenant(connServer(up.URL, ServerConfig{
		ReadHeaderTimeout: Duration(timeout), IdleTimeout: Duration(timeout)})))

	silent := dialFrom(t, "127.0.0.1", addr)
	if got, took := readToEOF(t, silent, 5*time.Second); took > timeout+2*time.Second || len(got) > 0 {
		t.Errorf("silent connection: closed after %v with %q, want about %v and nothing", took, got, timeout)
	}
	for _, key := range []string{"sk-wrong", acmeKey} {
		c := dialFrom(t, "127.0.0.1", addr)
		br := bufio.NewReader(c)
		resp := roundTrip(t, c, br, rawRequest(key, chatBody))
		if want := map[bool]int{true: 200, false: 401}[key == acmeKey]; resp.StatusCode != want {
			t.Fatalf("key %s: status %d, want %d", key, resp.StatusCode, want)
		}
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(5 * time.Second))
		_, err := br.ReadByte()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("key %s: the idle connection was still open after 5s", key)
		}
		if took := time.Since(start); took < timeout-50*time.Millisecond || took > timeout+2*time.Second {
			t.Errorf("key %s: idle connection closed after %v, want about %v", key, took, timeout)
		}
	}
}

// TestConnectionCapRefusesTheNextOne: at max_connections the next
// connection gets a canned 503 with Retry-After and is closed at once,
// while a client already connected goes on being served.
func TestConnectionCapRefusesTheNextOne(t *testing.T) {
	_, up := startMock(t, mockllm.Config{})
	const max = 4
	_, addr := startServer(t, connServer(up.URL, ServerConfig{MaxConnections: max, MaxUnauthenticatedPerIP: max}))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	url := "http://" + addr
	reused := func() bool {
		var r bool
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { r = i.Reused }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("legitimate client: %d %s", resp.StatusCode, b)
		}
		return r
	}
	reused()
	for range max - 1 {
		dialFrom(t, "127.0.0.1", addr)
	}
	extra := dialFrom(t, "127.0.0.1", addr)
	got, took := readToEOF(t, extra, 5*time.Second)
	if took > time.Second {
		t.Errorf("refused after %v, want at once", took)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("refusal %q: %v", got, err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get(contract.HeaderReason) != "max_connections" {
		t.Errorf("refusal: %d %v, want 503 with Retry-After and the reason", resp.StatusCode, resp.Header)
	}
	if !reused() {
		t.Error("the legitimate client's second request did not reuse its connection")
	}
}

// TestUnauthenticatedConnectionsPerAddress: one address may hold
// max_unauthenticated_per_ip connections that have not sent a request with
// a valid key; the next is refused with a canned 429, other addresses are
// not, a 401 does not count as authenticated, and a valid request frees
// its connection's place.
func TestUnauthenticatedConnectionsPerAddress(t *testing.T) {
	_, up := startMock(t, mockllm.Config{})
	_, addr := startServer(t, withTenant(connServer(up.URL, ServerConfig{MaxConnections: 16, MaxUnauthenticatedPerIP: 2})))
	refused := func(c net.Conn) {
		t.Helper()
		got, took := readToEOF(t, c, 5*time.Second)
		if !bytes.HasPrefix(got, []byte("HTTP/1.1 429")) || !bytes.Contains(got, []byte("unauthenticated_per_ip")) || took > time.Second {
			t.Fatalf("after %v: %q, want a canned 429 at once", took, got)
		}
	}
	served := func(c net.Conn, key string, want int) {
		t.Helper()
		if resp := roundTrip(t, c, bufio.NewReader(c), rawRequest(key, chatBody)); resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	first := dialFrom(t, "127.0.0.1", addr)
	second := dialFrom(t, "127.0.0.1", addr)
	refused(dialFrom(t, "127.0.0.1", addr))
	served(dialFrom(t, "127.0.0.2", addr), acmeKey, 200)

	served(first, acmeKey, 200) // first no longer counts
	third := dialFrom(t, "127.0.0.1", addr)
	served(second, "sk-wrong", 401) // still counts
	served(third, "", 401)          // still counts
	refused(dialFrom(t, "127.0.0.1", addr))
}

// TestLongStreamOutlivesEveryTimeout: a stream that runs for several times
// every configured timeout is delivered whole, and its connection then
// serves another request: neither the body's read deadline, nor the idle
// or header timeouts, nor the per-write stall timeout cuts it.
func TestLongStreamOutlivesEveryTimeout(t *testing.T) {
	const service = 1200 * time.Millisecond
	_, up := startMock(t, mockllm.Config{Median: service, Models: map[string]mockllm.ModelSpec{mockllm.DefaultModelKey: {LatencyFactor: 1}}})
	const timeout = 200 * time.Millisecond
	_, addr := startServer(t, connServer(up.URL, ServerConfig{ReadHeaderTimeout: Duration(timeout),
		ReadBodyTimeout: Duration(timeout), IdleTimeout: Duration(timeout), WriteTimeout: Duration(timeout)}))
	c := dialFrom(t, "127.0.0.1", addr)
	br := bufio.NewReader(c)
	start := time.Now()
	if _, err := io.WriteString(c, rawRequest("", chatStream)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the stream broke off after %v: %v (read %q)", time.Since(start), err, body)
	}
	if took := time.Since(start); resp.StatusCode != 200 || !bytes.Contains(body, []byte("data: [DONE]")) || took < service {
		t.Fatalf("status %d after %v, %d bytes (whole: %v): want the whole stream over %v", resp.StatusCode, took, len(body), bytes.Contains(body, []byte("[DONE]")), service)
	}
	if resp := roundTrip(t, c, br, rawRequest("", chatBody)); resp.StatusCode != 200 {
		t.Fatalf("the next request on the connection: %d", resp.StatusCode)
	}
}

func TestServerConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		s    ServerConfig
		want string
	}{
		{ServerConfig{ReadHeaderTimeout: -1}, "server.read_header_timeout"},
		{ServerConfig{ReadHeaderTimeout: Duration(11 * time.Minute)}, "server.read_header_timeout"},
		{ServerConfig{ReadBodyTimeout: Duration(2 * time.Hour)}, "server.read_body_timeout"},
		{ServerConfig{IdleTimeout: -1}, "server.idle_timeout"},
		{ServerConfig{WriteTimeout: Duration(2 * time.Hour)}, "server.write_timeout"},
		{ServerConfig{MaxConnections: -1}, "server.max_connections"},
		{ServerConfig{MaxConnections: 1<<20 + 1}, "server.max_connections"},
		{ServerConfig{MaxUnauthenticatedPerIP: -1}, "server.max_unauthenticated_per_ip"},
		{ServerConfig{MaxConnections: 10, MaxUnauthenticatedPerIP: 11}, "server.max_unauthenticated_per_ip"},
	} {
		cfg := baseConfig("http://127.0.0.1:1")
		cfg.Server = tc.s
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.s, err, tc.want)
		}
	}
	if _, err := ParseConfig([]byte("upstream: {url: \"http://x\"}\nadmission: {concurrency: 1}\nserver: {idle_timeout: 5}\n")); err == nil {
		t.Error("a bare number for idle_timeout was accepted")
	}
}

func TestServerDefaults(t *testing.T) {
	l, err := ServerConfig{}.effective(10<<20, 1024)
	if err != nil {
		t.Fatal(err)
	}
	want := connLimits{readHeader: 10 * time.Second, readBody: 20 * time.Second, idle: time.Minute, write: time.Minute,
		maxConns: 480, maxUnauthPerIP: 60, fdLimit: 1024}
	if l != want {
		t.Errorf("defaults at 1024 descriptors: %+v, want %+v", l, want)
	}
	if l, _ := (ServerConfig{}).effective(10<<20, 1<<20); l.maxConns != 1<<16 {
		t.Errorf("derived cap at 2^20 descriptors: %d, want 65536", l.maxConns)
	}
	for _, fds := range []uint64{0, 50} {
		if _, err := (ServerConfig{}).effective(10<<20, fds); err == nil || !strings.Contains(err.Error(), "server.max_connections") {
			t.Errorf("%d descriptors: %v, want an error naming server.max_connections", fds, err)
		}
	}
	if l, err := (ServerConfig{MaxConnections: 100}).effective(1<<20, 0); err != nil || l.maxUnauthPerIP != 12 || l.readBody != 11*time.Second {
		t.Errorf("set cap, unknown descriptors: %+v %v", l, err)
	}
}

// emfileListener fails Accept with EMFILE a number of times, then hands out
// one end of a pipe: a process out of descriptors, then relieved.
type emfileListener struct {
	fails   int
	accepts int
	closed  chan struct{}
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.accepts++
	if l.accepts <= l.fails {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	select {
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	c, _ := net.Pipe()
	return c, nil
}
func (l *emfileListener) Close() error   { close(l.closed); return nil }
func (l *emfileListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// TestAcceptBacksOffWhenOutOfDescriptors: EMFILE from accept is retried
// after a doubling pause (5ms, 10ms, … 1s), not in a hot loop, and a
// listener closed during a pause returns at once.
func TestAcceptBacksOffWhenOutOfDescriptors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &emfileListener{fails: 10, closed: make(chan struct{})}
		l := newConnListener(inner, connLimits{maxConns: 10, maxUnauthPerIP: 10, write: time.Second},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newConnMetrics(prometheus.NewRegistry()))
		start := time.Now()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// 5+10+20+…+640ms, then 1s twice.
		want := 1275*time.Millisecond + 2*time.Second
		if took := time.Since(start); took != want || inner.accepts != 11 {
			t.Errorf("%d accepts over %v, want 11 over %v", inner.accepts, took, want)
		}
		if got := testutil.ToFloat64(l.metrics.refused.WithLabelValues("out_of_descriptors")); got != 10 {
			t.Errorf("out_of_descriptors = %v, want 10", got)
		}

		inner.fails, inner.accepts = 1<<30, 0
		done := make(chan error, 1)
		go func() { _, err := l.Accept(); done <- err }()
		synctest.Wait()
		l.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}

// TestServeLogsTheEffectiveLimits: the startup line says what the
// connection policy is, defaults resolved.
func TestServeLogsTheEffectiveLimits(t *testing.T) {
	var log syncBuffer
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Server.MaxConnections = 100
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	stop()
	if err := srv.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"read_header_timeout=10s", "read_body_timeout=20s", "idle_timeout=1m0s", "write_timeout=1m0s",
		"max_connections=100", "max_unauthenticated_per_ip=12", "fd_limit="} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("startup log lacks %s:\n%s", want, log.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestWriteStallTimeoutIsPerWrite: a client that keeps reading, however
// slowly and for however long, is written to; one that stops reading is
// let go after write_timeout. A deadline for the whole response would cut
// the first; no deadline would keep the second for ever.
func TestWriteStallTimeoutIsPerWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server, client := net.Pipe()
		defer client.Close()
		l := newConnListener(&emfileListener{closed: make(chan struct{})}, connLimits{maxConns: 1, maxUnauthPerIP: 1, write: 100 * time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newConnMetrics(prometheus.NewRegistry()))
		tc := l.admit(server)
		defer tc.Close()
		reading := make(chan struct{})
		go func() {
			defer close(reading)
			buf := make([]byte, 8)
			for range 20 { // one read every 80ms: 1.6s in all
				time.Sleep(80 * time.Millisecond)
				if _, err := io.ReadFull(client, buf); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		for i := range 20 {
			if _, err := tc.Write([]byte("datadata")); err != nil {
				t.Fatalf("write %d, %v in, to a client reading steadily: %v", i, time.Since(start), err)
			}
		}
		<-reading
		start = time.Now()
		_, err := tc.Write([]byte("datadata"))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) != 100*time.Millisecond {
			t.Errorf("write to a client that stopped reading: %v after %v, want a timeout after 100ms", err, time.Since(start))
		}
	})
}
