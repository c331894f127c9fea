package guard

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/contract"
)

// Canned refusals, written straight to a connection the listener will not
// serve. They are precomputed and small enough to fit a fresh socket's send
// buffer, so the write never blocks the accept loop; an answer the client
// can act on costs one write more than closing, and says when to come back.
var (
	refuseFull = cannedRefusal("503 Service Unavailable", "max_connections", "server_error",
		"the gateway is at server.max_connections; retry in 1s")
	refusePerIP = cannedRefusal("429 Too Many Requests", "unauthenticated_per_ip", "rate_limit_error",
		"too many connections from this address without a valid request; reuse one, or retry in 1s")
)

// cannedRefusal is a whole HTTP/1.1 response in the contract's shape:
// Retry-After, retry-after-ms, X-Sluice-Reason and an OpenAI-style error.
func cannedRefusal(status, reason, typ, msg string) []byte {
	body := `{"error":{"message":"` + msg + `","type":"` + typ + `","code":"` + reason + `"}}` + "\n"
	return []byte("HTTP/1.1 " + status + "\r\nRetry-After: 1\r\nretry-after-ms: 1000\r\n" + contract.HeaderReason + ": " + reason +
		"\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// listener is the API listener with the connection caps of a Config: at
// most maxConns open, at most maxUnauthPerIP of them per client address
// not yet authenticated. Connections beyond are refused in Accept itself,
// before net/http spends a goroutine on them. Safe for concurrent use.
type listener struct {
	net.Listener
	maxConns, maxUnauthPerIP int
	writeStall               time.Duration
	log                      *slog.Logger
	metrics                  *metrics
	refusals                 *refusalLog // the refusals' log lines (refusals.go)
	closed                   chan struct{}
	closeOnce                sync.Once

	mu struct {
		sync.Mutex
		open   int
		unauth map[netip.Addr]int
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
func NewListener(ln net.Listener, l Limits, log *slog.Logger, reg prometheus.Registerer) net.Listener {
	return newListener(ln, l, log, newMetrics(reg))
}

func newListener(ln net.Listener, l Limits, log *slog.Logger, m *metrics) *listener {
	cl := &listener{Listener: ln, maxConns: l.MaxConns, maxUnauthPerIP: l.MaxUnauthPerIP, writeStall: l.Write,
		log: log, metrics: m, refusals: newRefusalLog(log, refusalWindow), closed: make(chan struct{})}
	cl.mu.unauth = map[netip.Addr]int{}
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
			l.metrics.refused.WithLabelValues("out_of_descriptors").Inc()
			l.refusals.add("out_of_descriptors", netip.Addr{})
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

// admit counts c in, or refuses it and returns nil.
func (l *listener) admit(c net.Conn) *trackedConn {
	ip := addrOf(c.RemoteAddr())
	l.mu.Lock()
	var refusal []byte
	var reason string
	switch {
	case l.mu.open >= l.maxConns:
		refusal, reason = refuseFull, "max_connections"
	case l.mu.unauth[ip] >= l.maxUnauthPerIP:
		refusal, reason = refusePerIP, "unauthenticated_per_ip"
	default:
		l.mu.open++
		l.mu.unauth[ip]++
	}
	l.mu.Unlock()
	if refusal != nil {
		l.metrics.refused.WithLabelValues(reason).Inc()
		l.refusals.add(reason, ip)
		// A short deadline in case the send buffer is somehow full: the
		// accept loop must not wait on one client.
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		_, _ = c.Write(refusal)
		_ = c.Close()
		return nil
	}
	l.metrics.open.Inc()
	return &trackedConn{Conn: c, l: l, ip: ip}
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
	l  *listener
	ip netip.Addr
	// authed and closed are guarded by l.mu.
	authed, closed bool
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
	if !c.closed {
		c.closed = true
		l.mu.open--
		if !c.authed {
			l.dropUnauthLocked(c.ip)
		}
		l.metrics.open.Dec()
	}
	l.mu.Unlock()
	return c.Conn.Close()
}

// authenticate takes the connection out of its address's unauthenticated
// count, once.
func (c *trackedConn) authenticate() {
	l := c.l
	l.mu.Lock()
	if !c.authed && !c.closed {
		c.authed = true
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
			Help: "API connections refused at accept: max_connections, unauthenticated_per_ip, or out_of_descriptors (an accept that failed with EMFILE/ENFILE)."},
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
