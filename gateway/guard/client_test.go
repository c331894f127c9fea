package guard

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestParseTrustedProxies: addresses and CIDR blocks, and an error naming
// the field and the entry for anything else.
func TestParseTrustedProxies(t *testing.T) {
	got, err := parseTrustedProxies([]string{"10.0.0.7", "10.0.0.0/8", "fd00::/8", "::1", "::ffff:192.0.2.1", "0.0.0.0/0"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.7/32", "10.0.0.0/8", "fd00::/8", "::1/128", "192.0.2.1/32", "0.0.0.0/0"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("entry %d: %s, want %s", i, p, want[i])
		}
	}
	for _, tc := range []struct{ entry, want string }{
		{"", "want an IP address"},
		{"10.0.0.300", "want an IP address"},
		{"example.com", "want an IP address"},
		{"10.0.0.0/33", "want an IP address"},
		{"fe80::1%eth0", "want an IP address"},
		{"10.0.0.1/8", "did you mean 10.0.0.0/8"},
		{"::ffff:10.0.0.0/104", "IPv4-mapped"},
		{" 10.0.0.1", "want an IP address"},
	} {
		_, err := parseTrustedProxies([]string{"10.0.0.7", tc.entry})
		if err == nil || !strings.HasPrefix(err.Error(), "config: server.trusted_proxies[1]: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming server.trusted_proxies[1] and %q", tc.entry, err, tc.want)
		}
		if err := (Config{TrustedProxies: []string{tc.entry}}).Validate(); err == nil || !strings.Contains(err.Error(), "server.trusted_proxies[0]") {
			t.Errorf("%q: Validate: %v", tc.entry, err)
		}
		if _, err := (Config{MaxConnections: 10, TrustedProxies: []string{tc.entry}}).effective(1<<20, 0); err == nil {
			t.Errorf("%q: Limits took it", tc.entry)
		}
	}
}

// TestForwardedClient: the right-most address that is not a trusted
// proxy's; a client cannot choose what is read by writing its own
// X-Forwarded-For, since the proxies append to it.
func TestForwardedClient(t *testing.T) {
	trusted, err := parseTrustedProxies([]string{"10.0.0.0/8", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name string
		xff  []string
		want string
	}{
		{"none", nil, "10.0.0.1"},
		{"one", []string{"198.51.100.7"}, "198.51.100.7"},
		{"spoofed on the left", []string{"1.1.1.1, 198.51.100.7"}, "198.51.100.7"},
		{"through trusted proxies", []string{"198.51.100.7, 10.0.0.9, 10.1.2.3"}, "198.51.100.7"},
		{"several lines", []string{"1.1.1.1, 198.51.100.7", "10.0.0.9"}, "198.51.100.7"},
		{"all trusted", []string{"10.0.0.3, 10.0.0.9"}, "10.0.0.3"},
		{"ports and spaces", []string{"  203.0.113.9:4711 ,10.0.0.9:80"}, "203.0.113.9"},
		{"ipv6", []string{"2001:db8::7"}, "2001:db8::7"},
		{"ipv6 bracketed with port", []string{"[2001:db8::7]:443, [fd00::1]"}, "2001:db8::7"},
		{"ipv4-mapped", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
		{"empty elements", []string{"198.51.100.7,, ,", ""}, "198.51.100.7"},
		{"garbage from a trusted proxy", []string{"198.51.100.7, unknown, 10.0.0.9"}, "10.0.0.9"},
		{"garbage right away", []string{"198.51.100.7, unknown"}, "10.0.0.1"},
		{"a zone", []string{"fe80::1%eth0"}, "10.0.0.1"},
		{"bracketed v4", []string{"[198.51.100.7]"}, "10.0.0.1"},
		{"bad port", []string{"198.51.100.7:99999"}, "10.0.0.1"},
		{"bracket with junk", []string{"[2001:db8::7]x"}, "10.0.0.1"},
	} {
		if got := forwardedClient(trusted, peer, tc.xff); got.String() != tc.want {
			t.Errorf("%s: %v: %s, want %s", tc.name, tc.xff, got, tc.want)
		}
	}
}

// TestClientAddr: the address Middleware found, else the request's peer.
func TestClientAddr(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[::ffff:192.0.2.1]:5000"
	if got := ClientAddr(r); got.String() != "192.0.2.1" {
		t.Errorf("peer: %s", got)
	}
	if got := ClientAddr(withClient(r, netip.MustParseAddr("198.51.100.7"))); got.String() != "198.51.100.7" {
		t.Errorf("forwarded: %s", got)
	}
	r.RemoteAddr = "pipe"
	if got := ClientAddr(r); got.IsValid() {
		t.Errorf("no address: %s", got)
	}
}
