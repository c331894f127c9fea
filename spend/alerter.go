package spend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// AlerterOptions are the parts of an Alerter that are not configuration.
type AlerterOptions struct {
	// Logger receives a WARN for each fired alert, an INFO for each
	// resolved one, and webhook failures. Nil means slog.Default().
	Logger *slog.Logger
	// Client posts to the webhook. Nil means a client of its own; each
	// POST is bounded by alert_timeout either way.
	Client *http.Client
	// Claim, when set, is asked before each webhook POST whether this
	// process is the one to deliver the event; false skips the POST (the
	// log line stays). Replicas sharing their books share the alerts too,
	// and Claim is how they send each crossing once for the cluster. Nil
	// means every event is delivered.
	Claim func(ctx context.Context, ev AlertEvent) bool
}

// Alerter is the shell around EvaluateAlerts: every alert_interval it
// evaluates the Limiter's alerts at the current time, logs each event and
// POSTs it as JSON to the alert webhook. It is the only part of the package
// that reads the clock or runs a goroutine. Safe for concurrent use.
type Alerter struct {
	l       *Limiter
	log     *slog.Logger
	client  *http.Client
	webhook string
	claim   func(context.Context, AlertEvent) bool
}

// queueLen bounds the events waiting for the webhook. A webhook slower than
// alerts arrive loses the excess (logged), never the evaluation schedule.
const queueLen = 64

// NewAlerter returns an Alerter for l, posting to l's configured webhook.
func NewAlerter(l *Limiter, opts AlerterOptions) *Alerter {
	a := &Alerter{l: l, log: opts.Logger, client: opts.Client, webhook: l.cfg().webhook, claim: opts.Claim}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.client == nil {
		a.client = &http.Client{}
	}
	return a
}

// Run evaluates alerts every alert_interval until ctx is done, then returns
// once its webhook sender has stopped. Webhook POSTs run on a separate
// goroutine, so a slow receiver never delays an evaluation.
func (a *Alerter) Run(ctx context.Context) error {
	queue := make(chan AlertEvent, queueLen)
	var wg sync.WaitGroup
	if a.webhook != "" {
		wg.Go(func() {
			for ev := range queue {
				_ = a.post(ctx, ev)
			}
		})
	}
	defer func() {
		close(queue)
		wg.Wait()
	}()
	tick := time.NewTicker(a.l.cfg().interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for _, ev := range a.evaluate(a.l.now()) {
			if a.webhook == "" {
				continue
			}
			select {
			case queue <- ev:
			default:
				a.log.Warn("spend alert webhook queue full: event dropped", "scope", ev.Scope, "tenant", ev.Tenant, "state", ev.State)
				a.l.noteWebhookFailure()
			}
		}
	}
}

// Tick evaluates the alerts once at now, logs the events and POSTs each to
// the webhook before returning them. It is Run's step for a caller with a
// loop of its own; the first webhook error is returned after every event
// was tried.
func (a *Alerter) Tick(ctx context.Context, now time.Time) ([]AlertEvent, error) {
	events := a.evaluate(now)
	var first error
	if a.webhook != "" {
		for _, ev := range events {
			if err := a.post(ctx, ev); err != nil && first == nil {
				first = err
			}
		}
	}
	return events, first
}

func (a *Alerter) evaluate(now time.Time) []AlertEvent {
	events := a.l.EvaluateAlerts(now)
	for _, ev := range events {
		attrs := []any{"scope", ev.Scope, "rate_per_hour", ev.RatePerHour, "threshold_per_hour", ev.ThresholdPerHour}
		if ev.Tenant != "" {
			attrs = append(attrs, "tenant", ev.Tenant)
		}
		if ev.State == AlertFired {
			top := make([]string, len(ev.TopTenants))
			for i, s := range ev.TopTenants {
				top[i] = fmt.Sprintf("%s=%.4g", s.Name, s.RatePerHour)
			}
			a.log.Warn("spend rate above its alert threshold", append(attrs, "top_tenants", top)...)
		} else {
			a.log.Info("spend rate back below its alert threshold", attrs...)
		}
	}
	return events
}

// post delivers one event, bounded by alert_timeout.
func (a *Alerter) post(ctx context.Context, ev AlertEvent) error {
	if a.claim != nil && !a.claim(ctx, ev) {
		return nil
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.l.cfg().timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.webhook, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			err = fmt.Errorf("spend: alert webhook answered %s", resp.Status)
		}
	}
	if err != nil {
		// The webhook's URL is often its secret (chat webhooks are); an
		// *url.Error would print it, so only its cause is kept.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("spend: alert webhook: %s: %w", ue.Op, ue.Err)
		}
		a.l.noteWebhookFailure()
		a.log.Warn("spend alert webhook failed", "scope", ev.Scope, "tenant", ev.Tenant, "state", ev.State, "err", err)
	}
	return err
}

func (l *Limiter) noteWebhookFailure() {
	l.mu.Lock()
	l.mu.webhookFails++
	l.mu.Unlock()
}
