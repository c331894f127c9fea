package mockllm

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// This file enforces a model's requests-per-minute and tokens-per-minute
// limits the way OpenAI and Anthropic do, and reports them in their
// headers. The limiter is a pure function of the time it is given, so that
// tests drive it without sleeping.

// bucket is one per-minute limit as the providers implement it: a token
// bucket of capacity limit that refills continuously at limit per minute
// (it is not a fixed window that resets on the minute).
type bucket struct {
	limit int
	avail float64
	at    time.Time // when avail was last brought up to date; zero: full
}

// fill brings the bucket up to now.
func (b *bucket) fill(now time.Time) {
	if b.at.IsZero() {
		b.avail, b.at = float64(b.limit), now
		return
	}
	if el := now.Sub(b.at); el > 0 {
		b.avail = min(float64(b.limit), b.avail+float64(b.limit)*el.Seconds()/60)
		b.at = now
	}
}

// until is how long from the bucket's last fill until it holds n.
func (b *bucket) until(n float64) time.Duration {
	if b.avail >= n {
		return 0
	}
	return time.Duration(math.Ceil((n - b.avail) * 60 / float64(b.limit) * float64(time.Second)))
}

// limitState is one limit as the headers report it.
type limitState struct {
	limit     int
	remaining int
	reset     time.Duration // until the bucket is full again
}

func (b *bucket) state() limitState {
	return limitState{limit: b.limit, remaining: int(b.avail), reset: b.until(float64(b.limit))}
}

// modelLimiter holds one model's limits; a nil bucket is no limit.
type modelLimiter struct {
	requests, tokens *bucket
}

func newModelLimiter(spec ModelSpec) *modelLimiter {
	l := &modelLimiter{}
	if spec.RPM > 0 {
		l.requests = &bucket{limit: spec.RPM}
	}
	if spec.TPM > 0 {
		l.tokens = &bucket{limit: spec.TPM}
	}
	return l
}

// verdict is the limiter's answer to one request.
type verdict struct {
	ok         bool
	tooLarge   bool          // the request alone exceeds the token limit
	retryAfter time.Duration // when refused: until both limits would let it in
	requests   *limitState   // nil when the model has no such limit
	tokens     *limitState
}

// take charges one request of tokens at now if both limits allow it, and
// reports the state after the charge (or, when refused, without it).
// Nothing is charged when the request is refused.
func (l *modelLimiter) take(now time.Time, tokens int) verdict {
	var v verdict
	var wait time.Duration
	if b := l.requests; b != nil {
		b.fill(now)
		wait = max(wait, b.until(1))
	}
	if b := l.tokens; b != nil {
		b.fill(now)
		if tokens > b.limit {
			v.tooLarge = true
			wait = time.Minute
		} else {
			wait = max(wait, b.until(float64(tokens)))
		}
	}
	v.ok = wait == 0 && !v.tooLarge
	if v.ok {
		if b := l.requests; b != nil {
			b.avail--
		}
		if b := l.tokens; b != nil {
			b.avail -= float64(tokens)
		}
	}
	v.retryAfter = wait
	if b := l.requests; b != nil {
		st := b.state()
		v.requests = &st
	}
	if b := l.tokens; b != nil {
		st := b.state()
		v.tokens = &st
	}
	return v
}

// limited reports whether the model has any limit.
func (l *modelLimiter) limited() bool { return l.requests != nil || l.tokens != nil }

// checkRateLimit charges c against its model's limits. It returns the
// verdict, or ok with no states when the model has no limits.
func (s *Server) checkRateLimit(c *call, now time.Time) verdict {
	if c.spec.RPM == 0 && c.spec.TPM == 0 {
		return verdict{ok: true}
	}
	// One limiter per row of the table: models the table does not list
	// share the default row's, so that callers inventing model names
	// cannot grow the map.
	key := c.model
	if _, listed := s.models[key]; !listed {
		key = DefaultModelKey
	}
	s.limMu.Lock()
	defer s.limMu.Unlock()
	l, ok := s.limiters[key]
	if !ok {
		l = newModelLimiter(c.spec)
		s.limiters[key] = l
	}
	return l.take(now, c.tokensIn+c.tokensOut)
}

// setLimitHeaders writes the verdict's limits in the dialect's headers:
// OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the reset
// as a duration ("1s", "6m0s"), or Anthropic's
// anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}, the reset as
// an RFC 3339 time.
func setLimitHeaders(h http.Header, d dialect, v verdict, now time.Time) {
	for _, l := range []struct {
		kind string
		st   *limitState
	}{{"requests", v.requests}, {"tokens", v.tokens}} {
		if l.st == nil {
			continue
		}
		if d == anthropic {
			p := "anthropic-ratelimit-" + l.kind + "-"
			h.Set(p+"limit", strconv.Itoa(l.st.limit))
			h.Set(p+"remaining", strconv.Itoa(l.st.remaining))
			h.Set(p+"reset", now.Add(l.st.reset).UTC().Format(time.RFC3339))
			continue
		}
		h.Set("x-ratelimit-limit-"+l.kind, strconv.Itoa(l.st.limit))
		h.Set("x-ratelimit-remaining-"+l.kind, strconv.Itoa(l.st.remaining))
		h.Set("x-ratelimit-reset-"+l.kind, resetText(l.st.reset))
	}
}

// resetText formats a reset the way OpenAI does: a Go-style duration, to
// the millisecond.
func resetText(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// rateLimitMessage is the 429's message, in the providers' words.
func rateLimitMessage(c *call, v verdict) string {
	if v.tooLarge {
		return fmt.Sprintf("Request too large for %s: %d tokens (prompt + max tokens) exceed the limit of %d tokens per minute.",
			c.model, c.tokensIn+c.tokensOut, v.tokens.limit)
	}
	return fmt.Sprintf("Rate limit reached for %s (mock provider limits: %s).", c.model, limitsText(c.spec))
}

func limitsText(m ModelSpec) string {
	switch {
	case m.RPM > 0 && m.TPM > 0:
		return fmt.Sprintf("%d requests and %d tokens per minute", m.RPM, m.TPM)
	case m.RPM > 0:
		return fmt.Sprintf("%d requests per minute", m.RPM)
	default:
		return fmt.Sprintf("%d tokens per minute", m.TPM)
	}
}
