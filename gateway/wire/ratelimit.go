package wire

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// remainingHeaders are the providers' counts of what is left of a rate
// limit: OpenAI's x-ratelimit-remaining-*, and Anthropic's
// anthropic-ratelimit-*-remaining (tokens, and input and output tokens
// apart). tokens says the count is of tokens.
var remainingHeaders = []struct {
	name   string
	tokens bool
}{
	{"x-ratelimit-remaining-requests", false}, {"x-ratelimit-remaining-tokens", true},
	{"anthropic-ratelimit-requests-remaining", false}, {"anthropic-ratelimit-tokens-remaining", true},
	{"anthropic-ratelimit-input-tokens-remaining", true}, {"anthropic-ratelimit-output-tokens-remaining", true},
}

// Exhausted reports that the provider's next call like this one will be
// refused: a remaining-requests or -tokens header at zero, or remaining
// tokens fewer than this call was charged (charge, when not nil and
// positive: its estimated prompt plus its max_tokens, which is what the
// providers charge a call on arrival). The gate then slows down before the
// 429 rather than after it. charge is called at most once, and only for a
// positive remaining-tokens count.
func Exhausted(h http.Header, charge func() int64) bool {
	need := int64(-1) // not computed yet
	for _, r := range remainingHeaders {
		v := h.Get(r.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		if n <= 0 {
			return true
		}
		if r.tokens && charge != nil {
			if need < 0 {
				need = charge()
			}
			if n < need {
				return true
			}
		}
	}
	return false
}

// RetryAfter reads the provider's retry-after-ms, else Retry-After
// (seconds or an HTTP date). A malformed or negative value is ignored, not
// trusted: the fallback is used.
func RetryAfter(h http.Header, fallback time.Duration) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 && s < 1e6 {
			return time.Duration(s) * time.Second
		}
		if t, err := http.ParseTime(v); err == nil {
			if d := time.Until(t); d > 0 {
				return d
			}
			return 0
		}
	}
	return fallback
}
