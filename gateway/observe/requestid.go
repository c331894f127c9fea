package observe

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/sluicehq/sluice/contract"
)

// MaxRequestID bounds an X-Request-Id taken from the caller: room for a
// UUID, a W3C trace id or an AWS X-Ray id, not for a payload.
const MaxRequestID = 128

// RequestID returns the caller's X-Request-Id when it is one sane token —
// one value of 1 to MaxRequestID visible ASCII characters — and true, or a
// new random id and false. A malformed id is replaced, not refused: the id
// serves correlation only and decides nothing about the call, so failing a
// call over it would turn a logging concern into an outage for callers
// behind a proxy that stamps ids of its own; and the value goes into
// every log line, so bytes that could forge or break a line never get
// there. The caller sees the replacement in the response.
func RequestID(h http.Header) (string, bool) {
	if vs := h[contract.HeaderRequestID]; len(vs) == 1 && saneToken(vs[0]) {
		return vs[0], true
	}
	return NewRequestID(), false
}

func saneToken(s string) bool {
	if len(s) == 0 || len(s) > MaxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// NewRequestID is 16 random bytes in hex: unique without coordination
// between replicas.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	var s [32]byte
	hex.Encode(s[:], b[:])
	return string(s[:])
}

// MoveUpstreamID moves the provider's own X-Request-Id (OpenAI sends one)
// in a response's header h to X-Sluice-Upstream-Request-Id, so that
// X-Request-Id is the one id of the request at every hop, and the
// provider's — which its support asks for — is still in the response and
// the log. It returns the provider's id and true when it sent one sane
// token; any other value is dropped.
func MoveUpstreamID(h http.Header) (string, bool) {
	vs, ok := h[contract.HeaderRequestID]
	if !ok {
		return "", false
	}
	delete(h, contract.HeaderRequestID)
	if len(vs) == 1 && saneToken(vs[0]) {
		h[contract.HeaderUpstreamRequestID] = vs
		return vs[0], true
	}
	return "", false
}
