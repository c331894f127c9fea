package guard

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/contract"
)

// Canned refusals, written to a connection the listener will not serve,
// once its client has sent something (answerRequest). They are precomputed
// and small enough to fit a fresh socket's send buffer, so the write never
// blocks; an answer the client can act on costs one write more than
// closing, and says when to come back.
var (
	refuseFull = cannedRefusal("503 Service Unavailable", "max_connections", refusalBody("max_connections", "server_error",
		"the gateway is at server.max_connections; retry in 1s"))
	refusePerIPBody = refusalBody("unauthenticated_per_ip", "rate_limit_error",
		"too many connections from this address without a valid request; reuse one, or retry in 1s")
	refusePerIP = cannedRefusal("429 Too Many Requests", "unauthenticated_per_ip", refusePerIPBody)
)

// refusePerIPStatus is refusePerIP's status, for Middleware's refusals.
const refusePerIPStatus = http.StatusTooManyRequests

// refusalBody is an OpenAI-style error.
func refusalBody(reason, typ, msg string) string {
	return `{"error":{"message":"` + msg + `","type":"` + typ + `","code":"` + reason + `"}}` + "\n"
}

// cannedRefusal is a whole HTTP/1.1 response in the contract's shape:
// Retry-After, retry-after-ms, X-Sluice-Reason and an OpenAI-style error.
func cannedRefusal(status, reason, body string) []byte {
	return []byte("HTTP/1.1 " + status + "\r\nRetry-After: 1\r\nretry-after-ms: 1000\r\n" + contract.HeaderReason + ": " + reason +
		"\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// listener is the API listener with the connection caps of a Config: at
// most maxConns open, at most maxUnauthPerIP of them per client address
// not yet authenticated. Connections beyond are refused in Accept itself,
// before net/http spends a goroutine on them. A trusted proxy's
// connections count under the client the proxy speaks for instead
// (client.go). Safe for concurrent use.
type listener struct {
	net.Listener
	maxConns, maxUnauthPerIP int
	writeStall               time.Duration
	// trusted are the trusted proxies; headerWait bounds the wait for a
	// trusted peer's first bytes and its whole PROXY header.
	trusted    []netip.Prefix
	headerWait time.Duration
	log        *slog.Logger
	metrics    *metrics
	refusals   *refusalLog // the refusals' log lines (refusals.go)
	closed     chan struct{}
	closeOnce  sync.Once
	// anonymous, when set and true, says every request is identified (no
	// tenant keys): no connection then counts as unauthenticated.
	anonymous func() bool
	// refusing counts the refused connections waiting for their request
	// to be answered (answerLater); at most maxRefusing.
	refusing atomic.Int32

	mu struct {
		sync.Mutex
		open   int
		unauth map[netip.Addr]int
		// pending are the connections still reading their first request,
		// by address (pending.go).
		pending map[netip.Addr]*connList
	}
}

// NewListener wraps ln, the API listener, with the connection caps and the
// write-stall timeout of l; log receives its warnings (accept out of
// descriptors). The listener's collectors, sluice_connections_open and
// sluice_connections_refused_total, are registered on reg; a second
// listener on the same registerer shares the first one's, and a nil reg
// registers none. The connections it returns carry the guard's accounting
// to Middleware when the http.Server's ConnContext is ConnContext. Its
// Close also stops an Accept backing off. Safe for concurrent use.
//
// With trusted proxies it logs them, at Info: the startup line of the
// gateway's server names the other effective values.
func NewListener(ln net.Listener, l Limits, log *slog.Logger, reg prometheus.Registerer) net.Listener {
	if len(l.TrustedProxies) > 0 {
		log.Info("trusting the proxies in front: their PROXY header or X-Forwarded-For names the client", "trusted_proxies", l.TrustedProxies)
	}
	return newListener(ln, l, log, newMetrics(reg))
}

func newListener(ln net.Listener, l Limits, log *slog.Logger, m *metrics) *listener {
	cl := &listener{Listener: ln, maxConns: l.MaxConns, maxUnauthPerIP: l.MaxUnauthPerIP, writeStall: l.Write,
		trusted: l.TrustedProxies, headerWait: l.ReadHeader,
		log: log, metrics: m, refusals: newRefusalLog(log, refusalWindow), closed: make(chan struct{}), anonymous: l.Anonymous}
	cl.mu.unauth = map[netip.Addr]int{}
	cl.mu.pending = map[netip.Addr]*connList{}
	return cl
}

// Accept returns the next connection within the caps. Connections beyond
// them get their canned refusal and are closed here. When the process is
// out of descriptors (EMFILE, ENFILE) it backs off, doubling from 5ms to
// 1s, rather than spinning on an accept that cannot succeed; the pending
// connections wait in the kernel's backlog meanwhile.
func (l *listener) Accept() (net.Conn, error) {
	backoff := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
				return nil, err
			}
			l.countRefusal("out_of_descriptors", netip.Addr{})
			if backoff == 0 {
				backoff = 5 * time.Millisecond
				l.log.Warn("accept: out of file descriptors; backing off (lower server.max_connections or raise ulimit -n)", "err", err)
			} else {
				backoff = min(2*backoff, time.Second)
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		backoff = 0
		if tc := l.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit counts c in, or refuses it and returns nil. A trusted proxy's
// connection counts in max_connections only: the client it speaks for is
// known once its PROXY header is read (handshake) or, per request, once
// the request's headers are (Middleware).
//
// With no tenant keys (l.anonymous) no connection counts as
// unauthenticated: every request is identified, so the per-address cap
// would only count a busy client's connections while their first request
// is read, and refuse an application server's burst of new ones. Every
// connection is pending until its first whole request all the same, and
// at max_connections one address's pending connections beyond that cap
// make room for another address's newcomer (pending.go).
func (l *listener) admit(c net.Conn) *trackedConn {
	ip := addrOf(c.RemoteAddr())
	proxied := trusts(l.trusted, ip)
	counted := !proxied && !l.isAnonymous()
	var tc *trackedConn // made only when admitted: a flood's refusals allocate none
	l.mu.Lock()
	var refusal []byte
	var reason string
	var evicted *trackedConn
	var evictedIP netip.Addr
	if l.mu.open >= l.maxConns && !(counted && l.mu.unauth[ip] >= l.maxUnauthPerIP) {
		if evicted = l.evictableLocked(ip); evicted != nil {
			// Its account closed now, so that its place is the
			// newcomer's; its socket once l.mu is released (its own
			// Close then finds it closed already).
			evictedIP = evicted.ip
			l.closeLocked(evicted)
		}
	}
	switch {
	case l.mu.open >= l.maxConns:
		refusal, reason = refuseFull, "max_connections"
	case counted && l.mu.unauth[ip] >= l.maxUnauthPerIP:
		refusal, reason = refusePerIP, "unauthenticated_per_ip"
	default:
		l.mu.open++
		if counted {
			l.mu.unauth[ip]++
		}
		tc = &trackedConn{Conn: c, l: l, ip: ip, held: counted, proxied: proxied}
		if !proxied {
			l.pendLocked(tc)
		}
	}
	l.mu.Unlock()
	if evicted != nil {
		l.countRefusal("evicted", evictedIP)
		_ = evicted.Conn.Close()
	}
	if refusal != nil {
		l.countRefusal(reason, ip)
		l.answerLater(c, refusal)
		return nil
	}
	l.metrics.open.Inc()
	if proxied && l.headerWait > 0 {
		// The PROXY header, if any, comes first and at once; the wait for
		// it starts now, and net/http's own for the request's headers
		// after it.
		_ = c.SetReadDeadline(time.Now().Add(l.headerWait))
	}
	return tc
}

// isAnonymous says no request needs a key (Limits.Anonymous).
func (l *listener) isAnonymous() bool { return l.anonymous != nil && l.anonymous() }

// The refused connections' answers. A refusal is written only once the
// client has sent something on the connection, never at accept: a client
// that opens connections ahead of its requests (Go's Transport keeps a
// connection it dialled for a request that found another one idle) would
// find an answer on a connection it had sent nothing on, and Go's client
// reports that as "Unsolicited response received on idle HTTP channel"
// rather than as the 429 or 503 it is. Waiting for the request costs a
// goroutine and a descriptor for as long as the client takes to send, at
// most refusalWait; at most maxRefusing connections wait at once, and the
// ones beyond are closed unanswered, which a client takes as a connection
// closed before its request, so that an address that opens connections
// faster than they can be answered still holds at most max_connections
// plus maxRefusing descriptors.
const (
	refusalWait = time.Second
	maxRefusing = 64
)

// answerLater answers c, a refused connection, with answer once its client
// has sent its request, and closes it; on a goroutine of its own, so that
// the accept loop never waits on one client.
func (l *listener) answerLater(c net.Conn, answer []byte) {
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		answerRequest(c, false, answer, time.Now().Add(refusalWait))
	}()
}

// answerRequest writes answer on c once its client has sent something (at
// once when sent, its request's first bytes are already read), then
// half-closes c and reads what else the client sends until it closes its
// end or deadline passes: closing with the request unread would reset the
// connection, and a reset can reach the client before it has read the
// answer. It gives up at deadline, unanswered when nothing came. The
// caller closes c.
func answerRequest(c net.Conn, sent bool, answer []byte, deadline time.Time) {
	_ = c.SetDeadline(deadline)
	var buf [512]byte
	if !sent {
		if n, _ := c.Read(buf[:]); n == 0 {
			return
		}
	}
	if _, err := c.Write(answer); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// countRefusal counts a refusal in the metric and the log's lines.
func (l *listener) countRefusal(reason string, ip netip.Addr) {
	l.metrics.refused.WithLabelValues(reason).Inc()
	l.refusals.add(reason, ip)
}

// Close stops Accept, including one backing off, and writes the log lines
// of the refusals not yet written.
func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	err := l.Listener.Close()
	l.refusals.close()
	return err
}

func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}

// trackedConn is one admitted connection: it leaves the counts when closed,
// and the per-address unauthenticated count when authenticated.
type trackedConn struct {
	net.Conn
	l *listener
	// ip is the client address the connection counts under: its peer, or
	// for a trusted peer's connection the PROXY header's source once read.
	ip netip.Addr
	// proxied says the peer is a trusted proxy: the connection is read for
	// a PROXY header first (handshake), and never counts under the peer.
	proxied bool
	hs      handshake
	// held, authed and closed are guarded by l.mu. held says the
	// connection holds a place in l.mu.unauth[ip].
	held, authed, closed bool
	// pending says it is still reading its first request, in
	// l.mu.pending[ip] between pendPrev and pendNext (pending.go);
	// guarded by l.mu.
	pending            bool
	pendPrev, pendNext *trackedConn
}

// handshake is a trusted peer's connection's reading of its PROXY header,
// done once, on the connection's own goroutine, before any request: when
// net/http first asks the connection's address or reads from it. The
// accept loop never waits on it.
type handshake struct {
	once sync.Once
	// Set by the handshake, read only after it.
	br       *bufio.Reader // what was read past the header: HTTP's
	remote   net.Addr      // the PROXY header's source; nil: the peer
	failed   bool          // closed: a bad header, or refused at the cap
	perReqst bool          // the connection's address is a trusted proxy's: count each request (Middleware)
}

// handshake reads a trusted peer's PROXY header, if it sends one, and
// counts the connection under its source, or refuses it at that
// address's cap as admit would.
func (c *trackedConn) handshake() {
	l := c.l
	br := bufio.NewReaderSize(c.Conn, 256)
	h, err := readProxyHeader(br)
	_ = c.Conn.SetReadDeadline(time.Time{})
	if br.Buffered() > 0 {
		c.hs.br = br
	}
	var pe *proxyError
	switch {
	case errors.Is(err, errNotProxy):
		// HTTP from the proxy itself: X-Forwarded-For says who, per request.
		c.hs.perReqst = true
		return
	case errors.As(err, &pe):
		// A header that breaks the protocol, or stops part way: the
		// connection is closed, unanswered (its bytes are nobody's HTTP),
		// and summed in the refusal log's lines under the proxy's address
		// (one line per connection would let a misbehaving peer write the
		// log as fast as it connects).
		l.countRefusal("proxy_header", c.ip)
		c.hs.failed = true
		return
	case err != nil:
		// Nothing at all before the deadline or the close (a TCP health
		// check): closed, as net/http closes a silent connection.
		c.hs.failed = true
		return
	}
	src := h.Src.Addr().Unmap()
	if !src.IsValid() || trusts(l.trusted, src) {
		// LOCAL, UNKNOWN, AF_UNSPEC or AF_UNIX: the proxy's own connection;
		// or a trusted proxy relaying another one's.
		if src.IsValid() {
			l.mu.Lock()
			c.ip = src
			l.mu.Unlock()
			c.hs.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, h.Src.Port()))
		}
		c.hs.perReqst = true
		return
	}
	counted := !l.isAnonymous()
	l.mu.Lock()
	refused := counted && !c.closed && l.mu.unauth[src] >= l.maxUnauthPerIP
	if counted && !c.closed && !refused {
		l.mu.unauth[src]++
		c.held = true
	}
	c.ip = src
	if !c.closed && !refused && !c.authed {
		l.pendLocked(c)
	}
	closed := c.closed
	l.mu.Unlock()
	c.hs.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, h.Src.Port()))
	if refused {
		// Answered once the request follows the header (a relaying proxy
		// sends the header as it connects, before its client's request),
		// here on the connection's own goroutine.
		l.countRefusal("unauthenticated_per_ip", src)
		answerRequest(c.Conn, br.Buffered() > 0, refusePerIP, time.Now().Add(refusalWait))
	}
	c.hs.failed = refused || closed
}

