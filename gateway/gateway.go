package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// Gateway is an OpenAI-compatible reverse proxy that puts an admission gate
// in front of the provider. It is an http.Handler a Go program can mount;
// AdminHandler serves its metrics and state. Safe for concurrent use.
type Gateway struct {
	cfg      Config
	gate     *admission.Gate
	tenants  *tenants
	upstream *url.URL
	apiKey   string // the provider's key: never logged, never returned
	proxy    *httputil.ReverseProxy
	metrics  *metrics
	log      *slog.Logger
	draining atomic.Bool
	budgets  *budgets
	limit    *aimd
	spend    *spend.Limiter // nil without a spend section
	alerter  *spend.Alerter
}

var _ http.Handler = (*Gateway)(nil)

// Options are the parts of a gateway that are not configuration.
type Options struct {
	// Logger receives the gateway's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Transport carries upstream calls. Nil means a transport tuned for one
	// busy upstream (upstream.max_idle_conns idle connections to it).
	Transport http.RoundTripper
	// Getenv reads the provider key's variable. Nil means os.Getenv.
	Getenv func(string) string
}

// New builds a gateway from a validated config.
func New(cfg Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	acfg, err := cfg.admissionConfig()
	if err != nil {
		return nil, err
	}
	gate, err := admission.New(acfg)
	if err != nil {
		return nil, err
	}
	ts, err := newTenants(cfg.Tenants)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	up, _ := url.Parse(cfg.Upstream.URL) // validated
	g := &Gateway{cfg: cfg, gate: gate, tenants: ts, upstream: up, log: opts.Logger}
	if g.log == nil {
		g.log = slog.Default()
	}
	if cfg.Upstream.APIKeyEnv != "" {
		getenv := opts.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		g.apiKey = getenv(cfg.Upstream.APIKeyEnv)
		if g.apiKey == "" {
			return nil, fmt.Errorf("config: upstream.api_key_env: the environment variable %s is empty or unset", cfg.Upstream.APIKeyEnv)
		}
	}
	if g.budgets, err = newBudgets(cfg.Retries); err != nil {
		return nil, err
	}
	g.limit = newAIMD(cfg.UpstreamLimit, cfg.Admission.Concurrency)
	if sc, err := cfg.spendConfig(); err != nil {
		return nil, err
	} else if sc != nil {
		if g.spend, err = spend.New(*sc, spend.Options{}); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		g.alerter = spend.NewAlerter(g.spend, spend.AlerterOptions{Logger: g.log})
	}
	transport := opts.Transport
	if transport == nil {
		transport = newTransport(cfg.Upstream.MaxIdleConns)
	}
	transport = &upstream{g: g, base: transport, maxAttempts: cfg.Retries.UpstreamAttempts, backoff: cfg.Retries.UpstreamBackoff.D()}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      transport,
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		// Zero: ReverseProxy flushes streaming responses (text/event-stream,
		// or no Content-Length) after every write by itself, and buffers
		// the rest into as few writes as possible.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
	}
	g.metrics = newMetrics(g)
	if g.spend != nil {
		g.metrics.reg.MustRegister(g.spend.Collector())
	}
	return g, nil
}

func newTransport(idle int) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          idle,
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Gate returns the admission gate, for programs that embed the gateway and
// want to protect other work with the same slots.
func (g *Gateway) Gate() *admission.Gate { return g.gate }

// Registry returns the gateway's Prometheus registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.metrics.reg }

// Drain makes the gateway refuse new work (503 draining) and report not
// ready, so a load balancer moves traffic away while in-flight calls end.
func (g *Gateway) Drain() { g.draining.Store(true) }

// call is one admitted request on its way through the proxy.
type call struct {
	g        *Gateway
	permit   *admission.Permit
	class    string
	tenant   string
	model    string
	body     []byte // replayed by the gateway's own upstream retries
	res      *spend.Reservation
	estimate float64   // the reservation's USD
	deadline time.Time // the caller's
	start    time.Time
	queue    time.Duration
	caller   context.Context // the caller's own context: done when it leaves
	finished atomic.Bool
	meter    *usageMeter // set when the response arrives
	// headersWritten counts the upstream attempts whose request headers
	// were written (trace.WroteHeaders): once they may have reached the
	// provider, a failed attempt is not retried.
	headersWritten atomic.Int32
	trace          httptrace.ClientTrace
}

