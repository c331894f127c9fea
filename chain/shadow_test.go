package chain

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// The picture of an observing pool ends a running slot for each call the
// provider completes, its own or the oldest, with the time it ran, and
// never holds a slot past the last call: a slot that outlived its call is
// ended, unused, once more slots are held than calls are in flight.
func TestShadowEndsSlotsAtTheProvidersPaceAndNoneOutlivesTheCalls(t *testing.T) {
	var s shadow
	type ended struct {
		name string
		o    admission.Outcome
	}
	var got []ended
	slot := func(name string) *shadowSlot {
		return &shadowSlot{release: func(_ time.Time, o admission.Outcome) { got = append(got, ended{name, o}) }}
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b := slot("a"), slot("b")
	s.take(at(0), a, 1) // running
	s.take(at(0), b, 1) // waiting: one slot
	s.take(at(0), nil, 1)
	// b's call completes first: the provider served a call, and the
	// running slot — a's — ends after 100ms; b's starts running.
	s.end(at(100), b, admission.Success, 1)
	if len(got) != 1 || got[0].name != "a" || got[0].o.Result != admission.Success || got[0].o.ServiceTime != 100*time.Millisecond {
		t.Fatalf("ended %+v, want a's slot after 100ms", got)
	}
	// The slotless call fails: a failure is no measure of the pace, and
	// ends nothing while a call (a's) is still in flight.
	s.end(at(150), nil, admission.Failure, 1)
	if len(got) != 1 || s.held() != 1 {
		t.Fatalf("after a failure without a slot: ended %+v, %d held; want nothing more ended, b's slot held", got, s.held())
	}
	// a's call fails, its slot long ended: no call is left, and b's slot,
	// whose call completed, ends unused.
	s.end(at(200), a, admission.Failure, 1)
	if s.held() != 0 || len(got) != 2 || got[1].name != "b" || got[1].o.Result != admission.Unused {
		t.Fatalf("after the last call: ended %+v, %d held; want b's slot ended unused, none held", got, s.held())
	}
}
