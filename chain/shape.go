package chain

import "math/bits"

// Shape is what the gate knows of a call before it runs, folded into the
// key of its service-time statistics (admission.Request.Shape): who sends
// it — its tenant, and with no tenants the key it presents, hashed
// (Request.Caller) — the model as its deployment names it, the endpoint,
// and the sizes of its prompt and of its max_tokens, each by a power: the
// prompt's by fours (under 4 tokens, under 16, …, under 16,384, …) and
// max_tokens by twos. Calls of one shape take alike: one service's chats
// with one another, its completions with one another, a prompt of 50,000
// tokens apart from one of 500. Sizes go by powers so that a shape keeps
// enough calls to learn from — a window per exact size would never fill
// — and a call's bucket says what a provider's time depends on: a decode
// of up to max_tokens after a prefill of the prompt.
//
// The shape is a 64-bit FNV-1a hash of these, never zero (zero means no
// shape to the gate); nothing of the key is kept but its hash, itself
// hashed again here. Its family (Family) is the same without the sizes:
// the gate estimates a shape by its family's statistics until it has
// enough of its own.
func (r *Request) Shape() uint64 {
	shape, _ := r.shapes()
	return shape
}

// Family is the hash of the call's shape without its sizes: who sends
// it, to which model, on which endpoint.
func (r *Request) Family() uint64 {
	_, family := r.shapes()
	return family
}

// shapes is Shape and Family, hashing the call's names once.
func (r *Request) shapes() (shape, family uint64) {
	h := uint64(fnvOffset)
	h = fnvString(h, r.Tenant)
	h = fnvUint(h, r.Caller)
	h = fnvString(h, r.gateKey())
	h = fnvString(h, r.Endpoint)
	sizes := uint64(bits.Len64(uint64(max(r.InputTokens, 0)))+1)/2<<8 | uint64(bits.Len64(uint64(max(r.MaxOutputTokens, 0))))
	return nonZero(fnvUint(h, sizes)), nonZero(fnvUint(h, 1<<16))
}

func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	// A separator, so that ("ab", "c") and ("a", "bc") differ.
	h ^= 0xff
	h *= fnvPrime
	return h
}

// fnvUint folds v into h as one 64-bit word: FNV's xor-multiply, then
// the high half folded down, so that v's high bits reach the low ones a
// map hashes by. (Byte by byte, as FNV proper, costs eight multiplies a
// word on every admission.)
func fnvUint(h, v uint64) uint64 {
	h ^= v
	h *= fnvPrime
	return h ^ h>>32
}
