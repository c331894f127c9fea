package guard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// v2 builds a version 2 header: command, family and protocol, the address
// block and TLVs (type, value) after it.
func v2(cmd, famProto byte, addrs []byte, tlvs ...[]byte) []byte {
	var rest []byte
	rest = append(rest, addrs...)
	for _, t := range tlvs {
		rest = append(rest, t[0], byte((len(t)-1)>>8), byte(len(t)-1))
		rest = append(rest, t[1:]...)
	}
	b := append([]byte(nil), sigV2...)
	b = append(b, 0x20|cmd, famProto, byte(len(rest)>>8), byte(len(rest)))
	return append(b, rest...)
}

// inet4 and inet6 are version 2 address blocks.
func inet4(src, dst string, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	b := append(s[:], d[:]...)
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, sport), dport)
}

func inet6(src, dst string, sport, dport uint16) []byte {
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	b := append(s[:], d[:]...)
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, sport), dport)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

const httpReq = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"

// TestReadProxyHeader: each version's forms, what is left for HTTP after
// the header, and every way a header can be wrong.
func TestReadProxyHeader(t *testing.T) {
	tlvs := [][]byte{
		append([]byte{0x01}, "h2"...),              // ALPN
		append([]byte{0x02}, "api.example.com"...), // authority
		{0x04}, // NOOP, empty
		append([]byte{0xE0}, strings.Repeat("x", 300)...), // a custom type, longer than the reader's buffer
	}
	for _, tc := range []struct {
		name string
		in   string
		want proxyHeader
		err  string // "": none; "not": errNotProxy; "eof": io.EOF; "cut": a *proxyError wrapping io.EOF or io.ErrUnexpectedEOF; else in a *proxyError
	}{
		{"v1 tcp4", "PROXY TCP4 198.51.100.7 10.0.0.1 51234 443\r\n",
			proxyHeader{Version: 1, Src: ap("198.51.100.7:51234"), Dst: ap("10.0.0.1:443")}, ""},
		{"v1 tcp6", "PROXY TCP6 2001:db8::7 2001:db8::1 1 65535\r\n",
			proxyHeader{Version: 1, Src: ap("[2001:db8::7]:1"), Dst: ap("[2001:db8::1]:65535")}, ""},
		{"v1 longest", "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
			proxyHeader{Version: 1, Src: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), Dst: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}, ""},
		{"v1 unknown", "PROXY UNKNOWN\r\n", proxyHeader{Version: 1}, ""},
		{"v1 unknown with addresses", "PROXY UNKNOWN ffff:: ffff:: 1 2\r\n", proxyHeader{Version: 1}, ""},
		{"v2 tcp4", string(v2(v2Proxy, afInet<<4|protoStream, inet4("198.51.100.7", "10.0.0.1", 51234, 443))),
			proxyHeader{Version: 2, Src: ap("198.51.100.7:51234"), Dst: ap("10.0.0.1:443")}, ""},
		{"v2 tcp6 with TLVs", string(v2(v2Proxy, afInet6<<4|protoStream, inet6("2001:db8::7", "2001:db8::1", 5, 6), tlvs...)),
			proxyHeader{Version: 2, Src: ap("[2001:db8::7]:5"), Dst: ap("[2001:db8::1]:6")}, ""},
		{"v2 local", string(v2(v2Local, afUnspec<<4|protoUnspec, nil)), proxyHeader{Version: 2, Local: true}, ""},
		{"v2 local with addresses", string(v2(v2Local, afInet<<4|protoStream, inet4("1.2.3.4", "5.6.7.8", 1, 2))),
			proxyHeader{Version: 2, Local: true}, ""},
		{"v2 unspec", string(v2(v2Proxy, afUnspec<<4|protoUnspec, []byte("anything at all"))), proxyHeader{Version: 2}, ""},
		{"v2 unix", string(v2(v2Proxy, afUnix<<4|protoStream, make([]byte, 216))), proxyHeader{Version: 2}, ""},

		{"http", httpReq, proxyHeader{}, "not"},
		{"http POST", "POST / HTTP/1.1\r\n", proxyHeader{}, "not"},
		{"http PRI", "PRI * HTTP/2.0\r\n", proxyHeader{}, "not"},
		{"blank line", "\r\nGET / HTTP/1.1\r\n", proxyHeader{}, "not"},
		{"empty", "", proxyHeader{}, "eof"},

		{"v1 truncated", "PROXY TCP4 198.51.100.7 10.0", proxyHeader{}, "cut"},
		{"v1 signature only", "PROXY", proxyHeader{}, "cut"},
		{"v1 oversized", "PROXY UNKNOWN " + strings.Repeat("x", 100) + "\r\n", proxyHeader{}, "longer than 107"},
		{"v1 oversized, no end", "PROXY TCP4 " + strings.Repeat("1", 200), proxyHeader{}, "longer than 107"},
		{"v1 bare LF", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", proxyHeader{}, "CRLF"},
		{"v1 lower case", "PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", proxyHeader{}, "protocol"},
		{"v1 tcp4 with v6", "PROXY TCP4 ::1 ::1 1 2\r\n", proxyHeader{}, "address"},
		{"v1 tcp6 with v4", "PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", proxyHeader{}, "address"},
		{"v1 zone", "PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", proxyHeader{}, "address"},
		{"v1 bad address", "PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", proxyHeader{}, "address"},
		{"v1 port too big", "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", proxyHeader{}, "port"},
		{"v1 signed port", "PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", proxyHeader{}, "port"},
		{"v1 double space", "PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", proxyHeader{}, "fields"},
		{"v1 too few fields", "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", proxyHeader{}, "fields"},

		{"v2 truncated fixed part", string(sigV2) + "\x21", proxyHeader{}, "cut"},
		{"v2 truncated block", string(v2(v2Proxy, afInet<<4|protoStream, inet4("1.2.3.4", "5.6.7.8", 1, 2))[:20]), proxyHeader{}, "cut"},
		{"v2 version 1", string(sigV2) + "\x11\x11\x00\x00", proxyHeader{}, "version"},
		{"v2 command 2", string(sigV2) + "\x22\x11\x00\x00", proxyHeader{}, "command"},
		{"v2 family 4", string(sigV2) + "\x21\x41\x00\x00", proxyHeader{}, "family"},
		{"v2 protocol 3", string(sigV2) + "\x21\x13\x00\x00", proxyHeader{}, "family"},
		{"v2 udp", string(v2(v2Proxy, afInet<<4|protoDgram, inet4("1.2.3.4", "5.6.7.8", 1, 2))), proxyHeader{}, "STREAM"},
		{"v2 short block", string(v2(v2Proxy, afInet6<<4|protoStream, inet4("1.2.3.4", "5.6.7.8", 1, 2))), proxyHeader{}, "shorter"},
		{"v2 TLV cut", string(v2(v2Proxy, afInet<<4|protoStream, append(inet4("1.2.3.4", "5.6.7.8", 1, 2), 0x01, 0x00))), proxyHeader{}, "cut short"},
		{"v2 TLV overruns", string(v2(v2Proxy, afInet<<4|protoStream, append(inet4("1.2.3.4", "5.6.7.8", 1, 2), 0x01, 0x00, 0x09, 'h'))), proxyHeader{}, "TLV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in+httpReq), 256)
			if tc.err != "" && tc.err != "not" {
				// Errors are about the header alone: nothing after it.
				br = bufio.NewReaderSize(strings.NewReader(tc.in), 256)
			}
			h, err := readProxyHeader(br)
			var pe *proxyError
			switch tc.err {
			case "":
				if err != nil || h != tc.want {
					t.Fatalf("got %+v, %v; want %+v", h, err, tc.want)
				}
				if rest, _ := io.ReadAll(br); string(rest) != httpReq {
					t.Errorf("left %q for HTTP, want %q", rest, httpReq)
				}
			case "not":
				if !errors.Is(err, errNotProxy) {
					t.Fatalf("got %+v, %v; want errNotProxy", h, err)
				}
				if rest, _ := io.ReadAll(br); string(rest) != tc.in+httpReq {
					t.Errorf("left %q for HTTP, want all of it", rest)
				}
			case "eof":
				if err != io.EOF {
					t.Fatalf("got %+v, %v; want io.EOF as it came", h, err)
				}
			case "cut":
				if !errors.As(err, &pe) || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("got %+v, %v; want a header cut short by an EOF", h, err)
				}
			default:
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want a malformed header naming %q", h, err, tc.err)
				}
			}
		})
	}
}