// ready runs the handshake of a trusted peer's connection, once, and
// says the connection may be served.
func (c *trackedConn) ready() bool {
	if !c.proxied {
		return true
	}
	c.hs.once.Do(c.handshake)
	return !c.hs.failed
}

// perRequest says each request on the connection counts under its own
// client (Middleware): the connection's address is a trusted proxy's.
func (c *trackedConn) perRequest() bool {
	c.ready()
	return c.hs.perReqst
}

// RemoteAddr is the client the connection speaks for: a trusted peer's
// PROXY header's source, or the peer. On a trusted peer's connection it
// waits for the handshake; net/http asks it first thing on the
// connection's goroutine, which is where the handshake is meant to run.
func (c *trackedConn) RemoteAddr() net.Addr {
	if c.proxied {
		c.hs.once.Do(c.handshake)
		if c.hs.remote != nil {
			return c.hs.remote
		}
	}
	return c.Conn.RemoteAddr()
}

// Read reads what follows the PROXY header, if any. A connection the
// handshake closed reads as ended: net/http closes it without a word.
func (c *trackedConn) Read(p []byte) (int, error) {
	if c.proxied {
		if !c.ready() {
			return 0, io.EOF
		}
		if br := c.hs.br; br != nil && br.Buffered() > 0 {
			return br.Read(p)
		}
	}
	return c.Conn.Read(p)
}

