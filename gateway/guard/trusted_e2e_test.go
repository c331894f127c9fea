package guard_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/guard"
	"github.com/sluicehq/sluice/gateway/observe"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// The tests of this file are the client address behind a trusted proxy,
// with the test itself playing the proxy (a raw connection from the
// loopback address trusted_proxies names) and with peers that are not
// trusted; the tests behind a real HAProxy are in haproxy_test.go.

// logBuffer is the gateway's JSON log, written by its goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines are the log's lines with message msg, decoded.
func (l *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.b.String()
	l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(text) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// settleLimit is how long these tests wait for what the gateway does after
// the client has its answer: a log line or a span is written when its
// request's handler returns, or its refusals' window ends; a flood's
// connections end as the gateway reaches them.
const settleLimit = 5 * time.Second

// accessClient is the client field of request id's access-log line.
func accessClient(t *testing.T, logs *logBuffer, id string) string {
	t.Helper()
	var client any
	testkit.EventuallyWithin(t, settleLimit, "the access-log line of "+id, func() bool {
		for _, l := range logs.lines(t, "request") {
			if l["request_id"] == id {
				client = l["client"]
				return true
			}
		}
		return false
	})
	s, _ := client.(string)
	return s
}

// refusedAt says the log has a "connections refused" line for reason and
// address addr.
func refusedAt(t *testing.T, logs *logBuffer, reason, addr string) bool {
	for _, l := range logs.lines(t, "connections refused") {
		if l["reason"] == reason && l["addr"] == addr {
			return true
		}
	}
	return false
}

// loggedServer runs the gateway with its log in a JSON buffer and its
// spans in an in-memory exporter.
func loggedServer(t *testing.T, cfg config.Config) (string, *logBuffer, *tracetest.InMemoryExporter) {
	t.Helper()
	logs := &logBuffer{}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	addr := startServerWith(t, cfg, gateway.Options{Logger: observe.LogConfig{Format: observe.LogFormatJSON}.Logger(logs), TracerProvider: tp})
	return addr, logs, exp
}

// spanClient is the client.address of request id's server span.
func spanClient(t *testing.T, exp *tracetest.InMemoryExporter, id string) string {
	t.Helper()
	var got string
	testkit.EventuallyWithin(t, settleLimit, "the span of "+id, func() bool {
		for _, s := range exp.GetSpans() {
			attrs := map[attribute.Key]attribute.Value{}
			for _, a := range s.Attributes {
				attrs[a.Key] = a.Value
			}
			if attrs["sluice.request_id"].AsString() == id && s.EndTime.After(s.StartTime) {
				got = attrs["client.address"].AsString()
				return true
			}
		}
		return false
	})
	return got
}

// request is a chat completion with the given id and extra header lines,
// with acme's key (the servers of these tests have a tenant: without one
// no connection counts against its address).
func request(id, headers string) string {
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Request-Id: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		acmeKey, id, headers, len(chatBody), chatBody)
}

// holdBody opens a connection from from, writes prefix (a PROXY header,
// or nothing) and a request's headers declaring a body, and waits for the
// server's 100 Continue — by then the connection or the request counts
// under its client — then sends part of the body and holds it: a client
// trickling its body.
func holdBody(t *testing.T, from, addr, prefix, headers string) net.Conn {
	t.Helper()
	c := dialFrom(t, from, addr)
	if _, err := io.WriteString(c, prefix+"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+acmeKey+"\r\nExpect: 100-continue\r\n"+headers+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("waiting for 100 Continue: %q, %v", line, err)
	}
	if _, err := io.WriteString(c, `{"model":`); err != nil {
		t.Fatal(err)
	}
	return c
}

// proxyV1 and proxyV2 are PROXY headers naming src (port 40000) as the
// client of a connection to 127.0.0.1:8080.
func proxyV1(src string) string {
	fam := "TCP4"
	if netip.MustParseAddr(src).Is6() {
		fam = "TCP6"
	}
	dst := map[string]string{"TCP4": "127.0.0.1", "TCP6": "::1"}[fam]
	return "PROXY " + fam + " " + src + " " + dst + " 40000 8080\r\n"
}

func proxyV2(src string) string {
	a := netip.MustParseAddr(src)
	b := []byte("\r\n\r\n\x00\r\nQUIT\n\x21")
	var block []byte
	if a.Is4() {
		s, d := a.As4(), [4]byte{127, 0, 0, 1}
		b = append(b, 0x11)
		block = append(s[:], d[:]...)
	} else {
		s, d := a.As16(), netip.IPv6Loopback().As16()
		b = append(b, 0x21)
		block = append(s[:], d[:]...)
	}
	block = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(block, 40000), 8080)
	block = append(block, 0x01, 0x00, 0x02, 'h', '2') // an ALPN TLV
	b = binary.BigEndian.AppendUint16(b, uint16(len(block)))
	return string(append(b, block...))
}

