package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/saturation"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/mockllm"
)

// saturate ends two windows of the gateway's CPU shedder as if its cores
// had been saturated (a scheduling delay of 12 ms, over the 10 ms
// target), the second after 20
// speculative calls and 80 interactive ones: a fifth is shed, the
// speculative ones — the lowest rank — all of them, the interactive none.
func saturate(t *testing.T, g *Gateway) {
	t.Helper()
	rank := func(class string) int {
		r, err := g.chain.Rank(admission.Request{Class: class})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	over := saturation.Window{Delay: 12 * time.Millisecond, Busy: 1, Calls: 1 << 20}
	g.cpu.shedder.Observe(over) // the first window over: held
	for range 20 {
		g.cpu.shedder.Shed(rank("speculative"))
	}
	for range 80 {
		g.cpu.shedder.Shed(rank("interactive"))
	}
	if a := g.cpu.shedder.Observe(over).Admitted; a != 0.8 {
		t.Fatalf("admitted %v after a saturated window, want 0.8", a)
	}
}

// TestShedWhenTheGatewaysCPUIsSaturated: with the gateway's own CPU
// saturated, a call of a rank being shed is refused 503 queue_full with
// Retry-After, before its body is read (a body that would be a 400 is not
// looked at) and without reaching the provider; a call of a rank not shed
// goes through. The shedder's window is ended by the test (time and the
// delay are its inputs); the calls are real HTTP.
func TestShedWhenTheGatewaysCPUIsSaturated(t *testing.T) {
	m, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: time.Millisecond})
	g, srv := startGateway(t, baseConfig(up.URL))
	saturate(t, g)

	resp := post(t, context.Background(), srv.URL, `{"model": not json`, map[string]string{contract.HeaderPriority: "speculative"})
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("speculative call: %d %s, want 503", resp.StatusCode, b)
	}
	if got := resp.Header.Get(contract.HeaderReason); got != contract.ReasonQueueFull {
		t.Fatalf("reason %q, want %s", got, contract.ReasonQueueFull)
	}
	if s, _ := strconv.Atoi(resp.Header.Get(contract.HeaderRetryAfter)); s < 1 || s > 2 {
		t.Fatalf("Retry-After %q, want 1 or 2 s", resp.Header.Get(contract.HeaderRetryAfter))
	}
	if ms, _ := strconv.Atoi(resp.Header.Get(contract.HeaderRetryAfterMs)); ms < 1000 || ms > 2000 {
		t.Fatalf("retry-after-ms %q, want 1000..2000", resp.Header.Get(contract.HeaderRetryAfterMs))
	}
	if got := resp.Header.Get(contract.HeaderEstimatedWaitMs); got != "12" {
		t.Fatalf("estimated wait %q ms, want the measured delay, 12", got)
	}
	if e := decodeError(t, b); e.Code != contract.ReasonQueueFull || !strings.Contains(e.Message, "CPU is saturated") {
		t.Fatalf("error %+v, want queue_full saying the gateway's CPU is saturated", e)
	}
	if resp.Close {
		t.Fatal("the refusal closed the connection: the caller's retry would pay for a new one")
	}

	resp = post(t, context.Background(), srv.URL, chatBody, nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("interactive call: %d %s, want 200: its rank is not shed", resp.StatusCode, b)
	}
	if got := m.Stats().Received; got != 1 {
		t.Fatalf("the provider received %d calls, want only the interactive one", got)
	}
	if got := testutil.ToFloat64(g.cpu.shed.WithLabelValues("speculative")); got != 1 {
		t.Fatalf("sluice_saturation_shed_total{class=speculative} = %v, want 1", got)
	}
	if got := counter(t, g, "rejections", "queue_full", "speculative", contract.AnonymousTenant); got != 1 {
		t.Fatalf("rejections{queue_full,speculative} = %v, want 1", got)
	}
	if got := g.State().Saturation; got == nil || *got != (SaturationState{SchedulingDelayMs: 12, TargetMs: float64(saturation.DefaultMaxSchedulingDelay.Microseconds()) / 1000, Busy: 1, Admitted: 0.8, Shed: 1}) {
		t.Fatalf("state's saturation %+v", got)
	}
}

// TestSaturationShedDisabled: server.saturation.disabled leaves every call
// to admission, however saturated the CPU.
func TestSaturationShedDisabled(t *testing.T) {
	_, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Server.Saturation.Disabled = true
	g, srv := startGateway(t, cfg)
	if g.cpu != nil || g.State().Saturation != nil {
		t.Fatal("disabled, the gateway still has a shedder")
	}
	resp := post(t, context.Background(), srv.URL, chatBody, map[string]string{contract.HeaderPriority: "speculative"})
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s, want 200", resp.StatusCode, b)
	}
}

// TestObservedCallsAreNotShed: in observe mode a call the saturated CPU
// would have shed is forwarded, and its answer, the access line and the
// would-refuse count say queue_full — the first refusal it would have had.
func TestObservedCallsAreNotShed(t *testing.T) {
	m, up := testkit.StartMock(t, mockllm.Config{Slots: 4, Median: time.Millisecond})
	cfg := baseConfig(up.URL)
	cfg.Mode = "observe"
	g, srv := startGateway(t, cfg)
	saturate(t, g)
	resp := post(t, context.Background(), srv.URL, chatBody, map[string]string{contract.HeaderPriority: "speculative"})
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("observed speculative call: %d %s, want 200", resp.StatusCode, b)
	}
	if got := resp.Header.Get(contract.HeaderWouldRefuse); got != contract.ReasonQueueFull {
		t.Fatalf("%s %q, want %s", contract.HeaderWouldRefuse, got, contract.ReasonQueueFull)
	}
	if got := m.Stats().Received; got != 1 {
		t.Fatalf("the provider received %d calls, want 1", got)
	}
	if got := testutil.ToFloat64(g.metrics.would.refuse.WithLabelValues("queue_full", "speculative", contract.AnonymousTenant)); got != 1 {
		t.Fatalf("sluice_would_refuse_total{queue_full,speculative} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(g.cpu.shed.WithLabelValues("speculative")); got != 0 {
		t.Fatalf("sluice_saturation_shed_total{speculative} = %v, want 0: nothing was refused", got)
	}
}
