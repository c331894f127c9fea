package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
)

// attemptHeaderNames are the four headers an AttemptHeaders mode chooses
// among.
var attemptHeaderNames = []string{
	contract.HeaderAttempt, contract.HeaderStainlessRetryCount,
	contract.HeaderTimeoutMs, contract.HeaderStainlessTimeout,
}

// checkAttemptHeaders compares, for each of attemptHeaderNames, the values
// the server saw on each attempt in order with want; a name missing from
// want must be absent from every attempt.
func checkAttemptHeaders(t *testing.T, seen []seen, want map[string][]string) {
	t.Helper()
	for _, name := range attemptHeaderNames {
		var got []string
		present := false
		for _, s := range seen {
			vs := s.header.Values(name)
			if len(vs) > 1 {
				t.Errorf("%s sent %d times on one attempt: %q", name, len(vs), vs)
			}
			if len(vs) > 0 {
				present = true
			}
			got = append(got, strings.Join(vs, ","))
		}
		w, ok := want[name]
		switch {
		case !ok && present:
			t.Errorf("%s sent (%q), want it absent", name, got)
		case ok && !slices.Equal(got, w):
			t.Errorf("%s = %q, want %q", name, got, w)
		}
	}
}

func TestAttemptHeadersModes(t *testing.T) {
	// A naive caller with a 5s deadline gives each of its three attempts
	// 2.5s: 2500 in milliseconds, 2 in the SDKs' truncated seconds.
	for _, tc := range []struct {
		mode AttemptHeaders
		want map[string][]string
	}{
		{"", map[string][]string{ // the zero value is today's behaviour
			contract.HeaderAttempt:   {"0", "1", "2"},
			contract.HeaderTimeoutMs: {"2500", "2500", "2500"},
		}},
		{AttemptHeadersSluice, map[string][]string{
			contract.HeaderAttempt:   {"0", "1", "2"},
			contract.HeaderTimeoutMs: {"2500", "2500", "2500"},
		}},
		{AttemptHeadersStainless, map[string][]string{
			contract.HeaderStainlessRetryCount: {"0", "1", "2"},
			contract.HeaderStainlessTimeout:    {"2", "2", "2"},
		}},
		{AttemptHeadersBoth, map[string][]string{
			contract.HeaderAttempt:             {"0", "1", "2"},
			contract.HeaderStainlessRetryCount: {"0", "1", "2"},
			contract.HeaderTimeoutMs:           {"2500", "2500", "2500"},
		}},
		{AttemptHeadersNone, map[string][]string{
			contract.HeaderTimeoutMs: {"2500", "2500", "2500"},
		}},
	} {
		t.Run("mode="+string(tc.mode), func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n < 2 {
					reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
					return
				}
				ok(w, r, n)
			})
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 10, MaxRequests: 1, Policy: Naive{},
				Classes: oneClass("interactive", 5*time.Second), AttemptHeaders: tc.mode,
			}, env{clock: newFakeClock()})
			if rep.Attempts != 3 || rep.OnTime != 1 {
				t.Fatalf("attempts %d on time %d, want 3 and 1", rep.Attempts, rep.OnTime)
			}
			checkAttemptHeaders(t, srv.seen(), tc.want)
			want := tc.mode
			if want == "" {
				want = AttemptHeadersSluice
			}
			if rep.AttemptHeaders != want {
				t.Errorf("report's attempt headers = %q, want %q", rep.AttemptHeaders, want)
			}
		})
	}
}

func TestStainlessTimeoutLeftOutUnderASecond(t *testing.T) {
	// The Go SDK would send 0, which tells a gateway nothing; leaving the
	// header out says the same without inviting a parse of "0".
	srv := newRecorder(t, ok)
	mustRun(t, Config{
		Target: srv.URL, Rate: 10, MaxRequests: 1, AttemptTimeout: 750 * time.Millisecond,
		Classes: oneClass("interactive", 10*time.Second), AttemptHeaders: AttemptHeadersStainless,
	}, env{clock: newFakeClock()})
	checkAttemptHeaders(t, srv.seen(), map[string][]string{contract.HeaderStainlessRetryCount: {"0"}})
}

// bareRetries is a client library that sends up to two attempts through the
// runner's attempt transport, each with a 5.5s timeout on its context, and
// declares nothing itself unless preset says so: the attempt transport
// fills in the headers from the context.
type bareRetries struct{ preset http.Header }

func (bareRetries) Name() string { return "bare" }

func (p bareRetries) Transport(attempt http.RoundTripper) (http.RoundTripper, error) {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		for n := 0; ; n++ {
			ctx, cancel := context.WithTimeout(req.Context(), 5500*time.Millisecond)
			areq := req.Clone(ctx)
			if n > 0 {
				areq.Body, _ = req.GetBody()
			}
			for k, vs := range p.preset {
				areq.Header[k] = vs
			}
			resp, err := attempt.RoundTrip(areq)
			if err != nil || resp.StatusCode == http.StatusOK {
				if err != nil {
					cancel()
					return nil, err
				}
				resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
				return resp, nil
			}
			resp.Body.Close()
			cancel()
		}
	}), nil
}

