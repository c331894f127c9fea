package guard

import (
	"fmt"
	"log/slog"
	"net/netip"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/gateway/saturation"
	"github.com/sluicehq/sluice/internal/yamltime"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("30s", "5m"); a bare number is refused, since its unit would be a guess.
// D returns the time.Duration. The same type as the other configs'
// Duration (gateway and spend), so a value moves between them as it is.
type Duration = yamltime.Duration

// Config bounds what a client connection may hold of the API listener:
// time (the read, idle and write timeouts) and descriptors (the connection
// caps). It is the gateway config's `server:` section. A client that sends
// its body a byte at a time, or goes quiet after any answer, must not keep
// a goroutine and a file descriptor for ever, nor be able to open enough
// of them to make accept fail for everyone else.
type Config struct {
	// ReadHeaderTimeout bounds reading a request's headers, from the first
	// byte of a new connection or the end of the idle wait. Zero means 10s;
	// at most 10m.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadBodyTimeout bounds reading a request's body, from the end of its
	// headers. It is one deadline for the whole body, not a minimum rate: a
	// client sending at any chosen rate still lets go of the connection by
	// then. Zero means derived per request from the size of the body it may
	// send (BodyTimeout: 10s plus 1s per MiB, a 1 MiB/s floor): its
	// Content-Length, or, chunked, the most its route takes
	// (limits.max_body_bytes, 20s at the default 10 MiB; on POST /v1/files
	// batch.max_file_bytes plus 1 MiB, 111s at the default 100 MiB); at
	// most 1h. Set, it is the same for every body, uploads included.
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
	// has. With no tenants configured every request is valid, and the cap
	// does not apply. Zero means max_connections/8, at least 1; at most
	// max_connections.
	MaxUnauthenticatedPerIP int `yaml:"max_unauthenticated_per_ip"`
	// TrustedProxies are the addresses ("10.0.0.7", "fd00::1") and CIDR
	// blocks ("10.0.0.0/8") of the proxies in front of the gateway, whose
	// word on who the client is the gateway takes: from a connection of
	// theirs, the client address is the PROXY protocol header's source when
	// the connection starts with one (version 1 or 2), and for each request
	// the right-most X-Forwarded-For address that is not itself a trusted
	// proxy. The client address is what max_unauthenticated_per_ip counts
	// and what the access log and the traces show. Empty (the default)
	// trusts no one: every client address is the connection's peer, and
	// PROXY headers and X-Forwarded-For are not read. Only list proxies
	// that either speak HTTP themselves and set X-Forwarded-For, or send a
	// PROXY header on every connection: a TCP pass-through that does
	// neither would let its clients claim any address.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Saturation sheds new calls, before their bodies are read, when the
	// gateway's own CPU is saturated (package saturation): on by default.
	Saturation saturation.Config `yaml:"saturation"`
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

// Validate checks the section; it names the field at fault by its YAML
// path in the gateway's config (server.…).
func (c Config) Validate() error {
	for _, d := range []struct {
		field string
		v     Duration
		max   time.Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout, maxHeaderTimeout},
		{"read_body_timeout", c.ReadBodyTimeout, maxServerTimeout},
		{"idle_timeout", c.IdleTimeout, maxServerTimeout},
		{"write_timeout", c.WriteTimeout, maxServerTimeout},
	} {
		if d.v < 0 || d.v.D() > d.max {
			return fmt.Errorf("config: server.%s: %v, want 0..%v", d.field, d.v.D(), d.max)
		}
	}
	if c.MaxConnections < 0 || c.MaxConnections > maxMaxConnections {
		return fmt.Errorf("config: server.max_connections: %d, want 0..%d", c.MaxConnections, maxMaxConnections)
	}
	if c.MaxUnauthenticatedPerIP < 0 || c.MaxUnauthenticatedPerIP > maxMaxConnections {
		return fmt.Errorf("config: server.max_unauthenticated_per_ip: %d, want 0..%d", c.MaxUnauthenticatedPerIP, maxMaxConnections)
	}
	if c.MaxConnections > 0 && c.MaxUnauthenticatedPerIP > c.MaxConnections {
		return fmt.Errorf("config: server.max_unauthenticated_per_ip: %d, want at most server.max_connections (%d)", c.MaxUnauthenticatedPerIP, c.MaxConnections)
	}
	if err := c.Saturation.Validate(); err != nil {
		return fmt.Errorf("config: server.%w", err)
	}
	_, err := parseTrustedProxies(c.TrustedProxies)
	return err
}

// Limits are the effective values of a Config: every zero replaced by
// what it documents. NewListener and Middleware take them as Config.Limits
// returns them; a zero value is no policy.
type Limits struct {
	// The timeouts: read_header_timeout, read_body_timeout, idle_timeout
	// and write_timeout. ReadBody, when derived, is the one of the largest
	// body limits.max_body_bytes lets a call send.
	ReadHeader, ReadBody, Idle, Write time.Duration
	// ReadBodyPerRequest is set when read_body_timeout is derived: the
	// middleware then derives each body's deadline from its size
	// (BodyTimeout).
	ReadBodyPerRequest bool
	// The caps: max_connections and max_unauthenticated_per_ip.
	MaxConns, MaxUnauthPerIP int
	// TrustedProxies is trusted_proxies parsed: a single address is a
	// prefix of its full length. Empty trusts no one.
	TrustedProxies []netip.Prefix
	// FDLimit is the soft RLIMIT_NOFILE the cap was derived from or checked
	// against; 0 when it could not be read.
	FDLimit uint64
	// Anonymous, when set, says whether no request needs a key (the
	// gateway has no tenant keys): while it returns true no connection or
	// request counts as unauthenticated, and max_unauthenticated_per_ip
	// does not apply, since every request is identified and the cap would
	// only count a busy client's new connections while their first
	// request is read. It is asked for every connection (and every request
	// from a trusted proxy's connection), so a reload that adds or removes
	// tenants applies from the next one. Nil means keys are needed.
	Anonymous func() bool
}

// Limits fills the documented defaults. maxBody is limits.max_body_bytes
// with its default applied. It reads the process's file-descriptor limit,
// and is an error when max_connections is left to be derived from a limit
// that cannot be read or leaves no room; when max_connections is set above
// what the limit leaves, it warns on log (accept will fail with EMFILE
// before the cap refuses; a nil log means no warning) and goes on.
func (c Config) Limits(maxBody int64, log *slog.Logger) (Limits, error) {
	fds := fdLimit()
	l, err := c.effective(maxBody, fds)
	if err != nil {
		return l, err
	}
	if log != nil && fds > 0 && uint64(l.MaxConns) > fds-min(fds, reservedFDs) {
		log.Warn("server.max_connections is above what the file-descriptor limit leaves: accept will fail with EMFILE before the cap refuses",
			"max_connections", l.MaxConns, "fd_limit", fds)
	}
	return l, nil
}

// effective is Limits given the soft RLIMIT_NOFILE (0: unknown).
func (c Config) effective(maxBody int64, fdLimit uint64) (Limits, error) {
	l := Limits{
		ReadHeader:     c.ReadHeaderTimeout.D(),
		ReadBody:       c.ReadBodyTimeout.D(),
		Idle:           c.IdleTimeout.D(),
		Write:          c.WriteTimeout.D(),
		MaxConns:       c.MaxConnections,
		MaxUnauthPerIP: c.MaxUnauthenticatedPerIP,
		FDLimit:        fdLimit,
	}
	var err error
	if l.TrustedProxies, err = parseTrustedProxies(c.TrustedProxies); err != nil {
		return l, err
	}
	if l.ReadHeader == 0 {
		l.ReadHeader = 10 * time.Second
	}
	if l.ReadBody == 0 {
		l.ReadBody, l.ReadBodyPerRequest = BodyTimeout(maxBody), true
	}
	if l.Idle == 0 {
		l.Idle = 60 * time.Second
	}
	if l.Write == 0 {
		l.Write = 60 * time.Second
	}
	if l.MaxConns == 0 {
		if fdLimit == 0 {
			return l, fmt.Errorf("config: server.max_connections: the file-descriptor limit cannot be read to derive it; set it")
		}
		if fdLimit <= reservedFDs+2 {
			return l, fmt.Errorf("config: server.max_connections: the file-descriptor limit (%d) leaves no room for client connections; raise it (ulimit -n) or set server.max_connections", fdLimit)
		}
		l.MaxConns = int(min((fdLimit-reservedFDs)/2, derivedConnsCeiling))
	}
	if l.MaxUnauthPerIP == 0 {
		l.MaxUnauthPerIP = max(1, l.MaxConns/8)
	}
	if l.MaxUnauthPerIP > l.MaxConns {
		return l, fmt.Errorf("config: server.max_unauthenticated_per_ip: %d, want at most server.max_connections (%d)", l.MaxUnauthPerIP, l.MaxConns)
	}
	return l, nil
}

// The derived body deadline: a base for the round trips and pauses any
// client has, plus the body's size at the slowest rate a legitimate client
// is expected to send at. A client slower than that (a byte a second) is
// cut; one at 2 MiB/s has twice the time it needs.
const (
	BodyTimeoutBase = 10 * time.Second
	BodyMinRate     = 1 << 20 // bytes a second
)

// BodyTimeout is the derived read deadline of a body of size bytes:
// BodyTimeoutBase plus size at BodyMinRate, at most 1h.
func BodyTimeout(size int64) time.Duration {
	size = max(size, 0)
	return min(BodyTimeoutBase+time.Duration(size/BodyMinRate)*time.Second+
		time.Duration(size%BodyMinRate)*time.Second/BodyMinRate, maxServerTimeout)
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
