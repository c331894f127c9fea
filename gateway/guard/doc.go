// Package guard is the gateway's connection guard: what a client
// connection may hold of the API listener, in time and in file
// descriptors, before the gateway has seen a valid request on it.
//
// # Model
//
// Config is the YAML `server:` section; Config.Limits resolves it to
// Limits, its defaults filled in and the connection cap derived from the
// process's file-descriptor limit. Three pieces apply them to an
// http.Server:
//
//   - NewListener wraps the API listener. It refuses, in Accept itself,
//     a connection beyond max_connections (a canned 503) or beyond
//     max_unauthenticated_per_ip for its client address (a canned 429),
//     before net/http spends a goroutine on it, and answers it only once
//     its request has arrived, never before (listener.go, answerLater);
//     with no tenant keys (Limits.Anonymous) every request is identified
//     and no connection counts as unauthenticated. At max_connections, a
//     newcomer takes the place of the oldest connection still reading its
//     first request of the address holding the most such, when that is
//     another address holding more than max_unauthenticated_per_ip
//     (pending.go): with or without keys, one address cannot crowd out the
//     rest, and a client that sends whole requests is never the one
//     closed. It backs off when accept
//     fails for want of descriptors; and it gives every write to a client
//     a fresh deadline, the write-stall timeout.
//   - ConnContext, the http.Server's ConnContext, hands each admitted
//     connection to the handler.
//   - Middleware sets a request body's read deadline, and counts the
//     connection as authenticated, out of its address's cap, once it has
//     sent a request the caller identifies (a valid tenant key) and that
//     request's whole body.
//
// The client address is the connection's peer, unless the peer is one of
// the trusted proxies (trusted_proxies; client.go): then it is the client
// the proxy names, by a PROXY protocol header at the start of the
// connection (proxyproto.go, read on the connection's goroutine before any
// request) or by each request's X-Forwarded-For, and the cap counts that
// client — the connection from the header on, or each request from its
// headers until it is authenticated or over. ClientAddr gives it to the
// access log and the traces.
//
// Every refusal is logged, summed per reason and client address each
// second (refusals.go), since no request line will ever name it.
//
// The refusals are in the contract's shape (Retry-After, retry-after-ms,
// X-Sluice-Reason, an OpenAI-style error body), so a client handles them
// as it handles the gateway's own 429 and 503.
//
// # Goals
//
// A client that sends its body a byte at a time, or goes quiet after any
// answer, must not keep a goroutine and a file descriptor for ever, nor
// be able to open enough of them to make accept fail for everyone else;
// while a stream that legitimately runs for minutes is never cut, and a
// client that has shown a valid key is never counted against its
// address.
//
// # Non-goals
//
// Forwarded and X-Real-IP, and any word on the client from a peer not
// listed. Rate limits on requests, and who a tenant is: the gateway admits
// requests and identifies keys; the guard only asks it whether a request
// was identified. Header size limits stay with the gateway too, whose
// error writer answers them.
package guard
