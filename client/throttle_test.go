package client

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// t0 is aligned to the 2s buckets of the default window.
var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func TestThrottleProbabilityFormula(t *testing.T) {
	tests := []struct {
		k                 float64
		requests, accepts int
		want              float64
	}{
		{k: 2, requests: 0, accepts: 0, want: 0},
		{k: 2, requests: 100, accepts: 100, want: 0}, // healthy
		{k: 2, requests: 100, accepts: 50, want: 0},  // half rejected: the threshold at K=2
		{k: 2, requests: 100, accepts: 40, want: 20.0 / 101},
		{k: 2, requests: 100, accepts: 0, want: 100.0 / 101},
		{k: 1, requests: 100, accepts: 90, want: 10.0 / 101},
		{k: 1.5, requests: 9, accepts: 2, want: 6.0 / 10},
	}
	for _, tt := range tests {
		th := newThrottle(tt.k, DefaultThrottleWindow)
		for i := range tt.requests {
			th.observe(t0, i < tt.accepts)
		}
		if got := th.probability(t0); got != tt.want {
			t.Errorf("K=%v requests=%d accepts=%d: p = %v, want %v", tt.k, tt.requests, tt.accepts, got, tt.want)
		}
	}
}

func TestThrottleAdmitDrawsAgainstTheProbability(t *testing.T) {
	th := newThrottle(2, DefaultThrottleWindow)
	for i := range 99 {
		th.observe(t0, i < 24) // p = (99 - 48) / 100 = 0.51
	}
	if !th.admit(t0, 0.51) {
		t.Fatal("u = p was refused; refusals are u < p")
	}
	if th.admit(t0, 0.509) {
		t.Fatal("u < p was admitted")
	}
	// The refusal counted as a request: p = (100 - 48) / 101.
	if got, want := th.probability(t0), 52.0/101; got != want {
		t.Fatalf("after a refusal p = %v, want %v", got, want)
	}
}

func TestThrottleWindowRolls(t *testing.T) {
	th := newThrottle(2, DefaultThrottleWindow) // 60 buckets of 2s
	for range 10 {
		th.observe(t0, false)
	}
	for range 10 {
		th.observe(t0.Add(time.Minute), false)
	}
	if got, want := th.probability(t0.Add(119*time.Second)), 20.0/21; got != want {
		t.Fatalf("just inside the window p = %v, want %v", got, want)
	}
	if got, want := th.probability(t0.Add(2*time.Minute)), 10.0/11; got != want {
		t.Fatalf("once the first bucket left the window p = %v, want %v", got, want)
	}
	if got := th.probability(t0.Add(3 * time.Minute)); got != 0 {
		t.Fatalf("a window later p = %v, want 0", got)
	}
	// A time more than a window older than one seen is ignored, and does not
	// wipe the newer bucket sharing its slot.
	th.observe(t0.Add(3*time.Minute), true)
	th.observe(t0.Add(time.Minute), false)
	if got := th.probability(t0.Add(3 * time.Minute)); got != 0 {
		t.Fatalf("after a stale observation p = %v, want 0", got)
	}
}

// TestThrottlingRefusesLocallyOverHTTP: against a gateway rejecting
// everything, the client stops sending once the formula says so, and starts
// again once the rejections have left the window.
func TestThrottlingRefusesLocallyOverHTTP(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "", "3600", "")) // never worth retrying
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, Config{ThrottleK: 2, Rand: func() float64 { return 0.5 }})
		var sent, refused int
		for range 10 {
			_, err := do(t, c, newGET(t, t.Context(), g.URL))
			var rej *RejectedError
			if !errors.As(err, &rej) {
				t.Fatalf("error = %v, want a rejection", err)
			}
			switch rej.Reason {
			case "queue_full":
				sent++
			case ReasonClientThrottled:
				refused++
				if rej.StatusCode != 0 || rej.Attempts != 0 || rej.GaveUp != GaveUpThrottled {
					t.Fatalf("local refusal = %+v", rej)
				}
			}
		}
		// p before each request: 0, 1/2 (u=0.5 is not below it), then 2/3 and up.
		if sent != 2 || refused != 8 {
			t.Fatalf("sent %d, refused %d; want 2 and 8", sent, refused)
		}

		time.Sleep(DefaultThrottleWindow) // fake time
		_, err := do(t, c, newGET(t, t.Context(), g.URL))
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.Reason != "queue_full" {
			t.Fatalf("after the window: error = %v, want the gateway's rejection", err)
		}
	})
	if n := len(g.requests()); n != 3 {
		t.Fatalf("gateway saw %d requests, want 3", n)
	}
}

func TestThrottlingOffByDefault(t *testing.T) {
	g := newFakeGateway(t, reject(503, "queue_full", "", "3600", ""))
	c := newTestClient(t, Config{Rand: func() float64 { return 0 }})
	for range 5 {
		do(t, c, newGET(t, t.Context(), g.URL))
	}
	if n := len(g.requests()); n != 5 {
		t.Fatalf("gateway saw %d requests, want all 5", n)
	}
}
