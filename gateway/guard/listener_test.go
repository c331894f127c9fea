package guard

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

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
		l := newListener(inner, Limits{MaxConns: 10, MaxUnauthPerIP: 10, Write: time.Second},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
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

// TestWriteStallTimeoutIsPerWrite: a client that keeps reading, however
// slowly and for however long, is written to; one that stops reading is
// let go after write_timeout. A deadline for the whole response would cut
// the first; no deadline would keep the second for ever.
func TestWriteStallTimeoutIsPerWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server, client := net.Pipe()
		defer client.Close()
		l := newListener(&emfileListener{closed: make(chan struct{})}, Limits{MaxConns: 1, MaxUnauthPerIP: 1, Write: 100 * time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
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

// addrConn is one end of a pipe with a TCP peer's address.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// TestProxyHeaderHandshake: a trusted peer's connection is read for a
// PROXY header on its own goroutine, counts under the header's source
// (refused at that address's cap), and passes on what follows; a header
// that is malformed, or not whole within read_header_timeout however
// steadily it trickles, closes the connection; a peer that sends HTTP, or
// the proxy's own LOCAL connection, is taken as itself.
func TestProxyHeaderHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = time.Second
		trusted, _ := parseTrustedProxies([]string{"10.0.0.0/8"})
		l := newListener(&emfileListener{closed: make(chan struct{})},
			Limits{MaxConns: 10, MaxUnauthPerIP: 1, Write: time.Second, ReadHeader: wait, TrustedProxies: trusted},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
		peer := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
		// open admits a connection from peer whose other end writes
		// each of chunks, pause apart, then reads until closed.
		open := func(pause time.Duration, chunks ...string) (*trackedConn, <-chan string) {
			server, client := net.Pipe()
			tc := l.admit(addrConn{server, peer})
			got := make(chan string, 1)
			go func() {
				defer client.Close()
				for i, c := range chunks {
					if i > 0 {
						time.Sleep(pause)
					}
					if _, err := io.WriteString(client, c); err != nil {
						break
					}
				}
				b, _ := io.ReadAll(client)
				got <- string(b)
			}()
			return tc, got
		}
		unauth := func() map[netip.Addr]int {
			l.mu.Lock()
			defer l.mu.Unlock()
			return maps.Clone(l.mu.unauth)
		}
		refused := func(reason string) float64 { return testutil.ToFloat64(l.metrics.refused.WithLabelValues(reason)) }

		// A v1 header and a request in one write.
		first, _ := open(0, "PROXY TCP4 198.51.100.7 10.0.0.2 51234 8080\r\n"+"GET / HTTP/1.1\r\n\r\n")
		if got := first.RemoteAddr().String(); got != "198.51.100.7:51234" {
			t.Errorf("RemoteAddr %s, want the header's source", got)
		}
		buf := make([]byte, 64)
		if n, err := first.Read(buf); err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n\r\n" {
			t.Errorf("read %q, %v: want what followed the header", buf[:n], err)
		}
		if first.perRequest() || !maps.Equal(unauth(), map[netip.Addr]int{netip.MustParseAddr("198.51.100.7"): 1}) {
			t.Errorf("counts %v, want one for the source and none for the proxy", unauth())
		}

		// The same source again, as v2: at its cap. The header alone is
		// not answered (a relaying proxy sends it before its client's
		// request, and an answer then would be unsolicited): closed
		// unanswered once refusalWait has passed without a request.
		v2hdr := string(v2(v2Proxy, afInet<<4|protoStream, inet4("198.51.100.7", "10.0.0.2", 1, 2)))
		start := time.Now()
		alone, answer := open(0, v2hdr)
		if n, err := alone.Read(buf); n != 0 || err != io.EOF || time.Since(start) != refusalWait {
			t.Errorf("refused connection read %d, %v after %v; want io.EOF after %v", n, err, time.Since(start), refusalWait)
		}
		alone.Close()
		if a := <-answer; a != "" {
			t.Errorf("refused connection that sent no request got %q, want nothing", a)
		}
		// With the request after a pause: the canned 429, after it.
		second, answer := open(300*time.Millisecond, v2hdr, "GET / HTTP/1.1\r\n\r\n")
		if n, err := second.Read(buf); n != 0 || err != io.EOF {
			t.Errorf("refused connection read %d, %v; want io.EOF", n, err)
		}
		second.Close()
		if a := <-answer; !strings.HasPrefix(a, "HTTP/1.1 429") || !strings.Contains(a, "unauthenticated_per_ip") {
			t.Errorf("refused connection got %q, want the canned 429", a)
		}
		if refused("unauthenticated_per_ip") != 2 {
			t.Errorf("unauthenticated_per_ip = %v, want 2", refused("unauthenticated_per_ip"))
		}
		first.Close()
		if len(unauth()) != 0 {
			t.Errorf("counts after close: %v", unauth())
		}

		// A header trickled a byte every 100ms: whole at 5.6s, cut at 1s.
		hdr := "PROXY TCP4 198.51.100.8 10.0.0.2 51234 8080\r\n"
		start = time.Now()
		slow, _ := open(100*time.Millisecond, strings.Split(hdr, "")...)
		if n, err := slow.Read(buf); n != 0 || err != io.EOF || time.Since(start) != wait {
			t.Errorf("trickled header: read %d, %v after %v; want io.EOF after %v", n, err, time.Since(start), wait)
		}
		slow.Close()
		if refused("proxy_header") != 1 {
			t.Errorf("proxy_header = %v, want 1", refused("proxy_header"))
		}

		// Silence: closed at the deadline, as net/http closes a silent
		// connection, and not counted as a bad header.
		start = time.Now()
		silent, _ := open(0)
		if n, err := silent.Read(buf); n != 0 || err != io.EOF || time.Since(start) != wait {
			t.Errorf("silent peer: read %d, %v after %v; want io.EOF after %v", n, err, time.Since(start), wait)
		}
		silent.Close()

		// Malformed: closed unanswered.
		bad, answer := open(0, "PROXY TCP4 198.51.100.300 10.0.0.2 1 2\r\nGET / HTTP/1.1\r\n\r\n")
		if n, err := bad.Read(buf); n != 0 || err != io.EOF {
			t.Errorf("malformed header: read %d, %v; want io.EOF", n, err)
		}
		bad.Close()
		if a := <-answer; a != "" || refused("proxy_header") != 2 {
			t.Errorf("malformed header: answered %q, proxy_header = %v; want nothing and 2", a, refused("proxy_header"))
		}

		// A v2 header cut short: closed at the deadline, counted as a bad
		// header.
		cut, _ := open(0, string(v2(v2Proxy, afInet<<4|protoStream, inet4("198.51.100.9", "10.0.0.2", 1, 2)))[:20])
		if n, err := cut.Read(buf); n != 0 || err != io.EOF {
			t.Errorf("cut header: read %d, %v; want io.EOF", n, err)
		}
		cut.Close()
		if refused("proxy_header") != 3 {
			t.Errorf("cut header: proxy_header = %v, want 3", refused("proxy_header"))
		}

		// HTTP from the proxy itself, and its LOCAL connection: itself,
		// counted per request (Middleware), not here.
		for _, first := range []string{"GET / HTTP/1.1\r\n\r\n", string(v2(v2Local, afUnspec<<4, nil)) + "GET / HTTP/1.1\r\n\r\n",
			"PROXY UNKNOWN\r\nGET / HTTP/1.1\r\n\r\n", "PROXY TCP4 10.9.9.9 10.0.0.2 1 2\r\nGET / HTTP/1.1\r\n\r\n"} {
			c, _ := open(0, first)
			want := "10.0.0.1:40000"
			if strings.Contains(first, "10.9.9.9") {
				want = "10.9.9.9:1" // a trusted proxy relaying another one's connection
			}
			if got := c.RemoteAddr().String(); got != want || !c.perRequest() {
				t.Errorf("%q: RemoteAddr %s, per request %v; want %s, true", first, got, c.perRequest(), want)
			}
			if n, err := io.ReadFull(c, buf[:18]); err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n\r\n" {
				t.Errorf("%q: read %q, %v", first, buf[:n], err)
			}
			if len(unauth()) != 0 {
				t.Errorf("%q: counts %v, want none", first, unauth())
			}
			c.Close()
		}

		// Closed while the header is awaited: nothing left counted.
		pending, _ := open(0)
		done := make(chan struct{})
		go func() { defer close(done); pending.RemoteAddr() }()
		synctest.Wait()
		pending.Close()
		<-done
		l.mu.Lock()
		if l.mu.open != 0 || len(l.mu.unauth) != 0 {
			t.Errorf("after closing everything: open %d, unauth %v", l.mu.open, l.mu.unauth)
		}
		l.mu.Unlock()
	})
}

