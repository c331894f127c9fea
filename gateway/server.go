package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/gateway/guard"
)

// Server runs a gateway on its two listeners.
type Server struct {
	Gateway *Gateway
	// API and Admin are the bound listeners; their addresses are known
	// once Listen returns (port 0 picks a free port).
	API, Admin net.Listener
	// AdminHandler is what the admin listener serves: the gateway's
	// AdminHandler unless replaced (before Serve) by one that adds to it —
	// `sluice serve` mounts the runtime's profiles there when admin_pprof is
	// set, so that this package need not import net/http/pprof, whose init
	// would publish them on http.DefaultServeMux of every program that
	// embeds the gateway.
	AdminHandler http.Handler
	log          *slog.Logger
	grace        time.Duration
	limits       guard.Limits
}

// Listen binds the proxy and admin addresses of the config. An admin
// address off loopback is allowed, with a warning: it exposes tenants and
// state to whoever can reach it.
func Listen(g *Gateway) (*Server, error) {
	limits, err := g.cfg.Server.Limits(g.cfg.Limits.MaxBodyBytes, g.log)
	if err != nil {
		return nil, err
	}
	limits.Anonymous = g.anonymous
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	api := guard.NewListener(ln, limits, g.log, g.metrics.reg)
	admin, err := net.Listen("tcp", g.cfg.Admin)
	if err != nil {
		api.Close()
		return nil, fmt.Errorf("admin: %w", err)
	}
	if host, _, _ := net.SplitHostPort(g.cfg.Admin); !isLoopback(host) {
		g.log.Warn("the admin listener is not on loopback: /metrics and /admin/v1/state are reachable from the network", "admin", g.cfg.Admin)
	}
	return &Server{Gateway: g, API: api, Admin: admin, AdminHandler: g.AdminHandler(), log: g.log, grace: g.cfg.ShutdownGrace.D(), limits: limits}, nil
}

// anonymous says no request needs a key (no tenants configured, as the
// last reload left them): the guard then counts no connection as
// unauthenticated.
func (g *Gateway) anonymous() bool {
	_, _, ok := g.chain.Identify("")
	return ok
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves until ctx ends, then shuts down gracefully: new requests are
// refused with 503 draining, /readyz turns 503, and in-flight requests get
// the grace period to finish. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context) error {
	// No WriteTimeout: it is a deadline for a whole response, and would
	// cut a stream that legitimately runs for minutes; the guard's
	// listener gives each write a deadline of its own instead. No
	// ReadTimeout: guard.Middleware sets the body's deadline per request,
	// from the end of the headers, where ReadTimeout would count the time
	// the headers took too.
	api := &http.Server{
		Handler:           guard.Middleware(s.Gateway, s.limits, s.Gateway.identified, s.Gateway.maxBodyBytes),
		ReadHeaderTimeout: s.limits.ReadHeader,
		IdleTimeout:       s.limits.Idle,
		MaxHeaderBytes:    s.Gateway.ServerMaxHeaderBytes(),
		ConnContext:       guard.ConnContext,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// No ReadTimeout: its deadline would cut the dashboard's event stream.
	admin := &http.Server{Handler: s.AdminHandler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.limits.Idle}
	errs := make(chan error, 2)
	go func() { errs <- api.Serve(s.API) }()
	go func() { errs <- admin.Serve(s.Admin) }()
	alertCtx, stopAlerts := context.WithCancel(context.Background())
	alertsDone := make(chan struct{})
	go func() {
		defer close(alertsDone)
		s.Gateway.runBackground(alertCtx) // alerts and the store's sync or snapshots
	}()
	defer func() {
		stopAlerts()
		<-alertsDone
	}()
	defer s.Gateway.startDashboard()() // its event streams end, and its goroutine is waited for, on return
	// The batches' items stop starting when the drain begins; the running
	// ones get the grace period, like live calls.
	batchDone := make(chan struct{})
	go func() {
		defer close(batchDone)
		if err := s.Gateway.RunBatch(ctx); err != nil {
			s.log.Error("closing the batch store failed", "err", err)
		}
	}()
	defer func() { <-batchDone }()
	s.log.Info("sluice gateway serving", "listen", s.API.Addr().String(), "admin", s.Admin.Addr().String(),
		"upstream", s.Gateway.deps[0].url.Redacted(), "deployments", len(s.Gateway.deps), "pools", len(s.Gateway.pools), "concurrency", concurrencyText(s.Gateway.cfg.Admission.Concurrency), "max_queue", *s.Gateway.cfg.Admission.MaxQueue,
		"read_header_timeout", s.limits.ReadHeader, "read_body_timeout", s.limits.ReadBody, "idle_timeout", s.limits.Idle,
		"write_timeout", s.limits.Write, "max_connections", s.limits.MaxConns, "max_unauthenticated_per_ip", s.limits.MaxUnauthPerIP,
		"fd_limit", s.limits.FDLimit)

	select {
	case err := <-errs:
		api.Close()
		admin.Close()
		return err
	case <-ctx.Done():
	}
	s.log.Info("draining: refusing new requests, waiting for in-flight ones", "grace", s.grace)
	s.Gateway.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	// Keep the listener open while admitted work finishes, so that callers
	// get 503 draining with a Retry-After — an answer they can act on —
	// rather than a refused connection.
	tick := time.NewTicker(25 * time.Millisecond)
	for st := s.Gateway.stats(); st.InFlight+st.Queued > 0 && shutdownCtx.Err() == nil; st = s.Gateway.stats() {
		select {
		case <-tick.C:
		case <-shutdownCtx.Done():
		}
	}
	tick.Stop()
	err := api.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("grace period over: closing the remaining connections")
		api.Close()
		err = nil
	}
	admin.Close()
	for range 2 {
		if e := <-errs; e != nil && !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
		}
	}
	s.log.Info("stopped")
	return err
}

// concurrencyText is the start line's concurrency: the number configured,
// or "learned" when none is and each pool learns its own (package
// adaptive), rather than a 0 that reads as no slots at all.
func concurrencyText(n int) string {
	if n == 0 {
		return "learned"
	}
	return strconv.Itoa(n)
}