type callKey struct{}

// finish releases the slot exactly once, with the call's outcome.
func (c *call) finish(result admission.Result) {
	if !c.finished.CompareAndSwap(false, true) {
		return
	}
	d := time.Since(c.start)
	c.permit.Done(admission.Outcome{Result: result, ServiceTime: d})
	c.settleSpend(result, d)
	model := c.g.metrics.models.label(c.model)
	c.g.metrics.serviceTime(model).Observe(d.Seconds())
	if c.meter != nil {
		if u, ok := c.meter.done(); ok {
			tokens := c.g.metrics.modelTokens(model)
			tokens[0].Add(float64(u.Input))
			tokens[1].Add(float64(u.CachedInput))
			tokens[2].Add(float64(u.Output))
		}
	}
}

// ServeHTTP applies admission to the API endpoints and passes other paths
// through.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == EstimatePath:
		g.serveEstimate(w, r)
		return
	case !apiPaths[r.URL.Path] || r.Method != http.MethodPost:
		if g.tenants.identify(r) == nil {
			g.unauthorized(w)
			return
		}
		g.proxy.ServeHTTP(w, r)
		return
	}
	if g.draining.Load() {
		g.refuse(w, &admission.Rejection{Reason: admission.ReasonDraining, RetryAfter: g.cfg.ShutdownGrace.D()}, "", "")
		return
	}
	t := g.tenants.identify(r)
	if t == nil {
		g.unauthorized(w)
		return
	}
	hdr, err := g.parseHeaders(r.Header)
	if err != nil {
		g.badInput(w, err)
		return
	}
	body, err := g.readBody(w, r)
	if err != nil {
		g.badInput(w, err)
		return
	}
	g.metrics.attempt(hdr.attempt).Inc()
	if rej := g.budgets.admit(time.Now(), t.name, hdr.attempt); rej != nil {
		g.refuse(w, rej, hdr.class, t.name)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), hdr.timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	req := admission.Request{
		Class:    hdr.class,
		Tenant:   t.name,
		Tier:     t.tier,
		Attempt:  hdr.attempt,
		Deadline: deadline,
		Key:      body.model,
	}
	sd, ok := g.spendAdmit(w, &req, &body)
	if !ok {
		return
	}
	g.limit.refresh(time.Now(), g) // the climb back up that accrued while idle
	permit, err := g.gate.Acquire(ctx, req)
	if err != nil {
		if sd.Reservation != nil {
			g.spend.Cancel(time.Now(), sd.Reservation)
		}
		var rej *admission.Rejection
		switch {
		case errors.As(err, &rej):
			if r.Context().Err() != nil {
				return // the caller left while waiting: nobody to answer
			}
			g.refuse(w, rej, hdr.class, t.name)
		case r.Context().Err() != nil:
			// The caller left while queued; nothing to write.
		default:
			g.badInput(w, &badRequest{status: http.StatusBadRequest, code: "invalid_request", msg: err.Error()})
		}
		return
	}
	c := &call{g: g, permit: permit, class: hdr.class, tenant: t.name, model: body.model, body: body.raw,
		deadline: deadline, start: time.Now(), queue: permit.QueueTime(), caller: r.Context(),
		res: sd.Reservation, estimate: sd.EstimatedUSD}
	g.metrics.admission(hdr.class, t.name, hdr.attempt).Inc()
	g.metrics.queueTime(hdr.class).Observe(c.queue.Seconds())

	// One trace for the call's upstream attempts, installed before the
	// proxy adds its own: the proxy composes the two once, instead of each
	// attempt composing a trace of its own with the proxy's.
	c.trace.WroteHeaders = c.wroteHeaders
	// A shallow copy: ReverseProxy clones the request again for upstream,
	// and r is not used after this.
	out := r.WithContext(httptrace.WithClientTrace(context.WithValue(ctx, callKey{}, c), &c.trace))
	out.Body = io.NopCloser(bytes.NewReader(body.raw))
	out.ContentLength = int64(len(body.raw))
	out.Header.Set("Content-Length", strconv.Itoa(len(body.raw)))
	g.proxy.ServeHTTP(w, out)
	// The body wrapper released the slot when the body ended; this covers
	// the paths where no body was ever handed over.
	c.finish(admission.Canceled)
}