// TestAnonymousCountsNoConnection: with no tenant keys (Limits.Anonymous)
// no connection counts as unauthenticated, from a direct peer or under a
// trusted proxy's PROXY header, so max_unauthenticated_per_ip refuses
// none; once keys exist (a reload), the next connections count again.
func TestAnonymousCountsNoConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		anonymous := true
		trusted, _ := parseTrustedProxies([]string{"10.0.0.0/8"})
		l := newListener(&emfileListener{closed: make(chan struct{})},
			Limits{MaxConns: 10, MaxUnauthPerIP: 1, Write: time.Second, ReadHeader: time.Second, TrustedProxies: trusted,
				Anonymous: func() bool { return anonymous }},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
		direct := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}
		proxy := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
		var conns []*trackedConn
		for range 3 {
			server, client := net.Pipe()
			defer client.Close()
			tc := l.admit(addrConn{server, direct})
			if tc == nil {
				t.Fatal("a direct connection was refused in anonymous mode")
			}
			conns = append(conns, tc)
		}
		for range 3 {
			server, client := net.Pipe()
			defer client.Close()
			go io.WriteString(client, "PROXY TCP4 198.51.100.7 10.0.0.2 51234 8080\r\nGET / HTTP/1.1\r\n\r\n")
			tc := l.admit(addrConn{server, proxy})
			if !tc.ready() {
				t.Fatal("a proxied connection was refused in anonymous mode")
			}
			conns = append(conns, tc)
		}
		l.mu.Lock()
		if len(l.mu.unauth) != 0 {
			t.Errorf("counts %v, want none", l.mu.unauth)
		}
		l.mu.Unlock()
		anonymous = false
		server, client := net.Pipe()
		defer client.Close()
		if tc := l.admit(addrConn{server, direct}); tc == nil {
			t.Fatal("the first counted connection was refused")
		} else {
			conns = append(conns, tc)
		}
		server, client = net.Pipe()
		answer := make(chan string)
		go func() {
			io.WriteString(client, "GET / HTTP/1.1\r\n\r\n")
			b, _ := io.ReadAll(client)
			client.Close()
			answer <- string(b)
		}()
		if tc := l.admit(addrConn{server, direct}); tc != nil {
			t.Error("with keys, the second unauthenticated connection from one address was admitted")
		}
		if a := <-answer; !strings.HasPrefix(a, "HTTP/1.1 429") {
			t.Errorf("refused with keys: got %q, want the canned 429", a)
		}
		for _, c := range conns {
			c.Close()
		}
		synctest.Wait()
		l.mu.Lock()
		if l.mu.open != 0 || len(l.mu.unauth) != 0 {
			t.Errorf("after closing everything: open %d, unauth %v", l.mu.open, l.mu.unauth)
		}
		l.mu.Unlock()
	})
}

