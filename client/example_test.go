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
