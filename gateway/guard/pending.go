package guard

import "net/netip"

// Connections still reading their first request, by client address.
//
// A connection that has not yet sent a whole request is not yet a client:
// it holds a descriptor and a goroutine and has asked nothing. With tenant
// keys such connections are capped per address at accept
// (max_unauthenticated_per_ip). With none the cap does not apply — a busy
// application server opens connections faster than their first requests
// are read, and is not to be taken for an attacker — so one address
// sending bodies a byte at a time could hold every connection the gateway
// may open, and every other client's calls would be refused
// max_connections until the read timeouts freed them.
//
// So every connection is pending from its accept (or, under a trusted
// proxy's PROXY header, from the header) until it has sent a request and
// that request's whole body (Middleware calls authenticate), in either
// mode. At max_connections a newcomer from another address does not get
// the 503 when one address holds more pending connections than
// max_unauthenticated_per_ip: that address's oldest pending connection is
// closed in its place. A connection that has sent a whole request is never
// pending again, so a client that sends whole requests — however many
// connections it opens — is never the one closed; and an address within
// max_unauthenticated_per_ip never is either, with or without keys.

// connList is one address's pending connections, oldest first.
type connList struct {
	head, tail *trackedConn
	n          int
}

// pendLocked adds c, pending, to its address's list. l.mu is held.
func (l *listener) pendLocked(c *trackedConn) {
	ls := l.mu.pending[c.ip]
	if ls == nil {
		ls = &connList{}
		l.mu.pending[c.ip] = ls
	}
	c.pendPrev, c.pendNext = ls.tail, nil
	if ls.tail != nil {
		ls.tail.pendNext = c
	} else {
		ls.head = c
	}
	ls.tail = c
	ls.n++
	c.pending = true
}

// unpendLocked takes c out of its address's list, if it is in it. l.mu
// is held.
func (l *listener) unpendLocked(c *trackedConn) {
	if !c.pending {
		return
	}
	c.pending = false
	ls := l.mu.pending[c.ip]
	if c.pendPrev != nil {
		c.pendPrev.pendNext = c.pendNext
	} else {
		ls.head = c.pendNext
	}
	if c.pendNext != nil {
		c.pendNext.pendPrev = c.pendPrev
	} else {
		ls.tail = c.pendPrev
	}
	c.pendPrev, c.pendNext = nil, nil
	if ls.n--; ls.n == 0 {
		delete(l.mu.pending, c.ip)
	}
}

// evictableLocked is the connection to close so that a newcomer from ip
// may be served at max_connections: the oldest pending connection of the
// address with the most of them, when that is another address than ip and
// it holds more than max_unauthenticated_per_ip; nil otherwise. It scans
// the addresses with pending connections, which only a gateway at its
// connection cap does. l.mu is held.
func (l *listener) evictableLocked(ip netip.Addr) *trackedConn {
	var worst *connList
	var worstIP netip.Addr
	for a, ls := range l.mu.pending {
		if worst == nil || ls.n > worst.n {
			worst, worstIP = ls, a
		}
	}
	if worst == nil || worstIP == ip || worst.n <= l.maxUnauthPerIP {
		return nil
	}
	return worst.head
}