// TestTrustedProxyNamesTheClient: from the trusted proxy, the client is
// the PROXY header's source (v1 and v2) or the request's right-most
// untrusted X-Forwarded-For address, per request on a reused connection;
// the access log and the span show it, the unauthenticated cap counts it
// (a canned 429 for a PROXY connection, a 429 in the same shape for an
// X-Forwarded-For request), and the proxy's own address is never capped.
func TestTrustedProxyNamesTheClient(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{})
	const proxy = "127.0.0.10"
	cfg := withTenant(connServer(up.URL, guard.Config{MaxConnections: 64, MaxUnauthenticatedPerIP: 2, TrustedProxies: []string{proxy}}))
	addr, logs, spans := loggedServer(t, cfg)
	if ls := logs.lines(t, "trusting the proxies in front: their PROXY header or X-Forwarded-For names the client"); len(ls) != 1 ||
		fmt.Sprint(ls[0]["trusted_proxies"]) != "[127.0.0.10/32]" {
		t.Errorf("the start-up line naming the trusted proxies: %v", ls)
	}

	for _, tc := range []struct {
		name, prefix, headers, want string
	}{
		{"v1", proxyV1("198.51.100.7"), "", "198.51.100.7"},
		{"v2", proxyV2("198.51.100.8"), "", "198.51.100.8"},
		{"v2 ipv6", proxyV2("2001:db8::7"), "", "2001:db8::7"},
		{"v2 and a forged X-Forwarded-For", proxyV2("198.51.100.9"), "X-Forwarded-For: 203.0.113.1\r\n", "198.51.100.9"},
		{"X-Forwarded-For", "", "X-Forwarded-For: 203.0.113.9\r\n", "203.0.113.9"},
		{"X-Forwarded-For spoofed on the left", "", "X-Forwarded-For: 1.1.1.1, 203.0.113.10\r\n", "203.0.113.10"},
		{"X-Forwarded-For through the proxy twice", "", "X-Forwarded-For: 203.0.113.11, " + proxy + "\r\n", "203.0.113.11"},
		{"Forwarded and X-Real-IP are not read", "", "Forwarded: for=203.0.113.12\r\nX-Real-IP: 203.0.113.12\r\n", proxy},
		{"v2 LOCAL: the proxy itself", "\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00", "X-Forwarded-For: 203.0.113.13\r\n", "203.0.113.13"},
	} {
		c := dialFrom(t, proxy, addr)
		id := "trusted-" + strings.ReplaceAll(tc.name, " ", "-")
		if resp := roundTrip(t, c, bufio.NewReader(c), tc.prefix+request(id, tc.headers)); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", tc.name, resp.StatusCode)
		}
		if got := accessClient(t, logs, id); got != tc.want {
			t.Errorf("%s: access log client %q, want %s", tc.name, got, tc.want)
		}
		if got := spanClient(t, spans, id); got != tc.want {
			t.Errorf("%s: span client.address %q, want %s", tc.name, got, tc.want)
		}
	}

	// One connection of the proxy's, two clients in turn.
	c := dialFrom(t, proxy, addr)
	br := bufio.NewReader(c)
	for _, client := range []string{"203.0.113.20", "203.0.113.21"} {
		if resp := roundTrip(t, c, br, request("reused-"+client, "X-Forwarded-For: "+client+"\r\n")); resp.StatusCode != 200 {
			t.Fatalf("reused connection, %s: status %d", client, resp.StatusCode)
		}
		if got := accessClient(t, logs, "reused-"+client); got != client {
			t.Errorf("reused connection: client %q, want %s", got, client)
		}
	}

	// The cap, by X-Forwarded-For: two requests of 203.0.113.50 holding
	// their bodies, the third refused; another client is served.
	holdBody(t, proxy, addr, "", "X-Forwarded-For: 203.0.113.50\r\n")
	holdBody(t, proxy, addr, "", "X-Forwarded-For: 198.51.100.99, 203.0.113.50\r\n")
	third := dialFrom(t, proxy, addr)
	if _, err := io.WriteString(third, request("third", "X-Forwarded-For: 203.0.113.50\r\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := readToEOF(t, third, 5*time.Second)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("third request: %q: %v", got, err)
	}
	if resp.StatusCode != 429 || resp.Header.Get(contract.HeaderReason) != "unauthenticated_per_ip" || resp.Header.Get("Retry-After") != "1" ||
		!resp.Close || !bytes.Contains(got, []byte(`"code":"unauthenticated_per_ip"`)) {
		t.Errorf("third request of a client at its cap: %q, want a 429 in the canned refusal's shape, the connection closed", got)
	}
	other := dialFrom(t, proxy, addr)
	if resp := roundTrip(t, other, bufio.NewReader(other), request("other", "X-Forwarded-For: 203.0.113.51\r\n")); resp.StatusCode != 200 {
		t.Errorf("another client: status %d", resp.StatusCode)
	}

	// The cap, by PROXY header: the third connection of 198.51.100.60 is
	// refused at its header.
	holdBody(t, proxy, addr, proxyV1("198.51.100.60"), "")
	holdBody(t, proxy, addr, proxyV2("198.51.100.60"), "")
	refused := dialFrom(t, proxy, addr)
	if _, err := io.WriteString(refused, proxyV1("198.51.100.60")+request("refused", "")); err != nil {
		t.Fatal(err)
	}
	if got, _ := readToEOF(t, refused, 5*time.Second); !bytes.HasPrefix(got, []byte("HTTP/1.1 429")) || !bytes.Contains(got, []byte("unauthenticated_per_ip")) {
		t.Errorf("third PROXY connection of a client at its cap: %q, want the canned 429", got)
	}

	// A malformed header from the proxy: closed, unanswered.
	bad := dialFrom(t, proxy, addr)
	if _, err := io.WriteString(bad, "PROXY TCP4 198.51.100.300 127.0.0.1 1 2\r\n"+request("bad", "")); err != nil {
		t.Fatal(err)
	}
	if got, _ := readToEOF(t, bad, 5*time.Second); len(got) != 0 {
		t.Errorf("malformed PROXY header: answered %q, want a close", got)
	}

	testkit.EventuallyWithin(t, settleLimit, "the refusals' log lines", func() bool {
		return refusedAt(t, logs, "unauthenticated_per_ip", "203.0.113.50") && refusedAt(t, logs, "unauthenticated_per_ip", "198.51.100.60") &&
			refusedAt(t, logs, "proxy_header", proxy)
	})
}

