package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/chain"
)

// Headroom headers: every proxied answer, and every refusal by admission,
// tells the tenant its room in the names OpenAI's answers use, so that a
// client library or framework that paces itself on them paces itself on
// sluice's policy — its share of the slots and of the waiting room, and
// its pool's tokens per minute — rather than learning its limit from a
// refusal (chain.Headroom, admission.Core.Headroom; docs/gateway.md).
// The provider's own rate-limit headers describe the provider key that
// every tenant shares: they are read by the gateway (wire.ProviderLimits)
// and not passed on.
var (
	hdrLimitRequests     = http.CanonicalHeaderKey("x-ratelimit-limit-requests")
	hdrRemainingRequests = http.CanonicalHeaderKey("x-ratelimit-remaining-requests")
	hdrResetRequests     = http.CanonicalHeaderKey("x-ratelimit-reset-requests")
	hdrLimitTokens       = http.CanonicalHeaderKey("x-ratelimit-limit-tokens")
	hdrRemainingTokens   = http.CanonicalHeaderKey("x-ratelimit-remaining-tokens")
	hdrResetTokens       = http.CanonicalHeaderKey("x-ratelimit-reset-tokens")
)

// stampHeadroom puts req's tenant's headroom on h, for calls like req with
// budget to their deadline, at req's pool when routed (an admitted call)
// or its model's first pool (a refusal); and drops the provider's own
// rate-limit headers.
func (g *Gateway) stampHeadroom(h http.Header, req *chain.Request, budget time.Duration, routed bool) {
	for k := range h {
		if strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "Anthropic-Ratelimit-") {
			delete(h, k)
		}
	}
	hr, err := g.chain.Headroom(*req, budget, routed)
	if err != nil { // the request was admitted or judged already: cannot happen
		return
	}
	// One backing array for the values: an allocation, not six.
	n := 3
	if hr.TokensKnown {
		n = 6
	}
	v := make([]string, n)
	v[0], v[1], v[2] = strconv.Itoa(hr.Requests.Limit), strconv.Itoa(hr.Requests.Remaining), resetText(hr.Requests.Reset)
	h[hdrLimitRequests], h[hdrRemainingRequests], h[hdrResetRequests] = v[0:1:1], v[1:2:2], v[2:3:3]
	if hr.TokensKnown {
		v[3], v[4], v[5] = strconv.FormatInt(hr.TokensLimit, 10), strconv.FormatInt(hr.TokensRemaining, 10), resetText(hr.TokensReset)
		h[hdrLimitTokens], h[hdrRemainingTokens], h[hdrResetTokens] = v[3:4:4], v[4:5:5], v[5:6:6]
	}
}

// resetText writes a reset as OpenAI does: a duration such as "1s",
// "6m0s" or "20ms", to the millisecond.
func resetText(d time.Duration) string {
	return max(d, 0).Round(time.Millisecond).String()
}