// Write gives every write to the socket a fresh deadline: the stall
// timeout. A response may take as long as it takes, a stream minutes, but
// one write may not wait longer than this for a client that stopped
// reading.
func (c *trackedConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.l.writeStall))
	return c.Conn.Write(p)
}

func (c *trackedConn) Close() error {
	l := c.l
	l.mu.Lock()
	l.closeLocked(c)
	l.mu.Unlock()
	return c.Conn.Close()
}

// closeLocked closes c's account, once: its place in max_connections and
// its address's counts. l.mu is held.
func (l *listener) closeLocked(c *trackedConn) {
	if c.closed {
		return
	}
	c.closed = true
	l.mu.open--
	l.unpendLocked(c)
	if c.held {
		c.held = false
		l.dropUnauthLocked(c.ip)
	}
	l.metrics.open.Dec()
}

// authenticate takes the connection out of its address's unauthenticated
// count, once.
func (c *trackedConn) authenticate() {
	l := c.l
	l.mu.Lock()
	c.authed = true
	l.unpendLocked(c)
	if c.held {
		c.held = false
		l.dropUnauthLocked(c.ip)
	}
	l.mu.Unlock()
}

func (c *trackedConn) isAuthenticated() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.authed
}

func (l *listener) dropUnauthLocked(ip netip.Addr) {
	if n := l.mu.unauth[ip]; n <= 1 {
		delete(l.mu.unauth, ip)
	} else {
		l.mu.unauth[ip] = n - 1
	}
}

