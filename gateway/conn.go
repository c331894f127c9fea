package gateway

import (
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"
)

// ServerConfig bounds what a client connection may hold of the API
// listener: time (the read, idle and write timeouts) and descriptors (the
// connection caps). A client that sends its body a byte at a time, or goes
// quiet after any answer, must not keep a goroutine and a file descriptor
// for ever, nor be able to open enough of them to make accept fail for
// everyone else.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers, from the first
	// byte of a new connection or the end of the idle wait. Zero means 10s;
	// at most 10m.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadBodyTimeout bounds reading a request's body, from the end of its
	// headers. It is one deadline for the whole body, not a minimum rate: a
	// client sending at any chosen rate still lets go of the connection by
	// then. Zero means 10s plus 1s per MiB of limits.max_body_bytes (20s at
	// the default 10 MiB, a 1 MiB/s floor for the largest body); at most 1h.
	// Pass-through uploads (other paths) are bound by it too.
	ReadBodyTimeout Duration `yaml:"read_body_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request. Zero means 60s; at most 1h.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// WriteTimeout is how long one write to a client may stall, not how long
	// a response may take: every write gets a fresh deadline, so a stream
	// that runs for minutes is never cut, while a client that stops reading
	// is let go once the socket's buffers are full for this long. Zero means
	// 60s; at most 1h.
	WriteTimeout Duration `yaml:"write_timeout"`
	// MaxConnections caps the API listener's open connections; the next one
	// is answered a canned 503 with Retry-After and closed at once. Zero
	// means derived from the process's file-descriptor limit
	// (RLIMIT_NOFILE): half of what is left after 64 descriptors for the
	// listeners, admin connections, logs and files, since every client
	// connection may hold one upstream connection, and at most 65,536. At
	// most 1,048,576.
	MaxConnections int `yaml:"max_connections"`
	// MaxUnauthenticatedPerIP caps one client address's connections that
	// have not yet sent a request with a valid tenant key (with no tenants
	// configured, any request) and its whole body; the next one is answered
	// a canned 429 and closed at once. A connection stops counting once it
	// has. Zero means max_connections/8, at least 1; at most
	// max_connections.
	MaxUnauthenticatedPerIP int `yaml:"max_unauthenticated_per_ip"`
}

const (
	maxServerTimeout    = time.Hour
	maxHeaderTimeout    = 10 * time.Minute
	maxMaxConnections   = 1 << 20
	derivedConnsCeiling = 1 << 16
	// reservedFDs are the descriptors kept out of the derived connection
	// cap for everything that is not a client or upstream connection.
	reservedFDs = 64
)

// validate checks the section; it names the field at fault by its YAML path.
func (s ServerConfig) validate() error {
	for _, d := range []struct {
		field string
		v     Duration
		max   time.Duration
	}{
		{"read_header_timeout", s.ReadHeaderTimeout, maxHeaderTimeout},
		{"read_body_timeout", s.ReadBodyTimeout, maxServerTimeout},
		{"idle_timeout", s.IdleTimeout, maxServerTimeout},
		{"write_timeout", s.WriteTimeout, maxServerTimeout},
	} {
		if d.v < 0 || d.v.D() > d.max {
			return fmt.Errorf("config: server.%s: %v, want 0..%v", d.field, d.v.D(), d.max)
		}
	}
	if s.MaxConnections < 0 || s.MaxConnections > maxMaxConnections {
		return fmt.Errorf("config: server.max_connections: %d, want 0..%d", s.MaxConnections, maxMaxConnections)
	}
	if s.MaxUnauthenticatedPerIP < 0 || s.MaxUnauthenticatedPerIP > maxMaxConnections {
		return fmt.Errorf("config: server.max_unauthenticated_per_ip: %d, want 0..%d", s.MaxUnauthenticatedPerIP, maxMaxConnections)
	}
	if s.MaxConnections > 0 && s.MaxUnauthenticatedPerIP > s.MaxConnections {
		return fmt.Errorf("config: server.max_unauthenticated_per_ip: %d, want at most server.max_connections (%d)", s.MaxUnauthenticatedPerIP, s.MaxConnections)
	}
	return nil
}

// connLimits are the effective values of a ServerConfig.
type connLimits struct {
	readHeader, readBody, idle, write time.Duration
	maxConns, maxUnauthPerIP          int
	// fdLimit is the soft RLIMIT_NOFILE the cap was derived from or checked
	// against; 0 when it could not be read.
	fdLimit uint64
}

// effective fills the documented defaults. maxBody is limits.max_body_bytes
// with its default applied; fdLimit is the soft RLIMIT_NOFILE (0: unknown).
func (s ServerConfig) effective(maxBody int64, fdLimit uint64) (connLimits, error) {
	l := connLimits{
		readHeader:     s.ReadHeaderTimeout.D(),
		readBody:       s.ReadBodyTimeout.D(),
		idle:           s.IdleTimeout.D(),
		write:          s.WriteTimeout.D(),
		maxConns:       s.MaxConnections,
		maxUnauthPerIP: s.MaxUnauthenticatedPerIP,
		fdLimit:        fdLimit,
	}
	if l.readHeader == 0 {
		l.readHeader = 10 * time.Second
	}
	if l.readBody == 0 {
		l.readBody = min(10*time.Second+time.Duration(maxBody>>20)*time.Second, maxServerTimeout)
	}
	if l.idle == 0 {
		l.idle = 60 * time.Second
	}
	if l.write == 0 {
		l.write = 60 * time.Second
	}
	if l.maxConns == 0 {
		if fdLimit == 0 {
			return l, fmt.Errorf("config: server.max_connections: the file-descriptor limit cannot be read to derive it; set it")
		}
		if fdLimit <= reservedFDs+2 {
			return l, fmt.Errorf("config: server.max_connections: the file-descriptor limit (%d) leaves no room for client connections; raise it (ulimit -n) or set server.max_connections", fdLimit)
		}
		l.maxConns = int(min((fdLimit-reservedFDs)/2, derivedConnsCeiling))
	}
	if l.maxUnauthPerIP == 0 {
		l.maxUnauthPerIP = max(1, l.maxConns/8)
	}
	if l.maxUnauthPerIP > l.maxConns {
		return l, fmt.Errorf("config: server.max_unauthenticated_per_ip: %d, want at most server.max_connections (%d)", l.maxUnauthPerIP, l.maxConns)
	}
	return l, nil
}

// fdLimit returns the soft RLIMIT_NOFILE, or 0 when it cannot be read. The
// Go runtime raises the soft limit to the hard one at start-up, so this is
// what the process really has.
func fdLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == ^uint64(0) {
		return 0
	}
	return r.Cur
}

// guard applies the per-request part of the connection policy before the
// gateway sees a request: the body's read deadline, and marking the
// connection authenticated once it has sent a request with a valid key and
// its whole body.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, _ := r.Context().Value(connKey{}).(*trackedConn)
		// Identify only while the connection still counts as
		// unauthenticated: one extra key hash per connection, not per
		// request. The gateway identifies again and answers 401 itself.
		known := tc != nil && !tc.isAuthenticated() && s.Gateway.identified(r)
		if r.Body == nil || r.Body == http.NoBody {
			if known {
				tc.authenticate()
			}
			next.ServeHTTP(w, r)
			return
		}
		// A deadline on the connection, not a timer per read: the poller
		// enforces it, and a blocked read returns as soon as it passes. It
		// is never set on a request without a body: the server already has
		// a read pending on its connection, to notice the client leaving,
		// and a deadline passing under it would cancel the answer, a stream
		// included. For a body, net/http lifts the deadline itself when the
		// body ends and it starts that pending read.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.limits.readBody))
		if known {
			r.Body = &authBody{ReadCloser: r.Body, tc: tc}
		}
		next.ServeHTTP(w, r)
	})
}

// authBody counts its connection as authenticated once the body of a
// request with a valid key has been read to its end: from then on the
// client has shown both a key and that it sends what it declares.
type authBody struct {
	io.ReadCloser
	tc *trackedConn
}

func (b *authBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.tc.authenticate()
	}
	return n, err
}
