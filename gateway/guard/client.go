package guard

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// The client address. Without trusted proxies it is the connection's
// peer, and nothing a client sends changes it. With them (a load balancer
// or an ingress in front), a trusted peer's connection says who the
// client is in one of two ways, and only a trusted peer's is read:
//
//   - A PROXY protocol header (proxyproto.go) at the start of the
//     connection, from a proxy that relays TCP: its source is the
//     connection's client, known before any request, and the connection
//     counts under it from then on, as a direct one counts under its peer.
//     A trusted peer that sends no header is taken as itself (below): one
//     list serves both kinds of proxy, and a proxy that speaks HTTP has
//     no header to send.
//   - X-Forwarded-For on each request, from a proxy that speaks HTTP: the
//     right-most address that is not itself a trusted proxy, since every
//     proxy appends the address it saw and only the trusted ones' entries
//     are known to be true. Such a connection counts under no address:
//     the proxy reuses it for request after request of different clients,
//     so each request counts under its own client instead, from its
//     headers until it has sent a valid key and its whole body, or ended
//     (Middleware).
//
// Forwarded (RFC 7239) and X-Real-IP are not read, from anyone: the
// proxies in front of gateways set X-Forwarded-For, and reading several
// headers that may disagree would let whichever is not overwritten win.

// parseTrustedProxies parses server.trusted_proxies, naming the entry at
// fault. A CIDR block with bits set past its length, an address with a
// zone and an IPv4-mapped IPv6 block are refused rather than guessed at.
func parseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range list {
		p, err := parseTrustedProxy(s)
		if err != nil {
			return nil, fmt.Errorf("config: server.trusted_proxies[%d]: %q: %v", i, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseTrustedProxy(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("want an IP address or a CIDR block (10.0.0.0/8)")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("want an IP address or a CIDR block (10.0.0.0/8)")
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("an IPv4-mapped IPv6 block; write it as IPv4")
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("bits set past the prefix length; did you mean %s?", m)
	}
	return p, nil
}

// trusts says a is one of the trusted proxies.
func trusts(trusted []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient is the client of a request that came from peer, a
// trusted proxy, with xff as its X-Forwarded-For header lines: walking
// the addresses from the right, the first one that is not a trusted proxy.
// When every address is a trusted proxy's (or there are none), it is the
// left-most of them, the farthest the trusted chain saw; when an entry is
// not an address, the one to its right, the trusted proxy that wrote it.
// The lines are one list, in order; empty elements are skipped, and an
// entry may carry a port (1.2.3.4:5, [::1]:5).
func forwardedClient(trusted []netip.Prefix, peer netip.Addr, xff []string) netip.Addr {
	client := peer
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			var e string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				v, e = v[:j], v[j+1:]
			} else {
				v, e = "", v
			}
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			a, ok := parseForwardedAddr(e)
			if !ok {
				return client
			}
			client = a
			if !trusts(trusted, a) {
				return a
			}
		}
	}
	return client
}

// parseForwardedAddr parses one X-Forwarded-For entry: an IPv4 or IPv6
// address, with a port or not, IPv6 in brackets or not. A zone is refused.
func parseForwardedAddr(e string) (netip.Addr, bool) {
	var a netip.Addr
	var err error
	switch {
	case strings.HasPrefix(e, "["):
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := e[end+1:]; rest != "" {
			port, ok := strings.CutPrefix(rest, ":")
			if _, err := parsePort(port); !ok || err != nil {
				return netip.Addr{}, false
			}
		}
		a, err = netip.ParseAddr(e[1:end])
		if err == nil && !a.Is6() {
			return netip.Addr{}, false
		}
	case strings.Count(e, ":") == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(e)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(e)
	}
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

type clientKey struct{}

// withClient returns r carrying its client address for ClientAddr.
func withClient(r *http.Request, a netip.Addr) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), clientKey{}, a))
}

// ClientAddr is the address of the client that sent r, as the access log
// and the traces show it and as max_unauthenticated_per_ip counts it:
// behind a trusted proxy, the client the proxy speaks for (its PROXY
// header's source, or the request's X-Forwarded-For as Middleware read
// it); otherwise the connection's peer. The zero Addr when r.RemoteAddr is
// not an address (a request made up in a test).
func ClientAddr(r *http.Request) netip.Addr {
	if a, ok := r.Context().Value(clientKey{}).(netip.Addr); ok {
		return a
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a.Unmap()
}
