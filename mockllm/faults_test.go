package mockllm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestErrorFault(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg    Config
		header []string
	}{
		"rate":   {Config{ErrorRate: 1}, nil},
		"header": {Config{}, []string{HeaderFault, "error"}},
	} {
		s, ts := newHTTP(t, tc.cfg)
		resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 0, false), tc.header...)
		body := decode(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 500 || field(t, body, "error", "type") != "server_error" {
			t.Errorf("%s: status %d body %v, want 500 server_error", name, resp.StatusCode, body)
		}
		if st := s.Stats(); st.Faults.Error != 1 || st.Started != 0 || st.CostUSD != 0 {
			t.Errorf("%s: stats %+v, want one unbilled error fault", name, st)
		}
	}
}

func TestRateLimitFaultCarriesRetryAfter(t *testing.T) {
	s, ts := newHTTP(t, Config{RetryAfter: 2500 * time.Millisecond})
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 0, false), HeaderFault, "429")
	body := decode(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || field(t, body, "error", "code") != "rate_limit_exceeded" {
		t.Errorf("status %d body %v", resp.StatusCode, body)
	}
	if ra, ms := resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"); ra != "3" || ms != "2500" {
		t.Errorf("Retry-After %q retry-after-ms %q, want 3 (rounded up) and 2500", ra, ms)
	}
	if st := s.Stats(); st.Faults.RateLimit != 1 || st.Rejected429 != 0 {
		t.Errorf("stats %+v: a 429 fault is a fault, not a capacity refusal", st)
	}
}

func TestNoneFaultHeaderSuppressesRandomFaults(t *testing.T) {
	_, ts := newHTTP(t, Config{ErrorRate: 1})
	resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 0, false), HeaderFault, "none")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
}

func TestResetFault(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg    Config
		header []string
	}{
		"rate":   {Config{ResetRate: 1}, nil},
		"header": {Config{}, []string{HeaderFault, "reset"}},
	} {
		s, ts := newHTTP(t, tc.cfg)
		req, _ := http.NewRequest(http.MethodPost, ts.URL+PathChatCompletions, strings.NewReader(chatBody("m", "x", 0, false)))
		for i := 0; i+1 < len(tc.header); i += 2 {
			req.Header.Set(tc.header[i], tc.header[i+1])
		}
		resp, err := ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: got status %d, want a connection error", name, resp.StatusCode)
		}
		if !strings.Contains(err.Error(), "reset") && !errors.Is(err, io.EOF) {
			t.Errorf("%s: error %v, want a reset connection", name, err)
		}
		if st := s.Stats(); st.Faults.Reset != 1 || st.Started != 0 {
			t.Errorf("%s: stats %+v", name, st)
		}
	}
}

// The hang fault over real HTTP: the client gets nothing until its own
// deadline.
func TestHangFaultHoldsTheClient(t *testing.T) {
	s, ts := newHTTP(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+PathChatCompletions, strings.NewReader(chatBody("m", "x", 0, false)))
	req.Header.Set(HeaderFault, "hang")
	if _, err := ts.Client().Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the client's deadline", err)
	}
	s.Close() // waits for the handler to notice
	if st := s.Stats(); st.Faults.Hang != 1 || st.Hanging != 0 || st.Started != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestLatencyHeaderOverridesServiceTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Median: time.Second, Sigma: 1, StepFactor: 5})
		r := <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("gpt-4o", "x", 0, false), HeaderLatencyMs, "1234"), time.Now())
		if r.elapsed != 1234*time.Millisecond || r.rec.Header().Get("X-Mock-Service-Ms") != "1234" {
			t.Errorf("took %v (header %q), want exactly 1234ms", r.elapsed, r.rec.Header().Get("X-Mock-Service-Ms"))
		}
		r = <-serveAsync(s, newReq(t.Context(), PathChatCompletions, chatBody("gpt-4o", "x", 0, false), HeaderLatencyMs, "0"), time.Now())
		if r.elapsed != 0 {
			t.Errorf("X-Mock-Latency-Ms 0 took %v", r.elapsed)
		}
	})
}

// The random draws follow the configured rates: a seeded sample of 10,000
// draws lands within a few standard deviations of each rate.
func TestFaultRates(t *testing.T) {
	s := newServer(t, Config{ErrorRate: 0.1, HangRate: 0.2, ResetRate: 0.05, Seed: 1})
	counts := map[fault]int{}
	const n = 10000
	for range n {
		counts[s.drawFault()]++
	}
	for f, rate := range map[fault]float64{faultError: 0.1, faultHang: 0.2, faultReset: 0.05, faultNone: 0.65} {
		if got := float64(counts[f]) / n; got < rate-0.02 || got > rate+0.02 {
			t.Errorf("fault %d: rate %.3f, want %.2f ± 0.02", f, got, rate)
		}
	}
}

// Lognormal service times: with sigma > 0 the sample median stays at
// Median, and the spread is real.
func TestServiceTimeDistribution(t *testing.T) {
	s := newServer(t, Config{Median: time.Second, Sigma: 0.5, Seed: 3})
	const n = 4001
	var below, over2x int
	for range n {
		d := s.serviceTime(ModelSpec{}, 0, 0, s.start)
		if d < time.Second {
			below++
		}
		if d > 2*time.Second {
			over2x++
		}
	}
	if frac := float64(below) / n; frac < 0.47 || frac > 0.53 {
		t.Errorf("%.3f of draws below the median, want about half", frac)
	}
	// P(X > 2×median) = P(Z > ln2/0.5) ≈ 0.083.
	if frac := float64(over2x) / n; frac < 0.06 || frac > 0.11 {
		t.Errorf("%.3f of draws above 2× the median, want about 0.083", frac)
	}
}

// TestCutFaultBreaksTheAnswerOffHalfway: X-Mock-Fault: cut serves the
// answer and drops the connection after half of it — a stream's first
// pieces arrive, then the read fails — and bills what was generated.
func TestCutFaultBreaksTheAnswerOffHalfway(t *testing.T) {
	for _, stream := range []bool{true, false} {
		s, ts := newHTTP(t, Config{})
		resp := post(t, ts.Client(), ts.URL+PathChatCompletions, chatBody("m", "x", 32, stream), HeaderFault, "cut")
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil {
			t.Fatalf("stream %v: status %d, read error %v: want a 200 whose body breaks off", stream, resp.StatusCode, err)
		}
		if len(b) == 0 || strings.Contains(string(b), "[DONE]") {
			t.Errorf("stream %v: body %q: want half an answer", stream, b)
		}
		st := s.Stats()
		if st.Cut != 1 || st.Aborted != 1 || st.Started != 1 || st.Faults.Total() != 0 || st.InService != 0 {
			t.Errorf("stream %v: stats %+v, want one started call cut and aborted, its slot free", stream, st)
		}
	}
}
