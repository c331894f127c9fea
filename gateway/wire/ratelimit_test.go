package wire

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chain"
)

func TestExhausted(t *testing.T) {
	if !Exhausted(http.Header{"X-Ratelimit-Remaining-Requests": {"0"}}, nil) || Exhausted(http.Header{"X-Ratelimit-Remaining-Tokens": {"12"}}, nil) {
		t.Fatal("x-ratelimit-remaining-* misread")
	}
	charge := func(n int64) func() int64 { return func() int64 { return n } }
	for _, tc := range []struct {
		h      http.Header
		charge int64
		want   bool
	}{
		{http.Header{"Anthropic-Ratelimit-Requests-Remaining": {"0"}}, 0, true},
		{http.Header{"Anthropic-Ratelimit-Output-Tokens-Remaining": {"0"}}, 0, true},
		{http.Header{"X-Ratelimit-Remaining-Tokens": {"12"}}, 13, true}, // the next such call does not fit
		{http.Header{"X-Ratelimit-Remaining-Tokens": {"13"}}, 13, false},
		{http.Header{"Anthropic-Ratelimit-Tokens-Remaining": {"12"}}, 13, true},
		{http.Header{"X-Ratelimit-Remaining-Requests": {"5"}}, 100, false}, // requests are not tokens
		{http.Header{"X-Ratelimit-Remaining-Tokens": {"junk"}}, 100, false},
	} {
		if got := Exhausted(tc.h, charge(tc.charge)); got != tc.want {
			t.Errorf("Exhausted(%v, charge %d) = %v, want %v", tc.h, tc.charge, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	if got := RetryAfter(http.Header{"Retry-After": {"7"}}, time.Second); got != 7*time.Second {
		t.Fatalf("Retry-After 7 read as %v", got)
	}
	if got := RetryAfter(http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"7"}}, time.Second); got != 250*time.Millisecond {
		t.Fatalf("retry-after-ms read as %v", got)
	}
	if got := RetryAfter(http.Header{"Retry-After": {"-3"}}, time.Second); got != time.Second {
		t.Fatalf("negative Retry-After read as %v", got)
	}
}

// TestProviderLimits: OpenAI's headers, else Anthropic's; an absent or
// malformed count is not known; and reading them allocates nothing (they
// are read on every answer).
func TestProviderLimits(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "499")
	h.Set("anthropic-ratelimit-tokens-limit", "80000")
	h.Set("anthropic-ratelimit-tokens-remaining", "79000")
	req, tok := ProviderLimits(h)
	if req != (chain.Limits{Limit: 500, Remaining: 499, Known: true}) || tok != (chain.Limits{Limit: 80000, Remaining: 79000, Known: true}) {
		t.Fatalf("requests %+v, tokens %+v", req, tok)
	}
	h.Set("x-ratelimit-remaining-requests", "-1")
	h.Set("anthropic-ratelimit-tokens-remaining", "lots")
	if req, tok := ProviderLimits(h); req.Known || tok.Known {
		t.Fatalf("malformed counts read as %+v, %+v", req, tok)
	}
	if req, tok := ProviderLimits(http.Header{}); req.Known || tok.Known {
		t.Fatalf("no headers read as %+v, %+v", req, tok)
	}
	h = http.Header{"Content-Type": {"application/json"}}
	if n := testing.AllocsPerRun(100, func() {
		ProviderLimits(h)
		Exhausted(h, nil)
	}); n != 0 {
		t.Fatalf("%v allocations to read an answer without rate-limit headers", n)
	}
}
