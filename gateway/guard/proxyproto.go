package guard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// The PROXY protocol (HAProxy's, versions 1 and 2) is how a proxy that
// relays TCP tells the server behind it who the client is: a header
// written once, before any byte of the client's, at the start of the
// connection. Only a trusted proxy's connection is read for one
// (listener.go); from anyone else the same bytes are the start of an HTTP
// request, and net/http rejects them as such.
//
// The parser is small and strict, and reads no further than the header:
// the bytes after it belong to HTTP. Version 1 is one text line of at most
// 107 bytes; version 2 a 16-byte binary header followed by at most 65,535
// bytes of addresses and TLVs. The TLVs are checked for their framing and
// otherwise ignored: nothing sluice does depends on them.

// Signatures. v1 is text; v2's twelve bytes cannot begin an HTTP request.
var (
	sigV1 = []byte("PROXY ")
	sigV2 = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

const (
	// maxV1Line is version 1's longest header, CRLF included.
	maxV1Line = 107
	// v2Fixed is version 2's fixed part: signature, version and command,
	// family and protocol, length.
	v2Fixed = 16
)

// proxyHeader is what a PROXY header says about the connection.
type proxyHeader struct {
	Version int // 1 or 2
	// Src and Dst are the client's and the proxy's listening address as the
	// proxy saw them. Both are the zero AddrPort when the header carries no
	// address to use: version 2's LOCAL command (the proxy's own connection,
	// a health check), an unspecified or Unix family, or version 1's
	// UNKNOWN; the connection is then taken as the proxy's own.
	Src, Dst netip.AddrPort
	// Local is version 2's LOCAL command.
	Local bool
}

// errNotProxy says the connection's first bytes are not a PROXY
// signature: they are HTTP, and are left unread.
var errNotProxy = errors.New("proxy protocol: no signature")

// proxyError is a malformed PROXY header, or one cut short (err: the
// read's error); a connection that sends one is closed.
type proxyError struct {
	msg string
	err error
}

func (e *proxyError) Error() string {
	if e.err != nil {
		return "proxy protocol: " + e.msg + ": " + e.err.Error()
	}
	return "proxy protocol: " + e.msg
}

func (e *proxyError) Unwrap() error { return e.err }

func malformed(format string, args ...any) error {
	return &proxyError{msg: fmt.Sprintf(format, args...)}
}

// readProxyHeader reads a PROXY header, version 1 or 2, from the start of
// br, whose buffer must hold at least maxV1Line+1 bytes. It waits for
// only as many bytes as it takes to tell: bytes that cannot begin either
// signature (an HTTP method) make it return errNotProxy at once, with
// nothing consumed. Otherwise it consumes exactly the header. An error
// from br before any byte came is returned as it came (io.EOF, a
// deadline); a header that breaks the protocol, or is cut short by such
// an error, is a *proxyError (which unwraps to the read's error).
func readProxyHeader(br *bufio.Reader) (proxyHeader, error) {
	v, err := detectProxy(br)
	if err != nil {
		if br.Buffered() > 0 && !errors.Is(err, errNotProxy) {
			err = &proxyError{msg: "signature cut short", err: err}
		}
		return proxyHeader{}, err
	}
	var h proxyHeader
	if v == 1 {
		h, err = readV1(br)
	} else {
		h, err = readV2(br)
	}
	var pe *proxyError
	if err != nil && !errors.As(err, &pe) {
		err = &proxyError{msg: "header cut short", err: err}
	}
	return h, err
}

// detectProxy peeks at the first bytes until they match a whole signature
// (1 or 2) or cannot (errNotProxy).
func detectProxy(br *bufio.Reader) (int, error) {
	for n := 1; ; n++ {
		b, err := br.Peek(n)
		if err != nil {
			return 0, err
		}
		// Everything buffered already can decide at once.
		if m := br.Buffered(); m > n {
			b, _ = br.Peek(min(m, len(sigV2)))
			n = len(b)
		}
		switch {
		case bytes.HasPrefix(b, sigV1):
			return 1, nil
		case bytes.HasPrefix(b, sigV2):
			return 2, nil
		case !bytes.HasPrefix(sigV1, b) && !bytes.HasPrefix(sigV2, b):
			return 0, errNotProxy
		}
	}
}

// readV1 reads a version 1 line: "PROXY TCP4|TCP6 src dst sport dport\r\n"
// or "PROXY UNKNOWN …\r\n".
func readV1(br *bufio.Reader) (proxyHeader, error) {
	var line []byte
	for {
		b, _ := br.Peek(br.Buffered())
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i+1]
			break
		}
		if len(b) >= maxV1Line {
			return proxyHeader{}, malformed("v1 header longer than %d bytes", maxV1Line)
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return proxyHeader{}, err
		}
	}
	if len(line) > maxV1Line {
		return proxyHeader{}, malformed("v1 header longer than %d bytes", maxV1Line)
	}
	h, err := parseV1(string(line))
	if err != nil {
		return proxyHeader{}, err
	}
	_, _ = br.Discard(len(line))
	return h, nil
}

