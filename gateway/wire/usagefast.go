package wire

// The usage of a JSON answer (and of the one or two SSE events that carry
// one) was read with json.Unmarshal into wireEnvelope: encoding/json's
// reflection over a body whose every other key (the answer's text, its
// choices) is skipped — about 8% of the handler's CPU for a short call.
// readUsage reads the same counts by hand for the common body and leaves
// anything unusual to the decoder, so that the two always agree
// (FuzzReadUsage).

// usageSlot holds one usage object's counts as read: has says which of
// ints (and of the details after them) the object carried, not null.
type usageSlot struct {
	ints   [5]int64 // prompt, completion, input, output, cache read
	pd, id cachedDetails
	has    uint8
}

// merge merges the slot into m as the decoder's wireUsage would be.
func (s *usageSlot) merge(m *UsageMeter) {
	var u wireUsage
	ptr := func(k int) *int64 {
		if s.has&(1<<k) == 0 {
			return nil
		}
		return &s.ints[k]
	}
	u.PromptTokens, u.CompletionTokens, u.InputTokens, u.OutputTokens, u.CacheReadInput = ptr(0), ptr(1), ptr(2), ptr(3), ptr(4)
	if s.has&(1<<keyPromptDetails) != 0 {
		u.PromptTokensDetails = &s.pd
	}
	if s.has&(1<<keyInputDetails) != 0 {
		u.InputTokensDetails = &s.id
	}
	m.merge(&u)
}

// Usage keys, in usageSlot.ints' order; the two details after them.
var usageIntKeys = [...]string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_read_input_tokens"}

const (
	keyPromptDetails = len(usageIntKeys)
	keyInputDetails  = len(usageIntKeys) + 1
)

// readUsage merges into m the usage objects of b as parse would, without
// encoding/json's decoder, for a well-formed JSON object whose members
// sluice reads (top level; usage, message and response; in usage, the
// counts and their details) have plain ASCII keys, each once, no key in
// another case than wireEnvelope's, and values of the expected kinds:
// objects or null; integers within int64 or null. ok is false, with
// nothing merged, for any other body: the caller decodes it, and the
// decoder's view (an error, which keeps nothing; a key matched in another
// case or with escapes; the last of duplicates) is the one that holds.
//
// It checks the syntax of the whole body as it goes (the decoder keeps
// nothing of a body that is not JSON), where json.Valid before it would
// have taken two thirds of the time; what it cannot be sure of it leaves
// to the decoder too (nesting deeper than maxSkipDepth).
func (m *UsageMeter) readUsage(b []byte) (ok bool) {
	r := jsonReader{b: b}
	r.space()
	if !r.is('{') {
		return false // null, and the kinds the decoder refuses
	}
	// The slots in parse's order of merging: usage, message.usage,
	// response.usage.
	var slots [3]usageSlot
	var found [3]bool
	var seen uint8
	for first := true; ; first = false {
		key, more, ok := r.member(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		k := known(key, "usage", "message", "response")
		if k < 0 || k < 3 && seen&(1<<k) != 0 {
			return false
		}
		switch k {
		case 0:
			found[0], ok = r.usage(&slots[0])
		case 1, 2:
			found[k], ok = r.holder(&slots[k])
		default: // another key: its value is checked, not read
			ok = r.skip()
		}
		if !ok {
			return false
		}
		if k < 3 {
			seen |= 1 << k
		}
	}
	if r.i != len(b) {
		return false // bytes after the object
	}
	for i := range slots {
		if found[i] {
			slots[i].merge(m)
		}
	}
	return true
}

// known is the index in names of key; len(names) when key is none of
// them in any case; -1 when key is one of them in another case, which the
// decoder would take for it and readUsage leaves to the decoder.
func known(key []byte, names ...string) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
		if EqualFoldASCII(key, n) {
			return -1
		}
	}
	return len(names)
}

// EqualFoldASCII says whether a and b are equal under ASCII case folding
// (A-Z to a-z, no other byte folded): the gateway's scans of JSON keys,
// which leave any key with other bytes to the decoder.
func EqualFoldASCII[S ~[]byte | ~string](a []byte, b S) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// jsonReader walks a JSON text and checks its syntax as it goes: every
// method that reads says ok false, at the first byte that is not JSON or
// that readUsage leaves to the decoder. Past the end of b it reads 0,
// which is JSON nowhere.
type jsonReader struct {
	b []byte
	i int
}