// requestSlot is one request's place in its client's unauthenticated
// count, on a trusted proxy's connection (Middleware). Its release may
// race the request's end: the body may be read on the proxy transport's
// goroutine.
type requestSlot struct {
	l    *listener
	ip   netip.Addr
	held bool // guarded by l.mu
}

// claim takes a place in ip's unauthenticated count for one request, or
// returns nil when ip is at max_unauthenticated_per_ip.
func (l *listener) claim(ip netip.Addr) *requestSlot {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.unauth[ip] >= l.maxUnauthPerIP {
		return nil
	}
	l.mu.unauth[ip]++
	return &requestSlot{l: l, ip: ip, held: true}
}

// release gives the place back, once.
func (s *requestSlot) release() {
	s.l.mu.Lock()
	if s.held {
		s.held = false
		s.l.dropUnauthLocked(s.ip)
	}
	s.l.mu.Unlock()
}

type connKey struct{}

// ConnContext is the API http.Server's ConnContext: it hands a connection
// of NewListener's to Middleware through the requests' context. Any other
// connection passes through, and Middleware leaves it uncounted.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// metrics are the listener's collectors, registered on the registerer
// NewListener is given.
type metrics struct {
	open    prometheus.Gauge
	refused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_connections_open",
			Help: "API connections open (admitted by the listener's caps)."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_connections_refused_total",
			Help: "API connections refused at accept: max_connections, unauthenticated_per_ip, out_of_descriptors (an accept that failed with EMFILE/ENFILE), or proxy_header (a trusted proxy's malformed PROXY header); and evicted: a connection still reading its first request, of the address holding the most beyond max_unauthenticated_per_ip, closed at max_connections to serve another address's. Behind a trusted proxy that sets X-Forwarded-For, unauthenticated_per_ip counts requests refused at their headers."},
			[]string{"reason"}),
	}
	if reg == nil {
		return m
	}
	// A second listener on the same registerer (a second gateway.Server
	// on the same gateway) shares the first one's collectors rather than
	// failing to register its own.
	if err := reg.Register(m.open); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			m.open = are.ExistingCollector.(prometheus.Gauge)
		}
	}
	if err := reg.Register(m.refused); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			m.refused = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return m
}
