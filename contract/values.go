package contract

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// RetryAfterSeconds is d as the Retry-After header's value: whole seconds,
// rounded up, at least 1 — the header has no fractions, and a zero would
// invite the immediate retry it exists to prevent.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// RetryAfterMs is d as retry-after-ms (HeaderRetryAfterMs) and the other
// millisecond fields of the contract: whole milliseconds, rounded up, at
// least 1.
func RetryAfterMs(d time.Duration) int64 {
	return max(1, int64(math.Ceil(float64(d)/float64(time.Millisecond))))
}

// MaxEcho bounds how much of a caller's value (a header, a key, an id) an
// error message repeats: enough to recognise it, not enough to turn a
// refusal into an amplifier or a log flood.
const MaxEcho = 64

// Echo quotes v for an error message, cut at MaxEcho bytes (on a rune
// boundary) with an ellipsis and its full length when longer.
func Echo(v string) string {
	if len(v) <= MaxEcho {
		return strconv.Quote(v)
	}
	cut := MaxEcho
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(v[:cut]), len(v))
}
