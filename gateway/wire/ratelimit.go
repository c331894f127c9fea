package wire

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/chain"
)

// The providers' rate-limit headers, as net/http keys them: read with
// header, which neither canonicalises a name (an allocation for every
// lower-case one) nor parses an absent value (an error's allocation), so
// that reading them on every answer costs nothing.
var (
	limitRequests         = http.CanonicalHeaderKey("x-ratelimit-limit-requests")
	remainingRequests     = http.CanonicalHeaderKey("x-ratelimit-remaining-requests")
	limitTokens           = http.CanonicalHeaderKey("x-ratelimit-limit-tokens")
	remainingTokens       = http.CanonicalHeaderKey("x-ratelimit-remaining-tokens")
	anthropicReqLimit     = http.CanonicalHeaderKey("anthropic-ratelimit-requests-limit")
	anthropicReqRemaining = http.CanonicalHeaderKey("anthropic-ratelimit-requests-remaining")
	anthropicTokLimit     = http.CanonicalHeaderKey("anthropic-ratelimit-tokens-limit")
	anthropicTokRemaining = http.CanonicalHeaderKey("anthropic-ratelimit-tokens-remaining")
)

// header is h's first value for key, a canonical key.
func header(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// count parses a non-negative count; false when absent or malformed.
func count(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n >= 0
}

// ProviderLimits reads a provider's rate-limit headers: OpenAI's
// x-ratelimit-{limit,remaining}-{requests,tokens}, else Anthropic's
// anthropic-ratelimit-{requests,tokens}-{limit,remaining}. A count that is
// absent or malformed is not Known.
func ProviderLimits(h http.Header) (requests, tokens chain.Limits) {
	read := func(limit, remaining string) chain.Limits {
		var l chain.Limits
		r, ok := count(header(h, remaining))
		if !ok {
			return l
		}
		l.Remaining, l.Known = r, true
		if n, ok := count(header(h, limit)); ok && n > 0 {
			l.Limit = n
		}
		return l
	}
	requests = read(limitRequests, remainingRequests)
	if !requests.Known {
		requests = read(anthropicReqLimit, anthropicReqRemaining)
	}
	tokens = read(limitTokens, remainingTokens)
	if !tokens.Known {
		tokens = read(anthropicTokLimit, anthropicTokRemaining)
	}
	return requests, tokens
}

// remainingHeaders are the providers' counts of what is left of a rate
// limit: OpenAI's x-ratelimit-remaining-*, and Anthropic's
// anthropic-ratelimit-*-remaining (tokens, and input and output tokens
// apart). tokens says the count is of tokens.
var remainingHeaders = []struct {
	name   string
	tokens bool
}{
	{remainingRequests, false}, {remainingTokens, true},
	{anthropicReqRemaining, false}, {anthropicTokRemaining, true},
	{http.CanonicalHeaderKey("anthropic-ratelimit-input-tokens-remaining"), true},
	{http.CanonicalHeaderKey("anthropic-ratelimit-output-tokens-remaining"), true},
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
		v := header(h, r.name)
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
