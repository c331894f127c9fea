package config

// Header size limits. Go's server refuses an oversized header block itself,
// with a plain-text 431 that no client of the contract can parse; the
// gateway sets the server's cut at twice its own limit (ServerMaxHeaderBytes)
// and answers what lies between with the JSON error. Errors Go's server
// raises before any handler runs (a malformed request line, a missing Host,
// an unsupported HTTP version or transfer encoding, headers past twice the
// limit) stay plain text: the protocol leaves no handler to answer them.
const (
	DefaultMaxHeaderBytes = 64 << 10
	MaxMaxHeaderBytes     = 1 << 20
)