func TestAttemptHeadersFromTheContext(t *testing.T) {
	// X-Sluice-Timeout-Ms is read from the context's deadline a moment
	// after it was set, so it is a little under 5500 and is compared as
	// "~5500"; the SDKs' whole seconds truncate it to 5 either way.
	roughly := func(seen []seen) []seen {
		for _, s := range seen {
			if v, err := strconv.Atoi(s.header.Get(contract.HeaderTimeoutMs)); err == nil && v > 5400 && v <= 5500 {
				s.header.Set(contract.HeaderTimeoutMs, "~5500")
			}
		}
		return seen
	}
	for _, tc := range []struct {
		mode   AttemptHeaders
		preset http.Header
		want   map[string][]string
	}{
		{AttemptHeadersSluice, nil, map[string][]string{
			contract.HeaderAttempt:   {"0", "1"},
			contract.HeaderTimeoutMs: {"~5500", "~5500"},
		}},
		{AttemptHeadersStainless, nil, map[string][]string{
			contract.HeaderStainlessRetryCount: {"0", "1"},
			contract.HeaderStainlessTimeout:    {"5", "5"},
		}},
		{AttemptHeadersBoth, nil, map[string][]string{
			contract.HeaderAttempt:             {"0", "1"},
			contract.HeaderStainlessRetryCount: {"0", "1"},
			contract.HeaderTimeoutMs:           {"~5500", "~5500"},
		}},
		{AttemptHeadersNone, nil, map[string][]string{
			contract.HeaderTimeoutMs: {"~5500", "~5500"},
		}},
		// A policy that declares the attempt itself is the caller being
		// simulated: its headers stay, and the mode's others are added.
		{AttemptHeadersStainless, http.Header{contract.HeaderAttempt: {"7"}, contract.HeaderStainlessTimeout: {"60"}}, map[string][]string{
			contract.HeaderAttempt:             {"7", "7"},
			contract.HeaderStainlessRetryCount: {"0", "1"},
			contract.HeaderStainlessTimeout:    {"60", "60"},
		}},
	} {
		name := string(tc.mode)
		if tc.preset != nil {
			name += "/policy_declares"
		}
		t.Run(name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
					return
				}
				ok(w, r, n)
			})
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 10, MaxRequests: 1, Policy: bareRetries{preset: tc.preset},
				Classes: oneClass("interactive", 10*time.Second), AttemptHeaders: tc.mode,
			}, env{clock: wallClock{}})
			if rep.Attempts != 2 || rep.OnTime != 1 {
				t.Fatalf("attempts %d on time %d, want 2 and 1", rep.Attempts, rep.OnTime)
			}
			checkAttemptHeaders(t, roughly(srv.seen()), tc.want)
		})
	}
}

func TestSamePrompt(t *testing.T) {
	// Every request is refused once and then answered, so each sends two
	// attempts; the bodies must be copies within a request whatever the
	// setting, and across requests exactly when SamePrompt is set.
	for _, same := range []bool{false, true} {
		t.Run("same="+strconv.FormatBool(same), func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if r.Header.Get(contract.HeaderAttempt) == "0" {
					reject(w, http.StatusServiceUnavailable, "queue_full", "", "")
					return
				}
				ok(w, r, n)
			})
			const requests = 5
			rep := mustRun(t, Config{
				Target: srv.URL, Rate: 10, MaxRequests: requests, SamePrompt: same,
				Classes: oneClass("interactive", 10*time.Second),
			}, env{clock: newFakeClock()})
			if rep.Attempts != 2*requests || rep.OnTime != requests || rep.SamePrompt != same {
				t.Fatalf("attempts %d on time %d same prompt %v, want %d %d %v",
					rep.Attempts, rep.OnTime, rep.SamePrompt, 2*requests, requests, same)
			}
			copies := map[string]int{}
			for _, s := range srv.seen() {
				copies[s.body]++
				var body map[string]any
				if err := json.Unmarshal([]byte(s.body), &body); err != nil {
					t.Fatalf("body %q: %v", s.body, err)
				}
				if _, seeded := body["seed"]; seeded == same {
					t.Errorf("body %s: seed present = %v, want %v", s.body, seeded, !same)
				}
			}
			want := map[string]int{}
			if same {
				want[`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Reply with one short sentence about rivers."}],"max_tokens":64}`] = 2 * requests
			} else {
				for seq := range requests {
					want[string(requestBody(mustResolve(t).bodies[0], seq))] = 2
				}
			}
			if len(copies) != len(want) {
				t.Errorf("%d distinct bodies, want %d: %v", len(copies), len(want), copies)
			}
			for b, n := range want {
				if copies[b] != n {
					t.Errorf("body %s sent %d times, want %d", b, copies[b], n)
				}
			}
		})
	}
}

func mustResolve(t *testing.T) *resolved {
	t.Helper()
	rc, err := resolve(Config{Target: "http://h", Rate: 1, MaxRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}
