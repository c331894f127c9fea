package loadgen

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// AttemptHeaders names the request headers that tell the server which attempt
// of a logical request it is receiving and how long the caller will wait for
// it. A gateway can only recognise a retry, or refuse at once what cannot be
// served in time, if the caller says so; real callers say it in different
// ways, and a gateway has to be measured against each of them.
type AttemptHeaders string

const (
	// AttemptHeadersSluice sends X-Sluice-Attempt and X-Sluice-Timeout-Ms,
	// as sluice's client package does.
	AttemptHeadersSluice AttemptHeaders = "sluice"
	// AttemptHeadersStainless sends what the official OpenAI SDKs send on
	// their own: X-Stainless-Retry-Count, and X-Stainless-Timeout in whole
	// seconds, truncated, left out below one second (the Go SDK sends 0
	// there, which tells the server nothing). No X-Sluice-* header.
	AttemptHeadersStainless AttemptHeaders = "stainless"
	// AttemptHeadersBoth sends X-Sluice-Attempt and X-Stainless-Retry-Count,
	// and X-Sluice-Timeout-Ms: an SDK caller wrapped by sluice's client.
	AttemptHeadersBoth AttemptHeaders = "both"
	// AttemptHeadersNone sends no attempt number at all, as a shell loop or
	// a homemade client would, so every retry looks like a first attempt;
	// the deadline is still declared with X-Sluice-Timeout-Ms.
	AttemptHeadersNone AttemptHeaders = "none"
)

// attemptHeaderModes lists the valid values, in the order error messages
// give them.
var attemptHeaderModes = []AttemptHeaders{AttemptHeadersSluice, AttemptHeadersStainless, AttemptHeadersBoth, AttemptHeadersNone}

func (m AttemptHeaders) valid() bool {
	return m == "" || slices.Contains(attemptHeaderModes, m)
}

func attemptHeaderList() string {
	s := make([]string, len(attemptHeaderModes))
	for i, m := range attemptHeaderModes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// declare puts the headers of mode m for attempt n on h; timeout is the
// attempt's time budget when hasTimeout is set. With overwrite false a
// header already on h is kept: a policy that declared the attempt itself (a
// client library with its own numbering) is the caller being simulated, and
// the runner must not correct it.
func (m AttemptHeaders) declare(h http.Header, n int, timeout time.Duration, hasTimeout, overwrite bool) {
	set := func(name, v string) {
		if overwrite || h.Get(name) == "" {
			h.Set(name, v)
		}
	}
	attempt := strconv.Itoa(n)
	switch m {
	case AttemptHeadersStainless:
		set(contract.HeaderStainlessRetryCount, attempt)
		if hasTimeout && timeout >= time.Second {
			set(contract.HeaderStainlessTimeout, strconv.FormatInt(int64(timeout/time.Second), 10))
		}
		return
	case AttemptHeadersBoth:
		set(contract.HeaderAttempt, attempt)
		set(contract.HeaderStainlessRetryCount, attempt)
	case AttemptHeadersNone:
	default: // AttemptHeadersSluice, or the zero value before resolve
		set(contract.HeaderAttempt, attempt)
	}
	if hasTimeout {
		set(contract.HeaderTimeoutMs, timeoutMs(timeout))
	}
}
