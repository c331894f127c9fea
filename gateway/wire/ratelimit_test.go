package wire

import (
	"net/http"
	"testing"
	"time"
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
