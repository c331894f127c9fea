package client

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/contract"
)

const estimateJSON = `{"priority":"interactive","rank":4,"estimated_wait_ms":1234,"service_p50_ms":800,"service_p95_ms":2100,"admit":true,"reason":"","retry_after_ms":0,"queue_depth":12,"mode":"fifo","future_field":[1,2]}`

// estimateServer answers the estimate endpoint under prefix with body and
// records the query.
func estimateServer(t *testing.T, prefix string, status int, body string) (*httptest.Server, *url.Values) {
	t.Helper()
	var q url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != prefix+contract.EstimatePath {
			http.NotFound(w, r)
			return
		}
		q = r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &q
}

func TestEstimateDecodesTheContract(t *testing.T) {
	srv, q := estimateServer(t, "/gw", 200, estimateJSON)
	c := newTestClient(t, Config{BaseURL: srv.URL + "/gw/"})
	got, err := c.Estimate(t.Context(), "batch", 2500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := Estimate{
		Priority: "interactive", Rank: 4, EstimatedWait: 1234 * time.Millisecond,
		ServiceP50: 800 * time.Millisecond, ServiceP95: 2100 * time.Millisecond,
		Admit: true, QueueDepth: 12, Mode: "fifo",
	}
	if got != want {
		t.Fatalf("Estimate = %+v\nwant       %+v", got, want)
	}
	if q.Get("priority") != "batch" || q.Get("timeout_ms") != "2500" {
		t.Fatalf("query = %v, want priority=batch timeout_ms=2500", *q)
	}
}

func TestEstimateOmitsDefaults(t *testing.T) {
	srv, q := estimateServer(t, "", 200, `{"priority":"interactive","admit":false,"reason":"queue_wait","retry_after_ms":3000}`)
	c := newTestClient(t, Config{BaseURL: srv.URL})
	got, err := c.Estimate(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Admit || got.Reason != "queue_wait" || got.RetryAfter != 3*time.Second {
		t.Fatalf("Estimate = %+v", got)
	}
	if len(*q) != 0 {
		t.Fatalf("query = %v, want none", *q)
	}
}

func TestEstimateErrors(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		priority string
		timeout  time.Duration
		noBase   bool
		want     string
	}{
		{name: "no BaseURL", noBase: true, want: "BaseURL"},
		{name: "bad priority", priority: "a b", want: contract.HeaderPriority},
		{name: "negative timeout", timeout: -time.Second, want: "timeout"},
		{name: "not found", status: 404, body: "no such thing", want: "404"},
		{name: "not JSON", status: 200, body: "<html>", want: "decoding"},
		{name: "negative wait", status: 200, body: `{"estimated_wait_ms":-5}`, want: "estimated_wait_ms"},
		{name: "overflowing wait", status: 200, body: `{"service_p95_ms":9223372036854775807}`, want: "service_p95_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := estimateServer(t, "", tt.status, tt.body)
			cfg := Config{BaseURL: srv.URL}
			if tt.noBase {
				cfg.BaseURL = ""
			}
			c := newTestClient(t, cfg)
			_, err := c.Estimate(t.Context(), tt.priority, tt.timeout)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Estimate error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// TestEstimateForAsksAboutTheWholeRequest: the attempt, the model and the
// token counts go in the query, a refusal by a budget and a degraded model
// come back, and a negative count is refused before anything is sent.
func TestEstimateForAsksAboutTheWholeRequest(t *testing.T) {
	srv, q := estimateServer(t, "", 200, `{"priority":"batch","admit":false,"reason":"retry_budget","retry_after_ms":150,"model":"gpt-4o","model_called":"gpt-4o-mini"}`)
	c := newTestClient(t, Config{BaseURL: srv.URL})
	got, err := c.EstimateFor(t.Context(), EstimateQuery{Priority: "batch", Attempt: 2, Model: "gpt-4o", InputTokens: 1200, MaxTokens: 300, Endpoint: "/v1/responses"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Admit || got.Reason != "retry_budget" || got.RetryAfter != 150*time.Millisecond || got.ModelCalled != "gpt-4o-mini" {
		t.Fatalf("EstimateFor = %+v", got)
	}
	want := url.Values{"priority": {"batch"}, "attempt": {"2"}, "model": {"gpt-4o"}, "input_tokens": {"1200"}, "max_tokens": {"300"}, "endpoint": {"/v1/responses"}}
	if q.Encode() != want.Encode() {
		t.Fatalf("query %s, want %s", q.Encode(), want.Encode())
	}
	if _, err := c.EstimateFor(t.Context(), EstimateQuery{MaxTokens: -1}); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Fatalf("negative max_tokens: %v", err)
	}
	if _, err := c.EstimateFor(t.Context(), EstimateQuery{Endpoint: "v1/embeddings"}); err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("an endpoint that is not a path: %v", err)
	}
}