// c is the byte at r, or 0 past the end.
func (r *jsonReader) c() byte {
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *jsonReader) space() { r.i = skipJSONSpace(r.b, r.i) }

// is says the next byte is c.
func (r *jsonReader) is(c byte) bool { return r.c() == c }

// member reads the next member's key of the object r is in (first: r is
// just past its '{') and steps to its value; more is false at the
// object's end, which it steps past. ok is false where the object is not
// well-formed, and for a key with an escape or a byte outside ASCII,
// which encoding/json could match to a field (it unescapes keys and folds
// Unicode case: "uſage" is "usage" to it).
func (r *jsonReader) member(first bool) (key []byte, more, ok bool) {
	if first {
		r.i++ // past '{'
		r.space()
	}
	if r.is('}') {
		r.i++
		r.space()
		return nil, false, true
	}
	if !first {
		if !r.is(',') {
			return nil, false, false
		}
		r.i++
		r.space()
	}
	if !r.is('"') {
		return nil, false, false
	}
	s := r.i + 1
	e := s
	for ; e < len(r.b) && r.b[e] != '"'; e++ {
		if c := r.b[e]; c < 0x20 || c == '\\' || c >= 0x80 {
			return nil, false, false
		}
	}
	r.i = e + 1
	r.space()
	if !r.is(':') {
		return nil, false, false
	}
	r.i++
	r.space()
	return r.b[s:e], true, true
}

// null steps past a null at r, if there is one.
func (r *jsonReader) null() bool {
	if len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "null" {
		r.i += 4
		r.space()
		return true
	}
	return false
}

// maxSkipDepth bounds the nesting skip follows; deeper values are left
// to the decoder (whose own bound is 10,000).
const maxSkipDepth = 64

// skip steps past any value, checking its syntax.
func (r *jsonReader) skip() bool {
	var inObject uint64 // a bit per open container: 1 an object, 0 an array
	depth := 0
	for {
		// A value.
		switch c := r.c(); {
		case c == '{' || c == '[':
			if depth == maxSkipDepth {
				return false
			}
			r.i++
			r.space()
			if c == '{' {
				inObject |= 1 << depth
			} else {
				inObject &^= 1 << depth
			}
			depth++
			if r.is(c + 2) { // '}' or ']': empty
				r.i++
				depth--
				break
			}
			if c == '{' && !r.key() {
				return false
			}
			continue
		case c == '"':
			if !r.string() {
				return false
			}
		case c == 't':
			if !r.literal("true") {
				return false
			}
		case c == 'f':
			if !r.literal("false") {
				return false
			}
		case c == 'n':
			if !r.literal("null") {
				return false
			}
		case c == '-' || '0' <= c && c <= '9':
			if !r.number() {
				return false
			}
		default:
			return false
		}
		// After a value: the container's next member, or its end.
		for {
			r.space()
			if depth == 0 {
				return true
			}
			obj := inObject&(1<<(depth-1)) != 0
			c := r.c()
			if obj && c == '}' || !obj && c == ']' {
				r.i++
				depth--
				continue
			}
			if c != ',' {
				return false
			}
			r.i++
			r.space()
			if obj && !r.key() {
				return false
			}
			break
		}
	}
}

// key steps past an object's key and its ':' to the value.
func (r *jsonReader) key() bool {
	if !r.is('"') || !r.string() {
		return false
	}
	r.space()
	if !r.is(':') {
		return false
	}
	r.i++
	r.space()
	return true
}

// string steps past the string at r: no control character, every escape
// one of JSON's. Other bytes are taken as they are, valid UTF-8 or not,
// as the decoder takes them.
func (r *jsonReader) string() bool {
	b := r.b
	for i := r.i + 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			r.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(b) {
				return false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 {
					return false
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				i += 4
			default:
				return false
			}
		}
	}
	return false
}

func (r *jsonReader) literal(lit string) bool {
	if len(r.b)-r.i < len(lit) || string(r.b[r.i:r.i+len(lit)]) != lit {
		return false
	}
	r.i += len(lit)
	return true
}

