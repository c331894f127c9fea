package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/client"
)

// A gateway that cannot serve the request in time says so, and the client
// gives up at once instead of waiting 30s past a 5s deadline.
func Example_rejection() {
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.Header().Set("X-Sluice-Reason", "queue_wait")
		w.Header().Set("X-Sluice-Estimated-Wait-Ms", "28000")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer gateway.Close()

	hc, err := client.NewHTTPClient(client.Config{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(client.WithPriority(ctx, "batch"), http.MethodGet, gateway.URL, nil)

	_, err = hc.Do(req)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		fmt.Println(rej.StatusCode, rej.Reason, rej.RetryAfter, rej.EstimatedWait, rej.GaveUp)
	}
	// Output:
	// 503 queue_wait 30s 28s deadline
}

// A Retrier applies the client's retry discipline in virtual time, as a
// simulator does: time and the uniform draws are arguments.
func ExampleRetrier() {
	r, err := client.NewRetrier(client.Config{})
	if err != nil {
		panic(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deadline := start.Add(2 * time.Second)

	r.Begin(start, 0.5)                      // the first attempt, sent at start
	r.Observe(start.Add(time.Second), false) // and rejected a second later
	// No Retry-After: the backoff, 200ms drawn from its upper half.
	wait, stop := r.Next(start.Add(time.Second), client.Failure{Deadline: deadline, U: 0.5})
	fmt.Println(wait, stop == "")
	// A Retry-After of 1s would start the retry at the deadline: no retry.
	_, stop = r.Next(start.Add(time.Second), client.Failure{Attempt: 1, Deadline: deadline, RetryAfter: time.Second, HasRetryAfter: true})
	fmt.Println(stop)
	// Output:
	// 150ms true
	// deadline
}
