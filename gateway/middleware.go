package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/wire"
)

// MiddlewareConfig configures Middleware.
type MiddlewareConfig struct {
	// Classes are the accepted X-Sluice-Priority values with their default
	// timeouts. Empty means the gateway's defaults (interactive 30s, batch
	// 5m, speculative 10s). Ranks come from the gate.
	Classes map[string]config.ClassConfig
	// DefaultClass is the class of a request without X-Sluice-Priority.
	// Empty means interactive.
	DefaultClass string
	// MaxTimeout bounds X-Sluice-Timeout-Ms. Zero means 10m.
	MaxTimeout time.Duration
	// Tenant names the tenant of a request. Nil means one anonymous tenant.
	Tenant func(*http.Request) (name string, tier admission.Tier)
	// Key names the service-time statistics a request belongs to (for
	// example its route). Nil means the request's path.
	Key func(*http.Request) string
}

// Middleware protects a Go service's own handlers with a gate, speaking the
// same contract as the gateway: the X-Sluice-* request headers, and
// refusals with 503/429, Retry-After, the reason and the estimated wait. The
// slot is held while the wrapped handler runs.
func Middleware(gate *admission.Gate, cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	gc := config.Config{Classes: cfg.Classes, DefaultClass: cfg.DefaultClass, Limits: config.LimitsConfig{MaxTimeout: config.Duration(cfg.MaxTimeout)}}.WithDefaults()
	if _, ok := gc.Classes[gc.DefaultClass]; !ok {
		return nil, errors.New("gateway: MiddlewareConfig.DefaultClass is not one of Classes")
	}
	for name := range gc.Classes {
		if _, err := gate.Rank(admission.Request{Class: name}); err != nil {
			return nil, errors.New("gateway: MiddlewareConfig.Classes: the gate has no rank for class " + name)
		}
	}
	parser := &Gateway{cfg: gc}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hdr, err := parser.parseHeaders(r.Header)
			if err != nil {
				wire.WriteBadRequest(w, err)
				return
			}
			req := admission.Request{Class: hdr.class, Attempt: hdr.attempt, Tenant: contract.AnonymousTenant, Key: r.URL.Path}
			if cfg.Tenant != nil {
				req.Tenant, req.Tier = cfg.Tenant(r)
			}
			if cfg.Key != nil {
				req.Key = cfg.Key(r)
			}
			ctx, cancel := context.WithTimeout(r.Context(), hdr.timeout)
			defer cancel()
			permit, err := gate.Acquire(ctx, req)
			if err != nil {
				var rej *admission.Rejection
				if errors.As(err, &rej) && r.Context().Err() == nil {
					wire.WriteRejection(w, rej)
				}
				return
			}
			result := admission.Success
			defer func() { permit.Done(admission.Outcome{Result: result}) }()
			w.Header().Set(contract.HeaderQueueMs, strconv.FormatInt(permit.QueueTime().Milliseconds(), 10))
			next.ServeHTTP(w, r.WithContext(ctx))
			if ctx.Err() != nil {
				result = admission.Canceled
			}
		})
	}, nil
}
