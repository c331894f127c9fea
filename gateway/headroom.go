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
	h[hdrLimitRequests] = []string{strconv.Itoa(hr.Requests.Limit)}
	h[hdrRemainingRequests] = []string{strconv.Itoa(hr.Requests.Remaining)}
	h[hdrResetRequests] = []string{resetText(hr.Requests.Reset)}
	if hr.TokensKnown {
		h[hdrLimitTokens] = []string{strconv.FormatInt(hr.TokensLimit, 10)}
		h[hdrRemainingTokens] = []string{strconv.FormatInt(hr.TokensRemaining, 10)}
		h[hdrResetTokens] = []string{resetText(hr.TokensReset)}
	}
}

// resetText writes a reset as OpenAI does: a duration such as "1s",
// "6m0s" or "20ms", to the millisecond.
func resetText(d time.Duration) string {
	return max(d, 0).Round(time.Millisecond).String()
}