// bufferPool recycles ReverseProxy's copy buffers: without one it allocates
// 32 KiB per response.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

func attemptKind(attempt int) string {
	if attempt > 0 {
		return "retry"
	}
	return "first"
}

func (c *call) wroteHeaders() { c.headersWritten.Add(1) }

// rewrite turns the caller's request into the provider's: the upstream URL,
// the provider's key in place of the caller's, and no sluice headers.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.upstream)
	pr.Out.Host = g.upstream.Host
	h := pr.Out.Header
	for _, name := range []string{HeaderPriority, HeaderTimeoutMs, HeaderAttempt} {
		h.Del(name)
	}
	if g.apiKey != "" {
		h.Del("Authorization")
		h.Del("X-Api-Key")
		if g.cfg.Upstream.AuthHeader == "x-api-key" {
			h.Set("X-Api-Key", g.apiKey)
		} else {
			h.Set("Authorization", "Bearer "+g.apiKey)
		}
	}
}

// modifyResponse stamps the contract's headers on a proxied response and
// wraps its body so that the slot is released when the body ends.
func (g *Gateway) modifyResponse(resp *http.Response) error {
	c, _ := resp.Request.Context().Value(callKey{}).(*call)
	if c == nil {
		return nil // a pass-through path
	}
	resp.Header.Set(HeaderQueueMs, strconv.FormatInt(c.queue.Milliseconds(), 10))
	resp.Header.Set(HeaderModel, c.model)
	g.metrics.response(c.class, resp.StatusCode).Inc()
	result := admission.Success
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		result = admission.Failure
	}
	c.meter = newUsageMeter(resp.Header.Get("Content-Type"))
	resp.Body = &releasingBody{ReadCloser: resp.Body, c: c, result: result}
	return nil
}

// proxyError answers when no upstream response reached the caller.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	c, _ := r.Context().Value(callKey{}).(*call)
	callerGone := c != nil && c.caller.Err() != nil
	switch {
	case callerGone:
		c.finish(admission.Canceled)
		g.metrics.responses.WithLabelValues(c.class, "0").Inc()
		return // nobody to answer
	case errors.Is(err, context.DeadlineExceeded):
		if c != nil {
			c.finish(admission.Canceled)
			g.metrics.responses.WithLabelValues(c.class, "0").Inc()
		}
		writeError(w, http.StatusGatewayTimeout, "timeout_error", "deadline_exceeded",
			"the request's deadline (X-Sluice-Timeout-Ms) passed before the provider answered; the upstream call was cancelled")
		return
	}
	if c != nil {
		c.finish(admission.Failure)
		g.metrics.responses.WithLabelValues(c.class, "0").Inc()
	}
	g.log.Warn("upstream call failed", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusBadGateway, "upstream_error", "upstream_unreachable",
		"the provider could not be reached: "+err.Error())
}

func (g *Gateway) refuse(w http.ResponseWriter, rej *admission.Rejection, class, tenant string) {
	g.metrics.rejections.WithLabelValues(reasonLabel(rej.Reason), class, tenant).Inc()
	writeRejection(w, rej)
}

func (g *Gateway) badInput(w http.ResponseWriter, err error) {
	code := "invalid_request"
	var br *badRequest
	if errors.As(err, &br) {
		code = br.code
	}
	g.metrics.badInput.WithLabelValues(code).Inc()
	writeBadRequest(w, err)
}

func (g *Gateway) unauthorized(w http.ResponseWriter) {
	g.metrics.badInput.WithLabelValues("invalid_api_key").Inc()
	writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
		"missing or unknown API key (Authorization: Bearer <key>)")
}