// TestUntrustedPeerHeadersChangeNothing: from a peer that is not a trusted
// proxy — with no trusted proxies, and with others trusted — a PROXY
// header is not read (net/http answers it 400), X-Forwarded-For is
// ignored, and the cap and the log count the peer's address.
func TestUntrustedPeerHeadersChangeNothing(t *testing.T) {
	for _, trusted := range [][]string{nil, {"10.0.0.0/8", "127.0.0.99"}} {
		t.Run(fmt.Sprint(trusted), func(t *testing.T) {
			_, up := testkit.StartMock(t, mockllm.Config{})
			const peer = "127.0.0.5"
			cfg := withTenant(connServer(up.URL, guard.Config{MaxConnections: 64, MaxUnauthenticatedPerIP: 2, TrustedProxies: trusted}))
			addr, logs, spans := loggedServer(t, cfg)

			c := dialFrom(t, peer, addr)
			if resp := roundTrip(t, c, bufio.NewReader(c), request("forged", "X-Forwarded-For: 198.51.100.1\r\n")); resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := accessClient(t, logs, "forged"); got != peer {
				t.Errorf("access log client %q, want the peer %s", got, peer)
			}
			if got := spanClient(t, spans, "forged"); got != peer {
				t.Errorf("span client.address %q, want the peer %s", got, peer)
			}

			// Two bodies held, each claiming another client: the peer's
			// cap is full, whatever the headers say.
			holdBody(t, peer, addr, "", "X-Forwarded-For: 198.51.100.2\r\n")
			holdBody(t, peer, addr, "", "X-Forwarded-For: 198.51.100.3\r\n")
			for _, prefix := range []string{proxyV1("198.51.100.4"), proxyV2("198.51.100.5")} {
				c := dialFrom(t, peer, addr)
				if _, err := io.WriteString(c, prefix+request("refused", "")); err != nil {
					t.Fatal(err)
				}
				if got, _ := readToEOF(t, c, 5*time.Second); !bytes.HasPrefix(got, []byte("HTTP/1.1 429")) {
					t.Errorf("a PROXY header from the peer at its cap: %q, want the canned 429 at accept", got)
				}
			}
			testkit.EventuallyWithin(t, settleLimit, "the refusal's log line", func() bool { return refusedAt(t, logs, "unauthenticated_per_ip", peer) })

			// From another address, under its cap: the PROXY header is
			// HTTP's to reject.
			for _, prefix := range []string{proxyV1("198.51.100.6"), proxyV2("198.51.100.7")} {
				c := dialFrom(t, "127.0.0.6", addr)
				if _, err := io.WriteString(c, prefix+request("proxied", "")); err != nil {
					t.Fatal(err)
				}
				if got, _ := readToEOF(t, c, 5*time.Second); !bytes.HasPrefix(got, []byte("HTTP/1.1 400")) {
					t.Errorf("a PROXY header from an untrusted peer: %q, want net/http's 400", got)
				}
			}
			for _, l := range logs.lines(t, "request") {
				if l["client"] != peer && l["client"] != "127.0.0.6" {
					t.Errorf("access line with client %v", l["client"])
				}
			}
		})
	}
}
