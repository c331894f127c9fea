package demo

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestDemoShowsTheCure runs a short storm both ways over real loopback HTTP
// and checks the demo's claim: straight at the provider most billed calls are
// wasted and few callers are answered in time; through sluice almost nothing
// is wasted and more callers are answered in time.
func TestDemoShowsTheCure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	var out bytes.Buffer
	res, err := Run(t.Context(), Config{Slots: 4, Median: 300 * time.Millisecond, Load: 8, Duration: 6 * time.Second, Seed: 3}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	d, s := res.Direct, res.Sluice
	if d.WastedShare() < 0.2 {
		t.Errorf("direct: only %.1f%% of billed calls wasted; the storm did not overload the provider", 100*d.WastedShare())
	}
	if s.WastedShare() > 0.05 {
		t.Errorf("through sluice: %.1f%% of billed calls wasted", 100*s.WastedShare())
	}
	if s.Load.OnTime <= d.Load.OnTime {
		t.Errorf("through sluice %d answers on time, straight %d", s.Load.OnTime, d.Load.OnTime)
	}
	if s.Load.Rejections["queue_wait"]+s.Load.Rejections["queue_full"]+s.Load.Rejections["evicted"] == 0 {
		t.Errorf("sluice refused nothing: %v", s.Load.Rejections)
	}
	// The gateway's own books agree with the provider's bill.
	if s.Books == nil || s.Upstream.CostUSD == 0 || math.Abs(s.Books.SpentUSD-s.Upstream.CostUSD) > 0.05*s.Upstream.CostUSD {
		t.Errorf("sluice's books %+v against the provider's bill $%v", s.Books, s.Upstream.CostUSD)
	}
	for _, want := range []string{"direct", "through sluice", "goodput / capacity", "answers nobody got", "/sluice/v1/estimate", "/metrics"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
}