// parseV1 parses one version 1 line, its CRLF included.
func parseV1(line string) (proxyHeader, error) {
	body, ok := strings.CutSuffix(line, "\r\n")
	if !ok {
		return proxyHeader{}, malformed("v1 header does not end in CRLF")
	}
	body = strings.TrimPrefix(body, "PROXY ")
	h := proxyHeader{Version: 1}
	if body == "UNKNOWN" || strings.HasPrefix(body, "UNKNOWN ") {
		// The rest of the line, whatever it is, is to be ignored.
		return h, nil
	}
	f := strings.Split(body, " ")
	if len(f) != 5 {
		return proxyHeader{}, malformed("v1 header has %d fields after PROXY, want 5", len(f))
	}
	var is4 bool
	switch f[0] {
	case "TCP4":
		is4 = true
	case "TCP6":
	default:
		return proxyHeader{}, malformed("v1 protocol %q, want TCP4, TCP6 or UNKNOWN", f[0])
	}
	var addrs [2]netip.Addr
	var ports [2]uint16
	for i := range 2 {
		a, err := netip.ParseAddr(f[1+i])
		if err != nil || a.Zone() != "" || a.Is4() != is4 {
			return proxyHeader{}, malformed("v1 %s address %q", f[0], f[1+i])
		}
		p, err := parsePort(f[3+i])
		if err != nil {
			return proxyHeader{}, err
		}
		addrs[i], ports[i] = a, p
	}
	h.Src = netip.AddrPortFrom(addrs[0], ports[0])
	h.Dst = netip.AddrPortFrom(addrs[1], ports[1])
	return h, nil
}

// parsePort parses a version 1 port: decimal digits, 0 to 65535.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || s[0] < '0' || s[0] > '9' {
		return 0, malformed("v1 port %q", s)
	}
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, malformed("v1 port %q", s)
	}
	return uint16(p), nil
}

// Version 2's families and protocols (the high and low nibbles of its
// 14th byte) and its commands (the low nibble of its 13th).
const (
	v2Local = 0x0
	v2Proxy = 0x1

	afUnspec = 0x0
	afInet   = 0x1
	afInet6  = 0x2
	afUnix   = 0x3

	protoUnspec = 0x0
	protoStream = 0x1
	protoDgram  = 0x2
)

// readV2 reads a version 2 header: the fixed part, then as many bytes as
// its length says.
func readV2(br *bufio.Reader) (proxyHeader, error) {
	fixed, err := br.Peek(v2Fixed)
	if err != nil {
		return proxyHeader{}, err
	}
	n := int(binary.BigEndian.Uint16(fixed[14:16]))
	var buf [v2Fixed]byte
	copy(buf[:], fixed)
	// Check what can be checked before waiting for the rest.
	if _, err := parseV2(buf[:], nil, true); err != nil {
		return proxyHeader{}, err
	}
	_, _ = br.Discard(v2Fixed)
	rest := make([]byte, n)
	if _, err := io.ReadFull(br, rest); err != nil {
		return proxyHeader{}, err
	}
	return parseV2(buf[:], rest, false)
}

// parseV2 parses version 2's fixed part and the rest after it. With
// fixedOnly, only the fixed part is checked.
func parseV2(fixed, rest []byte, fixedOnly bool) (proxyHeader, error) {
	h := proxyHeader{Version: 2}
	if v := fixed[12] >> 4; v != 2 {
		return h, malformed("v2 version %d, want 2", v)
	}
	cmd, fam, proto := fixed[12]&0xf, fixed[13]>>4, fixed[13]&0xf
	switch cmd {
	case v2Local:
		h.Local = true
	case v2Proxy:
	default:
		return h, malformed("v2 command %#x, want LOCAL or PROXY", cmd)
	}
	if fam > afUnix || proto > protoDgram {
		return h, malformed("v2 family and protocol %#02x", fixed[13])
	}
	if fixedOnly {
		return h, nil
	}
	if h.Local {
		// The proxy's own connection: the addresses, if any, are to be
		// ignored, and so is the rest of the block.
		return h, nil
	}
	if fam == afUnspec {
		// Nothing to use, and nothing to check: the receiver is to
		// discard the whole block.
		return h, nil
	}
	var alen int
	switch fam {
	case afInet:
		alen = 12
	case afInet6:
		alen = 36
	case afUnix:
		alen = 216
	}
	if fam == afInet || fam == afInet6 {
		if proto != protoStream {
			return h, malformed("v2 protocol %#x over IP, want STREAM (TCP)", proto)
		}
	}
	if len(rest) < alen {
		return h, malformed("v2 length %d, shorter than its family's %d bytes of addresses", len(rest), alen)
	}
	if err := checkTLVs(rest[alen:]); err != nil {
		return h, err
	}
	switch fam {
	case afInet:
		h.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(rest[0:4])), binary.BigEndian.Uint16(rest[8:10]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(rest[4:8])), binary.BigEndian.Uint16(rest[10:12]))
	case afInet6:
		h.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(rest[0:16])), binary.BigEndian.Uint16(rest[32:34]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(rest[16:32])), binary.BigEndian.Uint16(rest[34:36]))
	}
	// AF_UNIX: no address to use; the connection is taken as the proxy's
	// own.
	return h, nil
}

// checkTLVs checks that b is a whole sequence of TLVs: a type byte, a
// two-byte length and that many bytes, each.
func checkTLVs(b []byte) error {
	for len(b) > 0 {
		if len(b) < 3 {
			return malformed("v2 TLV cut short: %d bytes left", len(b))
		}
		n := int(binary.BigEndian.Uint16(b[1:3]))
		if len(b) < 3+n {
			return malformed("v2 TLV %#02x of length %d, with %d bytes left", b[0], n, len(b)-3)
		}
		b = b[3+n:]
	}
	return nil
}