// TestAtMaxConnectionsAPendingFloodMakesRoom: with no tenant keys, one
// address may open connections beyond max_unauthenticated_per_ip, but at
// max_connections another address's newcomer is not refused while it
// holds more than that still reading their first request: the oldest of
// them is closed in its place. The flooding address's own newcomer is
// refused, and connections that have sent a whole request are never
// closed for another's.
func TestAtMaxConnectionsAPendingFloodMakesRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newListener(&emfileListener{closed: make(chan struct{})},
			Limits{MaxConns: 4, MaxUnauthPerIP: 1, Write: time.Second, Anonymous: func() bool { return true }},
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(prometheus.NewRegistry()))
		flooder := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}
		admit := func(from net.Addr) (*trackedConn, net.Conn) {
			server, client := net.Pipe()
			t.Cleanup(func() { client.Close() })
			return l.admit(addrConn{server, from}), client
		}
		var flood []*trackedConn
		var floodEnds []net.Conn
		for range 4 {
			tc, end := admit(flooder)
			if tc == nil {
				t.Fatal("a connection within max_connections was refused in anonymous mode")
			}
			flood, floodEnds = append(flood, tc), append(floodEnds, end)
		}
		if tc, _ := admit(flooder); tc != nil {
			t.Fatal("the flooding address's own newcomer was admitted at max_connections")
		}

		other, _ := admit(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 40000})
		if other == nil {
			t.Fatal("another address's newcomer was refused while the flood held 4 pending connections (cap 1)")
		}
		// The oldest of the flood is closed: its client reads the end.
		_ = floodEnds[0].SetReadDeadline(time.Now().Add(time.Second))
		if _, err := floodEnds[0].Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("the flood's oldest connection, evicted: read %v, want it closed", err)
		}
		if got := testutil.ToFloat64(l.metrics.refused.WithLabelValues("evicted")); got != 1 {
			t.Errorf("evicted = %v, want 1", got)
		}
		flood[0].Close() // net/http's close of it, after its read failed: counted once
		l.mu.Lock()
		if l.mu.open != 4 || l.mu.pending[addrOf(flooder)].n != 3 {
			t.Errorf("open %d, flood pending %d; want 4 and 3", l.mu.open, l.mu.pending[addrOf(flooder)].n)
		}
		l.mu.Unlock()

		// The rest of the flood sends whole requests: no longer pending,
		// never closed for another. A newcomer is refused at the cap.
		for _, tc := range flood[1:] {
			tc.authenticate()
		}
		if tc, _ := admit(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 3), Port: 40000}); tc != nil {
			t.Error("a newcomer was admitted at max_connections by closing a connection that had sent a whole request")
		}
		for _, tc := range append(flood[1:], other) {
			tc.Close()
		}
		synctest.Wait()
		l.mu.Lock()
		if l.mu.open != 0 || len(l.mu.pending) != 0 || len(l.mu.unauth) != 0 {
			t.Errorf("after closing everything: open %d, pending %v, unauth %v", l.mu.open, l.mu.pending, l.mu.unauth)
		}
		l.mu.Unlock()
	})
}