// TestDetectProxyDecidesEarly: bytes that cannot begin a signature are
// HTTP at once, without waiting for more; a signature's prefix waits.
func TestDetectProxyDecidesEarly(t *testing.T) {
	for _, tc := range []struct {
		first string
		want  error // nil: it waits for more (reads io.EOF from the reader below)
	}{
		{"G", errNotProxy}, {"P", nil}, {"PO", errNotProxy}, {"PROX", nil}, {"PROXY", nil}, {"PROXZ", errNotProxy},
		{"\r", nil}, {"\r\n", nil}, {"\r\n\r\n\x00\r\nQUIT", nil}, {"\r\nG", errNotProxy}, {"\r\n\r\n\x00\r\nQUIX", errNotProxy},
	} {
		// A reader that gives the first bytes, then fails: a peer that
		// has sent only them.
		r := io.MultiReader(strings.NewReader(tc.first), errReader{})
		_, err := detectProxy(bufio.NewReaderSize(r, 256))
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%q: %v, want %v", tc.first, err, tc.want)
		}
		if tc.want == nil && !errors.Is(err, errWaited) {
			t.Errorf("%q: %v, want to wait for more", tc.first, err)
		}
	}
}

var errWaited = errors.New("waited for more")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errWaited }

// FuzzProxyHeader: no input panics the parser; HTTP is left whole; a
// header it accepts is consumed exactly, within the protocol's bounds, and
// its addresses parse back the same when written again.
func FuzzProxyHeader(f *testing.F) {
	for _, s := range []string{
		"PROXY TCP4 198.51.100.7 10.0.0.1 51234 443\r\n" + httpReq,
		"PROXY TCP6 2001:db8::7 2001:db8::1 1 65535\r\n",
		"PROXY UNKNOWN\r\n",
		"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
		httpReq,
		string(v2(v2Proxy, afInet<<4|protoStream, inet4("198.51.100.7", "10.0.0.1", 51234, 443))) + httpReq,
		string(v2(v2Proxy, afInet6<<4|protoStream, inet6("2001:db8::7", "2001:db8::1", 5, 6), []byte{0x01, 'h', '2'}, []byte{0x04})),
		string(v2(v2Local, afUnspec<<4, nil)),
		string(v2(v2Proxy, afUnix<<4|protoStream, make([]byte, 216))),
		string(sigV2) + "\x21\x11\xff\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 256)
		h, err := readProxyHeader(br)
		rest, _ := io.ReadAll(br)
		if errors.Is(err, errNotProxy) {
			if !bytes.Equal(rest, data) {
				t.Fatalf("not a header, but %d of %d bytes consumed", len(data)-len(rest), len(data))
			}
			return
		}
		if err != nil {
			var pe *proxyError
			if !errors.As(err, &pe) && (err != io.EOF || len(data) > 0) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		n := len(data) - len(rest)
		switch h.Version {
		case 1:
			if n > maxV1Line || !bytes.HasPrefix(data, sigV1) || !bytes.HasSuffix(data[:n], []byte("\r\n")) {
				t.Fatalf("v1 header of %d bytes: %q", n, data[:n])
			}
		case 2:
			if !bytes.HasPrefix(data, sigV2) || n != v2Fixed+int(binary.BigEndian.Uint16(data[14:16])) {
				t.Fatalf("v2 header of %d bytes, length field %d", n, binary.BigEndian.Uint16(data[14:16]))
			}
		default:
			t.Fatalf("version %d", h.Version)
		}
		if h.Src.IsValid() != h.Dst.IsValid() || h.Local && h.Src.IsValid() {
			t.Fatalf("header %+v", h)
		}
		if !h.Src.IsValid() {
			return
		}
		// Written again as either version, it reads back the same.
		var again []byte
		if h.Src.Addr().Is4() {
			again = v2(v2Proxy, afInet<<4|protoStream, inet4(h.Src.Addr().String(), h.Dst.Addr().String(), h.Src.Port(), h.Dst.Port()))
		} else {
			again = v2(v2Proxy, afInet6<<4|protoStream, inet6(h.Src.Addr().String(), h.Dst.Addr().String(), h.Src.Port(), h.Dst.Port()))
		}
		h2, err := readProxyHeader(bufio.NewReaderSize(bytes.NewReader(again), 256))
		if err != nil || h2.Src != h.Src || h2.Dst != h.Dst {
			t.Fatalf("%+v written as v2 read back as %+v, %v", h, h2, err)
		}
		fam := "TCP4"
		if !h.Src.Addr().Is4() {
			fam = "TCP6"
		}
		line := "PROXY " + fam + " " + h.Src.Addr().String() + " " + h.Dst.Addr().String() + " " +
			strconv.Itoa(int(h.Src.Port())) + " " + strconv.Itoa(int(h.Dst.Port())) + "\r\n"
		h1, err := readProxyHeader(bufio.NewReaderSize(strings.NewReader(line), 256))
		if err != nil || h1.Src != h.Src || h1.Dst != h.Dst {
			t.Fatalf("%+v written as %q read back as %+v, %v", h, line, h1, err)
		}
	})
}