// number steps past a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *jsonReader) number() bool {
	if r.is('-') {
		r.i++
	}
	if r.is('0') {
		r.i++
	} else if !r.digits() {
		return false
	}
	if r.is('.') {
		r.i++
		if !r.digits() {
			return false
		}
	}
	if r.is('e') || r.is('E') {
		r.i++
		if r.is('+') || r.is('-') {
			r.i++
		}
		if !r.digits() {
			return false
		}
	}
	return true
}

// digits steps past one digit or more.
func (r *jsonReader) digits() bool {
	s := r.i
	for '0' <= r.c() && r.c() <= '9' {
		r.i++
	}
	return r.i > s
}

// holder reads message's or response's value: null, or an object whose
// one key read is usage.
func (r *jsonReader) holder(slot *usageSlot) (found, ok bool) {
	_, ok = r.object("usage", func() (ok bool) {
		found, ok = r.usage(slot)
		return ok
	})
	return found && ok, ok
}

// object reads null (present false) or an object in which value reads
// name's value — once: a second name is left to the decoder, as is the
// name in another case — and every other key's is skipped.
func (r *jsonReader) object(name string, value func() bool) (present, ok bool) {
	if r.null() {
		return false, true
	}
	if !r.is('{') {
		return false, false
	}
	seen := false
	for first := true; ; first = false {
		key, more, ok := r.member(first)
		if !ok {
			return false, false
		}
		if !more {
			return true, true
		}
		switch known(key, name) {
		case -1:
			return false, false
		case 0:
			if seen {
				return false, false
			}
			seen = true
			ok = value()
		default:
			ok = r.skip()
		}
		if !ok {
			return false, false
		}
	}
}

// usage reads a usage object, or null, into slot.
func (r *jsonReader) usage(slot *usageSlot) (found, ok bool) {
	if r.null() {
		return false, true
	}
	if !r.is('{') {
		return false, false
	}
	var seen uint8
	for first := true; ; first = false {
		key, more, ok := r.member(first)
		if !ok {
			return false, false
		}
		if !more {
			return true, true
		}
		k := known(key, usageIntKeys[0], usageIntKeys[1], usageIntKeys[2], usageIntKeys[3], usageIntKeys[4],
			"prompt_tokens_details", "input_tokens_details")
		if k < 0 || k <= keyInputDetails && seen&(1<<k) != 0 {
			return false, false
		}
		seen |= 1 << k // the bit of another key (8) is not kept
		var has bool
		switch k {
		case keyPromptDetails:
			has, ok = r.details(&slot.pd)
		case keyInputDetails:
			has, ok = r.details(&slot.id)
		case keyInputDetails + 1: // another key
			ok = r.skip()
		default:
			if has = !r.null(); has {
				slot.ints[k], ok = r.int64()
			}
		}
		if !ok {
			return false, false
		}
		if has {
			slot.has |= 1 << k
		}
	}
}

// details reads prompt_tokens_details or input_tokens_details into d:
// null (has false), or an object whose one key read is cached_tokens
// (null leaves it 0, as the decoder does).
func (r *jsonReader) details(d *cachedDetails) (has, ok bool) {
	return r.object("cached_tokens", func() bool {
		if r.null() {
			return true
		}
		var ok bool
		d.CachedTokens, ok = r.int64()
		return ok
	})
}

// int64 reads an integer that fits an int64; ok is false for anything
// else (a fraction, an exponent, an overflow, another kind), which the
// decoder refuses, and for what is not a number.
func (r *jsonReader) int64() (n int64, ok bool) {
	b := r.b
	i := r.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var v uint64
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		d := uint64(b[i] - '0')
		if v > (1<<63)/10 || v*10 > 1<<63-d {
			return 0, false
		}
		v = v*10 + d
		i++
	}
	switch {
	case i == start, b[start] == '0' && i > start+1: // no digit; a leading 0
		return 0, false
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, false
	case !neg && v > 1<<63-1:
		return 0, false
	}
	r.i = i
	r.space()
	if neg {
		return -int64(v), true // -(1<<63) wraps to itself: MinInt64
	}
	return int64(v), true
}
