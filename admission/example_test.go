package admission_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// A gate in front of a dependency: two slots, a small waiting room, and a
// caller whose deadline cannot hold the backlog is refused at once, told how
// long it would have waited and when to come back.
func Example() {
	gate, err := admission.New(admission.Config{
		Concurrency:        2,
		MaxQueue:           8,
		InitialServiceTime: time.Second, // until the first call is measured
	})
	if err != nil {
		panic(err)
	}

	// Two calls take both slots.
	ctx := context.Background()
	a, _ := gate.Acquire(ctx, admission.Request{Tenant: "acme"})
	b, _ := gate.Acquire(ctx, admission.Request{Tenant: "acme"})

	// A third caller has 1.6s: a slot frees in about 0.5s, plus 1s of
	// service — it fits, so it would wait. One with 1.2s would not: it is
	// told to come back once a call has completed (0.5s), not sooner.
	fits, _ := gate.Estimate(admission.Request{Deadline: time.Now().Add(1600 * time.Millisecond)})
	fmt.Println("1.6s budget:", fits.Verdict == admission.Queued, "wait", fits.EstimatedWait)

	_, err = gate.TryAcquire(admission.Request{Deadline: time.Now().Add(1200 * time.Millisecond)})
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		fmt.Println("1.2s budget:", rej.Reason, "wait", rej.EstimatedWait, "retry after", rej.RetryAfter.Round(100*time.Millisecond))
	}
	fmt.Println("errors.Is queue_wait:", errors.Is(err, admission.ErrQueueWait))

	a.Done(admission.Outcome{ServiceTime: time.Second})
	b.Done(admission.Outcome{ServiceTime: time.Second})
	fmt.Println("in flight:", gate.Stats().InFlight)
	// Output:
	// 1.6s budget: true wait 500ms
	// 1.2s budget: queue_wait wait 500ms retry after 500ms
	// errors.Is queue_wait: true
	// in flight: 0
}
