package client

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/retrybudget"
)

// Defaults applied to zero fields of Config.
const (
	DefaultMaxAttempts   = 3
	DefaultMaxRetryDelay = time.Minute
	DefaultBackoff       = 200 * time.Millisecond
	// DefaultMaxBufferedBody is far above LLM requests (a 1M-token prompt
	// is a few MB) and far below what buffering per request could afford.
	DefaultMaxBufferedBody = 32 << 20
	// DefaultThrottleK is the K the SRE book recommends for client-side
	// throttling: the client starts refusing locally once the backend
	// rejects more than half of what it is sent. It is not applied by
	// default (see Config.ThrottleK).
	DefaultThrottleK      = 2
	DefaultThrottleWindow = 2 * time.Minute
)

// Config configures a Client. The zero Config is valid: it sends through
// http.DefaultTransport, makes up to three attempts within a default retry
// budget, and does not throttle.
type Config struct {
	// BaseURL is the gateway's base URL, such as "http://127.0.0.1:8080",
	// which Estimate queries. RoundTrip does not use it: each request goes
	// where its own URL says. Empty means Estimate returns an error; a
	// non-empty value must be an absolute http or https URL.
	BaseURL string

	// APIKey is the caller's own key, sent by Estimate as "Authorization:
	// Bearer <key>": a gateway with tenants answers 401 without it.
	// RoundTrip does not use it: each request carries its own Authorization
	// (the OpenAI SDK sets it). Empty means Estimate sends none.
	APIKey string

	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// MaxAttempts is the number of times a request may be sent, the first
	// attempt included. One disables retries. Zero means DefaultMaxAttempts
	// (3); negative is an error.
	MaxAttempts int

	// MaxRetryDelay is the longest this client waits before a retry, whatever
	// the server asks: a longer Retry-After ends the request with a
	// *RejectedError instead. It matters most for requests without a
	// deadline. Zero means DefaultMaxRetryDelay (1 minute); negative is an
	// error.
	MaxRetryDelay time.Duration

	// Backoff is the wait before the first retry when the server gave no
	// retry delay (a connection error, or a 429/503 without Retry-After). It
	// doubles with each retry, up to MaxRetryDelay, and each wait is drawn
	// uniformly from its upper half so that clients failing together do not
	// retry together. Zero means DefaultBackoff (200ms); negative is an error.
	Backoff time.Duration

	// MaxBufferedBody is the largest request body, in bytes, that is copied
	// into memory so that it can be sent again, when the request has no
	// GetBody (http.NewRequest sets GetBody for in-memory bodies, and so does
	// the OpenAI SDK, so they are never copied). A larger body is sent once
	// and a rejection of it is not retried. Zero means DefaultMaxBufferedBody
	// (32 MiB); negative is an error.
	MaxBufferedBody int64

	// RetryBudget limits retries to a share of first attempts (see package
	// retrybudget). Share one Budget between Clients to bound the retries of
	// a whole process. Nil means a Budget of this Client's own with
	// retrybudget's defaults (10% of first attempts, plus 10 a second).
	RetryBudget *retrybudget.Budget

	// Priority is the X-Sluice-Priority sent when the request context has
	// none (see WithPriority). Empty means no header: the gateway's default
	// class (interactive) applies. It must be 1-64 letters, digits, '-', '_'
	// or '.'.
	Priority string

	// ThrottleK turns on adaptive client-side throttling with multiplier K:
	// a request is refused locally with probability
	// max(0, (requests - K×accepts) / (requests + 1)) over ThrottleWindow,
	// where requests counts attempts (including those refused locally) and
	// accepts counts those answered with anything but 429 or 503 (a
	// connection error is not an accept; an attempt the caller cancelled is
	// not counted at all). Lower K throttles harder. Zero means off; otherwise it must be at least 1,
	// since below 1 a client would refuse requests that a healthy server
	// accepts. DefaultThrottleK (2) is the usual choice.
	ThrottleK float64

	// ThrottleWindow is the rolling window over which requests and accepts
	// are counted. Zero means DefaultThrottleWindow (2 minutes, as in the SRE
	// book); otherwise it must be at least one second. Ignored when ThrottleK
	// is zero.
	ThrottleWindow time.Duration

	// Now is the clock used for deadlines, the retry budget and the throttle
	// window. Nil means time.Now. A replacement must agree with the clock the
	// request contexts' deadlines were set on; it is for tests (under
	// testing/synctest, time.Now is already fake and nil is right).
	Now func() time.Time

	// Rand returns a uniform float64 in [0, 1); it draws throttling
	// decisions and backoff jitter. Nil means math/rand/v2's Float64. It must
	// be safe for concurrent use.
	Rand func() float64
}

// withDefaults validates c and returns it with zero fields resolved.
func (c Config) withDefaults() (Config, error) {
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil {
			return c, fmt.Errorf("client: BaseURL: %w", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("client: BaseURL %q must be an absolute http:// or https:// URL", c.BaseURL)
		}
	}
	if c.Base == nil {
		c.Base = http.DefaultTransport
	}
	switch {
	case c.MaxAttempts < 0:
		return c, fmt.Errorf("client: MaxAttempts must be >= 1 (or 0 for %d), got %d", DefaultMaxAttempts, c.MaxAttempts)
	case c.MaxAttempts == 0:
		c.MaxAttempts = DefaultMaxAttempts
	}
	switch {
	case c.MaxRetryDelay < 0:
		return c, fmt.Errorf("client: MaxRetryDelay must not be negative, got %v", c.MaxRetryDelay)
	case c.MaxRetryDelay == 0:
		c.MaxRetryDelay = DefaultMaxRetryDelay
	}
	switch {
	case c.Backoff < 0:
		return c, fmt.Errorf("client: Backoff must not be negative, got %v", c.Backoff)
	case c.Backoff == 0:
		c.Backoff = DefaultBackoff
	}
	switch {
	case c.MaxBufferedBody < 0:
		return c, fmt.Errorf("client: MaxBufferedBody must not be negative, got %d", c.MaxBufferedBody)
	case c.MaxBufferedBody == 0:
		c.MaxBufferedBody = DefaultMaxBufferedBody
	}
	if c.RetryBudget == nil {
		b, err := retrybudget.New(retrybudget.Config{})
		if err != nil {
			return c, fmt.Errorf("client: RetryBudget: %w", err)
		}
		c.RetryBudget = b
	}
	if c.Priority != "" {
		if err := checkPriority(c.Priority); err != nil {
			return c, fmt.Errorf("client: Priority: %w", err)
		}
	}
	switch {
	case math.IsNaN(c.ThrottleK) || math.IsInf(c.ThrottleK, 0) || c.ThrottleK < 0 || (c.ThrottleK > 0 && c.ThrottleK < 1):
		return c, fmt.Errorf("client: ThrottleK must be 0 (off) or a finite number >= 1, got %v", c.ThrottleK)
	case c.ThrottleWindow < 0 || (c.ThrottleWindow > 0 && c.ThrottleWindow < time.Second):
		return c, fmt.Errorf("client: ThrottleWindow must be at least 1s (or 0 for %v), got %v", DefaultThrottleWindow, c.ThrottleWindow)
	case c.ThrottleWindow == 0:
		c.ThrottleWindow = DefaultThrottleWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c, nil
}
