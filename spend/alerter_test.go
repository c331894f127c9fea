package spend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// syncBuffer is a log sink safe for the Alerter's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func alertConfig(webhook string) spend.Config {
	cfg := testConfig()
	cfg.AlertPerHour = 60
	cfg.AlertWebhook = webhook
	return cfg
}

// TestAlerterPostsTheWebhook: a real HTTP receiver on loopback gets one
// JSON POST per crossing, with the contract's fields, and a WARN is logged.
func TestAlerterPostsTheWebhook(t *testing.T) {
	got := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s with %q", r.Method, r.Header.Get("Content-Type"))
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		got <- body
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var logs syncBuffer
	l := newLimiter(t, alertConfig(srv.URL+"/hooks/s3cr3t"), spend.Options{})
	a := spend.NewAlerter(l, spend.AlerterOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()

	spendUSD(t, l, t0, "acme", 0.5)
	spendUSD(t, l, t0, "x", 5)
	evs, err := a.Tick(ctx, t0.Add(time.Second))
	if err != nil || len(evs) != 1 {
		t.Fatalf("Tick = %+v, %v", evs, err)
	}
	body := <-got // Tick returns after the receiver answered
	if body["scope"] != "global" || body["state"] != "fired" || body["rate_per_hour"] != 66.0 || body["threshold_per_hour"] != 60.0 {
		t.Errorf("webhook body %v", body)
	}
	top, _ := body["top_tenants"].([]any)
	if len(top) != 2 || top[0].(map[string]any)["name"] != "x" || top[1].(map[string]any)["name"] != "acme" {
		t.Errorf("top_tenants %v", body["top_tenants"])
	}
	if models, _ := body["top_models"].([]any); len(models) != 1 || models[0].(map[string]any)["name"] != "unit" {
		t.Errorf("top_models %v", body["top_models"])
	}
	if _, err := time.Parse(time.RFC3339, body["at"].(string)); err != nil {
		t.Errorf("at: %v", err)
	}
	if !strings.Contains(logs.String(), `"level":"WARN"`) || !strings.Contains(logs.String(), "spend rate above its alert threshold") {
		t.Errorf("no WARN logged: %s", logs.String())
	}
	// Nothing new: no POST.
	if evs, err := a.Tick(ctx, t0.Add(2*time.Second)); len(evs) != 0 || err != nil {
		t.Fatalf("second Tick = %+v, %v", evs, err)
	}
	evs, err = a.Tick(ctx, t0.Add(7*time.Minute))
	if err != nil || len(evs) != 1 || evs[0].State != spend.AlertResolved {
		t.Fatalf("resolve Tick = %+v, %v", evs, err)
	}
	if body := <-got; body["state"] != "resolved" || body["since"] == nil {
		t.Errorf("resolved body %v", body)
	}
	select {
	case b := <-got:
		t.Errorf("an extra POST: %v", b)
	default:
	}
}

// TestAlerterWebhookFailures: a non-2xx answer and an unreachable receiver
// are errors, counted, logged without the webhook's URL (often a secret).
func TestAlerterWebhookFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusInternalServerError)
	}))
	var logs syncBuffer
	l := newLimiter(t, alertConfig(srv.URL+"/hooks/s3cr3t"), spend.Options{})
	a := spend.NewAlerter(l, spend.AlerterOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	spendUSD(t, l, t0, "x", 6)
	if _, err := a.Tick(context.Background(), t0); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("a 500 from the webhook: %v", err)
	}
	srv.Close()
	spendUSD(t, l, t0.Add(10*time.Minute), "x", 6) // a new crossing, after a resolve
	if evs, err := a.Tick(context.Background(), t0.Add(6*time.Minute)); len(evs) != 1 || err == nil {
		t.Fatalf("resolve to a closed receiver: %v %v", evs, err)
	} else if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the error shows the webhook URL: %v", err)
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Errorf("the log shows the webhook URL: %s", logs.String())
	}
	if n := strings.Count(logs.String(), "spend alert webhook failed"); n != 2 {
		t.Errorf("%d failures logged, want 2: %s", n, logs.String())
	}
}

// roundTripper is an in-memory webhook receiver for tests inside a synctest
// bubble (real sockets are not part of the bubble's virtual time).
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAlerterRun runs the shell on its ticker in virtual time: the alert
// reaches the webhook within one alert_interval of the crossing, a receiver
// that hangs (longer than the interval) is cut off by alert_timeout without
// holding up the evaluations meanwhile, and Run returns when its context
// ends, leaving no goroutine behind.
func TestAlerterRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		posts := make(chan spend.AlertEvent, 4)
		var calls int
		hook := roundTripper(func(r *http.Request) (*http.Response, error) {
			var ev spend.AlertEvent
			if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
				return nil, err
			}
			calls++         // the sender is one goroutine: no race
			if calls == 1 { // the first delivery hangs until the timeout cuts it
				<-r.Context().Done()
				posts <- ev
				return nil, r.Context().Err()
			}
			posts <- ev
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
		})
		cfg := alertConfig("http://hooks.invalid/alert")
		cfg.AlertInterval = spend.Duration(10 * time.Second)
		cfg.AlertTimeout = spend.Duration(25 * time.Second)
		l := newLimiter(t, cfg, spend.Options{})
		a := spend.NewAlerter(l, spend.AlerterOptions{
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Client: &http.Client{Transport: hook},
		})
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- a.Run(ctx) }()

		time.Sleep(4 * time.Second)        // virtual time: between two ticks
		spendUSD(t, l, time.Now(), "x", 6) // global: $72/h ≥ $60/h
		time.Sleep(8 * time.Second)
		spendUSD(t, l, time.Now(), "acme", 1) // acme: $12/h ≥ $9.6/h
		time.Sleep(9 * time.Second)           // t=21s: the tick at 20s has run while the first POST hangs
		if acme := findScope(l.Snapshot(time.Now()).Tenants, "acme"); !acme.Alerting {
			t.Error("the evaluation at 20s waited for the hung webhook")
		}
		receive := func() spend.AlertEvent {
			select {
			case ev := <-posts:
				return ev
			case <-time.After(time.Minute): // virtual: fails fast instead of hanging
				t.Fatal("no webhook POST within a minute")
				return spend.AlertEvent{}
			}
		}
		first, second := receive(), receive()
		if first.Scope != "global" || first.State != spend.AlertFired || first.At.Sub(start) != 10*time.Second {
			t.Errorf("first event %+v at %v, want global fired at 10s (6s after the crossing)", first, first.At.Sub(start))
		}
		if second.Tenant != "acme" || second.At.Sub(start) != 20*time.Second {
			t.Errorf("second event %+v at %v, want acme at 20s", second, second.At.Sub(start))
		}
		if got := time.Since(start); got != 35*time.Second {
			t.Errorf("the hung POST was cut at %v, want 35s (10s + alert_timeout)", got)
		}
		if fails := webhookFailures(t, l); fails != 1 {
			t.Errorf("%v webhook failures counted, want 1 (the timeout)", fails)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	})
}
