package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/contract"
	"github.com/sluicehq/sluice/gateway/batchapi"
	"github.com/sluicehq/sluice/gateway/cluster"
	"github.com/sluicehq/sluice/gateway/idempotency"
	"github.com/sluicehq/sluice/gateway/wire"
	"github.com/sluicehq/sluice/spend"
)

// Gateway is an OpenAI-compatible reverse proxy that puts an admission gate
// in front of the provider. It is an http.Handler a Go program can mount;
// AdminHandler serves its metrics and state. Safe for concurrent use.
type Gateway struct {
	cfg      config.Config
	chain    *chain.Chain
	deps     []*deployment  // where calls go (pools.go)
	pools    []*gatewayPool // the route stage's pools: one with upstream:
	routes   *routes
	upstream *upstream // the provider's transport and the gateway's own retries (retry.go)
	metrics  *metrics
	log      *slog.Logger
	draining atomic.Bool
	spend    *spend.Limiter // the chain's; nil without a spend section
	alerter  *spend.Alerter
	books    *cluster.Books     // where the spend books live, the lease (package cluster, cluster.go)
	idem     *idempotency.Store // Idempotency-Key (package idempotency)
	reload   *reloader          // policies changed without a restart (reload.go)
	batch    *batchapi.API      // the Batch API (package batchapi, batch.go); nil when off
	cpu      *saturated         // shedding when the gateway's own CPU is saturated (saturated.go); nil when off

	tracer trace.Tracer // nil when tracing is off (trace.go)
}

var _ http.Handler = (*Gateway)(nil)

// Options are the parts of a gateway that are not configuration.
type Options struct {
	// Logger receives the gateway's logs, the access log's line per
	// request among them (accesslog.go), at Info: a handler at Warn keeps
	// the warnings without the lines. Nil means slog.Default().
	Logger *slog.Logger
	// Transport carries upstream calls. Nil means a transport tuned for one
	// busy upstream (upstream.max_idle_conns idle connections to it).
	Transport http.RoundTripper
	// Getenv reads the provider key's variable. Nil means os.Getenv.
	Getenv func(string) string
	// ConfigSource re-reads the configuration for Reload (POST
	// /admin/v1/reload, and SIGHUP in sluice serve). Nil means there is
	// nothing to re-read: a reload is refused.
	ConfigSource func() (config.Config, error)
	// TracerProvider receives a span per request, with child spans for
	// the admission wait and each upstream attempt (trace.go). Nil, or a
	// noop provider, means no tracing, at no cost.
	TracerProvider trace.TracerProvider
}

// New builds a gateway from a validated config.
func New(cfg config.Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	written := cfg // as written, for reloads to name what they change
	cfg = cfg.WithDefaults()
	g := &Gateway{cfg: cfg, log: opts.Logger, routes: newRoutes(cfg.Passthrough), tracer: newTracer(opts.TracerProvider)}
	if g.log == nil {
		g.log = slog.Default()
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var err error
	if g.deps, err = openDeployments(cfg, getenv); err != nil {
		return nil, err
	}
	g.books = cluster.NewBooks(cfg.Store, opts.Getenv, g.log)
	if sc, err := cfg.SpendConfig(); err != nil {
		return nil, err
	} else if sc != nil {
		ledger, err := g.books.OpenLedger()
		if err != nil {
			return nil, err
		}
		if g.spend, err = spend.New(*sc, spend.Options{Ledger: ledger}); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		g.alerter = spend.NewAlerter(g.spend, spend.AlerterOptions{Logger: g.log, Claim: g.books.AlertClaim()})
	}
	ccfg, err := cfg.Chain(g.spend)
	if err != nil {
		return nil, err
	}
	if g.chain, err = chain.New(ccfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	learning := cfg.Learning()
	for i, p := range g.chain.Pools() {
		d := g.deps[slices.IndexFunc(g.deps, func(d *deployment) bool { return d.name == p.Deployment })]
		limit, err := newLimit(cfg.UpstreamLimit, p.Gate.Stats().Concurrency, learning[i], time.Now())
		if err != nil {
			return nil, err
		}
		g.pools = append(g.pools, &gatewayPool{info: p, dep: d, limit: limit, set: g.poolSetter(i), trial: g.poolTrial(i)})
	}
	if err := g.books.OpenLease(clusterPools{g}); err != nil { // the cluster's concurrency (cluster.go)
		return nil, err
	}
	transport := opts.Transport
	if transport == nil {
		transport = newTransport(cfg.Upstream.MaxIdleConns)
	}
	g.upstream = &upstream{g: g, base: transport, maxAttempts: cfg.Retries.UpstreamAttempts, backoff: cfg.Retries.UpstreamBackoff}
	g.metrics = newMetrics(g)
	g.cpu = newSaturated(cfg.Server.Saturation, g.metrics.reg)
	g.idem = idempotency.New(cfg.Idempotency, g.metrics.reg, idempotency.Deps{ // Idempotency-Key
		WriteError: wire.WriteJSONError,
		BadInput:   func(code string) { g.metrics.badInput.WithLabelValues(code).Inc() },
	})
	g.reload = newReloader(g, written, opts.ConfigSource)
	if g.spend != nil {
		g.metrics.reg.MustRegister(g.spend.Collector())
	}
	g.books.Register(g.metrics.reg)
	if g.batch, err = g.openBatch(); err != nil { // last: nothing fails after the store is open
		return nil, err
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
		// Every upstream connection keeps its write buffer for as long as
		// it lives, and an open stream's for as long as the stream runs,
		// though it is written to once per call: a request's headers
		// (a body of its size or more is written through it, past the
		// buffer). 1 KiB rather than net/http's 4 KiB holds 3 KiB less a
		// stream, for at most one more write(2) a call.
		WriteBufferSize: 1 << 10,
	}
}

// Gate returns the admission gate of the first pool — the only one with
// `upstream:` — for programs that embed the gateway and want to protect
// other work with the same slots.
func (g *Gateway) Gate() *admission.Gate { return g.chain.Gate() }

// Registry returns the gateway's Prometheus registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.metrics.reg }

// Drain makes the gateway refuse new work (503 draining) and report not
// ready, so a load balancer moves traffic away while in-flight calls end.
func (g *Gateway) Drain() { g.draining.Store(true) }

// call is one admitted request on its way through the proxy.
type call struct {
	g      *Gateway
	permit *chain.Permit
	class  string
	tenant string
	model  string // the model called: the chain may have degraded it
	body   []byte // replayed by the gateway's own upstream retries
	// maxTokens is the body's max_tokens (or its spellings); 0 if none.
	maxTokens int64
	unbilled  bool          // a pass-through call that is not priced
	deadline  time.Time     // the caller's
	budget    time.Duration // the caller's time budget, deadline less arrival: the headroom's calls are like it
	start     time.Time
	queue     time.Duration
	caller    context.Context // the caller's own context: done when it leaves
	finished  atomic.Bool
	meter     *wire.UsageMeter    // set when the response arrives
	copyBuf   *[]byte             // the proxy's copy buffer, while it has one (callBuffers)
	idem      *idempotency.Flight // the Idempotency-Key's capture; nil without a key
	// For the access log and the span (accesslog.go): the request's
	// exchange, how the call ended, the upstream attempts made and the
	// provider's own request id.
	x          *exchange
	outcome    chain.Outcome
	ended      ending          // who ended the call (ending.go)
	upCtx      context.Context // the provider's call's context: its cause names the deadline that cut it
	stated     bool            // the deadline is the caller's X-Sluice-Timeout-Ms
	attempts   int
	upstreamID string
	// headersWritten counts the upstream attempts whose request headers
	// were written (trace.WroteHeaders): once they may have reached the
	// provider, a failed attempt is not retried.
	headersWritten atomic.Int32
	trace          httptrace.ClientTrace
	// in is the caller's request, which a failover points again at
	// another deployment (retry.go).
	in *http.Request
	// proxy forwards the call: a ReverseProxy of its own whose hooks are
	// the call's methods (forward), so that the call's state reaches them
	// as their receiver, never through the request's context.
	proxy httputil.ReverseProxy
	// How a failed call failed, for its pool's health: the provider
	// refused it for its rate limits (429), or could not be reached.
	rateLimited, unreachable bool
}

// finish releases the slot exactly once, with the call's outcome and who
// ended it.
func (c *call) finish(result admission.Result, end ending) {
	if !c.finished.CompareAndSwap(false, true) {
		return
	}
	c.ended = end
	c.g.metrics.ended[end].Inc()
	d := time.Since(c.start)
	o := chain.Outcome{Result: result, ServiceTime: d, RateLimited: c.rateLimited, Unreachable: c.unreachable}
	if c.unbilled {
		// Its service time is not an LLM call's: it must not move the
		// estimates. The slot is given back all the same.
		o.Result = admission.Unused
	}
	if c.meter != nil {
		if u, ok := c.meter.Done(); ok {
			o.Usage, o.UsageKnown = u, true
		}
	}
	c.outcome = o
	c.outcome.Result = result
	if err := c.permit.Done(o); err != nil {
		c.g.log.Warn("settling a call failed", "model", c.model, "request_id", c.x.requestID(), "err", err)
	}
	model := c.g.metrics.models.label(c.model)
	c.g.metrics.serviceTime(model).Observe(d.Seconds())
	if o.UsageKnown {
		tokens := c.g.metrics.modelTokens(model)
		tokens[0].Add(float64(o.Usage.Input))
		tokens[1].Add(float64(o.Usage.CachedInput))
		tokens[2].Add(float64(o.Usage.Output))
	}
}

// ServeHTTP admits calls to the gated APIs and to the paths the config
// passes through, and refuses every other path (see routes.go): nothing is
// forwarded that the chain did not admit.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x, r := g.begin(w, r) // X-Request-Id, the access log and the span (accesslog.go)
	defer g.end(x)
	w = x
	// A caller of Anthropic's API reads the gateway's errors in its shape.
	x.anthropic = isAnthropicPath(r.URL.Path)
	if headerBytes(r) > g.cfg.Limits.MaxHeaderBytes {
		g.headersTooLarge(w)
		return
	}
	if r.URL.Path == contract.EstimatePath {
		x.route = contract.EstimatePath
		g.serveEstimate(w, r, false)
		return
	}
	rt := g.routes.match(r.URL.Path)
	if rt != nil {
		x.route = rt.path
	}
	if neverForwarded(r.Method) {
		g.methodNotAllowed(w, rt)
		return
	}
	tenant, tier, ok := g.identify(r)
	if !ok {
		g.unauthorized(w)
		return
	}
	x.tenant = tenant
	switch {
	case rt == nil:
		g.notFound(w, r)
		return
	case !rt.allows(r.Method):
		g.methodNotAllowed(w, rt)
		return
	}
	if g.draining.Load() {
		g.refuse(w, &admission.Rejection{Reason: admission.ReasonDraining, RetryAfter: g.cfg.ShutdownGrace.D()}, "", "")
		return
	}
	if rt.batchAPI {
		g.serveBatchAPI(w, r, tenant)
		return
	}
	g.serveCall(w, r, rt, tenant, tier)
}

// serveCall runs one call through the chain and, admitted, to the provider.
func (g *Gateway) serveCall(w http.ResponseWriter, r *http.Request, rt *route, tenant string, tier admission.Tier) {
	hdr, err := g.parseHeaders(r.Header)
	if err != nil {
		g.badInput(w, err)
		return
	}
	x := exchangeOf(w)
	x.asked(hdr.class, hdr.attempt)
	if rt.class != "" {
		hdr.class = rt.class
	}
	refused, wouldShed := g.cpu.refuse(g, w, hdr, tier, tenant)
	if refused {
		return
	}
	body, err := g.readBody(w, r, rt.billed)
	if err != nil {
		g.badInput(w, err)
		return
	}
	x.askedModel(body.model)
	g.metrics.attempt(hdr.attempt).Inc()
	g.metrics.recognised.declared(hdr.attemptBy)
	// The call's one deadline: ctx's, from X-Sluice-Timeout-Ms or the
	// class's default. The chain reads it from ctx (and the permit's
	// Request carries it back); nothing sets it a second way.
	ctx, cancel := context.WithTimeout(r.Context(), hdr.timeout)
	defer cancel()
	// Idempotency-Key (package idempotency): a duplicate is answered here,
	// without entering the chain; the first request makes the call and its
	// answer is captured on the way to its caller. Whatever does not
	// complete the capture (a refusal, a failure, a cut stream) drops it.
	idem, handled := g.idem.Admit(ctx, w, r, tenant, body.raw, body.stream)
	if handled {
		return
	}
	defer idem.Abandon()
	req := chain.Request{
		Tenant:          tenant,
		Tier:            tier,
		Class:           hdr.class,
		Attempt:         hdr.attempt,
		AttemptDeclared: hdr.declared,
		Fingerprint:     fingerprint(r.URL.Path, rt.billed, body.raw), // a retry sent without a header (seen.go)
		Model:           body.model,
		MaxOutputTokens: body.maxTokens,
		Unpriced:        !rt.billed,
		AllowDegrade:    hdr.degrade,
		Caller:          g.caller(r, tenant),
		Endpoint:        r.URL.Path,
	}
	if wouldShed != nil {
		req.Would = wouldShed // observed: shed on the gateway's CPU before any stage
	}
	if rt.billed {
		// Priced by the spend stage, charged against its pool's tokens
		// per minute by the route stage.
		req.InputTokens = spend.EstimateInputTokens(body.raw)
	}
	req.Flavour = config.FlavourOpenAI
	if x != nil && x.anthropic {
		req.Flavour = config.FlavourAnthropic
	}
	g.refreshLimits(time.Now()) // the climb back up that accrued while idle
	// chain.Acquire, in a span of its own when tracing (trace.go).
	permit, err := g.acquire(ctx, req)
	if err != nil {
		var rej *admission.Rejection
		switch {
		case errors.As(err, &rej):
			if r.Context().Err() != nil {
				return // the caller left while waiting: nobody to answer
			}
			g.stampHeadroom(w.Header(), &req, hdr.timeout, false)
			g.refuse(w, rej, hdr.class, tenant)
		case r.Context().Err() != nil:
			// The caller left while queued; nothing to write.
		default:
			if br := chainBadInput(err, tenant, body.model, contract.HeaderPriority); br != nil {
				g.badInput(w, br)
				return
			}
			g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_request", Msg: err.Error()})
		}
		return
	}
	admitted := permit.Request()
	deadline := admitted.Deadline
	hdr.class = admitted.Class // the class applied, which the tenant may not have asked for
	if sent := servedModel(admitted); sent != body.model && sent != "" && body.model != "" {
		// Degraded (by spend or load), or an alias its deployment knows
		// by another name.
		raw, err := rewriteModel(body.raw, sent)
		if err != nil { // the body was parsed already: cannot happen
			permit.Drop()
			g.badInput(w, &wire.BadRequest{Status: http.StatusBadRequest, Code: "invalid_json", Msg: err.Error()})
			return
		}
		body.raw, body.model = raw, sent
	}
	if admitted.Degraded {
		g.metrics.degraded.WithLabelValues(admitted.DegradedBy).Inc()
	}
	if admitted.Observe {
		g.metrics.would.count(admitted, hdr.class)
	}
	c := &call{g: g, permit: permit, class: hdr.class, tenant: tenant, model: body.model, body: body.raw, maxTokens: body.maxTokens,
		unbilled: !rt.billed, deadline: deadline, budget: hdr.timeout, start: time.Now(), queue: permit.QueueTime(), caller: r.Context(),
		idem: idem, x: x, in: r}
	if x != nil {
		x.call = c
	}
	g.metrics.admission(hdr.class, tenant, admitted.Attempt).Inc() // a retry the chain recognised counts as one
	g.metrics.queueTime(hdr.class).Observe(c.queue.Seconds())

	// One trace for the call's upstream attempts, installed before the
	// proxy adds its own: the proxy composes the two once, instead of each
	// attempt composing a trace of its own with the proxy's.
	c.trace.WroteHeaders = c.wroteHeaders
	// A shallow copy: ReverseProxy clones the request again for upstream,
	// and r is not used after this.
	//
	// The provider is called in a context of its own (ending.go): the
	// admission deadline, a class's default when the caller stated none,
	// decided whether the call starts; it does not cut an answer that
	// has. An Idempotency-Key's caller that leaves is expected to retry
	// with the key, so its call runs on and is kept for that retry
	// instead of being thrown away (package idempotency).
	upCtx, cancelUp := c.upstreamContext(ctx, r.Context(), hdr.stated, idem != nil)
	defer cancelUp()
	out := r.WithContext(httptrace.WithClientTrace(upCtx, &c.trace))
	out.Body = io.NopCloser(bytes.NewReader(body.raw))
	out.ContentLength = int64(len(body.raw))
	out.Header.Set("Content-Length", strconv.Itoa(len(body.raw)))
	c.forward(w, out)
	// The body wrapper released the slot when the body ended; this covers
	// the paths where no body was ever handed over.
	c.finish(admission.Canceled, c.cutBy(false))
}

var discardLog = log.New(io.Discard, "", 0)

// callBuffers is a call's proxy's BufferPool: it recycles ReverseProxy's
// copy buffers, which it would otherwise allocate afresh for every
// response, and sizes them to the answer. A JSON answer is copied through
// at once, in 32 KiB reads; a stream holds its buffer for as long as it
// runs (minutes), for chunks of a few hundred bytes a tenth of a second
// apart, so it takes streamBufferSize: at a thousand open streams, 4 MiB
// held rather than 32. A chunk larger than the buffer is copied in two
// reads, as the flush after each write sends it on regardless.
//
// The buffer taken is kept in the call, so that Put returns the pool's
// own pointer rather than allocating a new one. A conversion of the call,
// not a value of its own: the interface holds the pointer, and costs no
// allocation.
type callBuffers call

const streamBufferSize = 4 << 10

var (
	copyBuffers   = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	streamBuffers = sync.Pool{New: func() any { b := make([]byte, streamBufferSize); return &b }}
)

func (cb *callBuffers) Get() []byte {
	c := (*call)(cb)
	pool := &copyBuffers
	if c.meter != nil && c.meter.Stream() {
		pool = &streamBuffers
	}
	c.copyBuf = pool.Get().(*[]byte)
	return *c.copyBuf
}

func (cb *callBuffers) Put([]byte) {
	c := (*call)(cb)
	if c.copyBuf == nil {
		return
	}
	if len(*c.copyBuf) == streamBufferSize {
		streamBuffers.Put(c.copyBuf)
	} else {
		copyBuffers.Put(c.copyBuf)
	}
	c.copyBuf = nil
}

func attemptKind(attempt int) string {
	if attempt > 0 {
		return "retry"
	}
	return "first"
}

func (c *call) wroteHeaders() { c.headersWritten.Add(1) }

// forward sends the call to the provider and its answer to w, through the
// call's own ReverseProxy: each hook is a method of the call, the
// transport is the call itself (RoundTrip, retry.go). The proxy is a
// value in the call, filled here: three method values are the only
// allocations it adds.
func (c *call) forward(w http.ResponseWriter, out *http.Request) {
	c.proxy = httputil.ReverseProxy{
		Rewrite:        c.rewrite,
		Transport:      c,
		ModifyResponse: c.modifyResponse,
		ErrorHandler:   c.proxyError,
		// Its one message left, a read error in the body's copy, is the
		// provider's cut, which the body logs itself with the request id
		// (call.cutShort); every other error reaches ErrorHandler.
		ErrorLog: discardLog,
		// Zero: ReverseProxy flushes streaming responses (text/event-stream,
		// or no Content-Length) after every write by itself, and buffers
		// the rest into as few writes as possible.
		FlushInterval: 0,
		BufferPool:    (*callBuffers)(c),
	}
	c.proxy.ServeHTTP(w, out)
}

// rewrite turns the caller's request into the provider's: the upstream URL,
// the provider's key in place of the caller's, and no sluice headers.
func (c *call) rewrite(pr *httputil.ProxyRequest) {
	c.g.deploymentOf(c).target(pr.In, pr.Out)
	h := pr.Out.Header
	c.x.forwardRequestID(h)
	for _, name := range []string{contract.HeaderPriority, contract.HeaderTimeoutMs, contract.HeaderAttempt, contract.HeaderDegrade} {
		h.Del(name)
	}
}

// servedModel is the model a call is sent with: its deployment's name for
// it when routed, else the model the chain left (degraded or not).
func servedModel(r *chain.Request) string {
	if r.UpstreamModel != "" {
		return r.UpstreamModel
	}
	return r.Model
}

// modifyResponse stamps the contract's headers on a proxied response and
// wraps its body so that the slot is released when the body ends.
func (c *call) modifyResponse(resp *http.Response) error {
	g := c.g
	// One backing array for the stamps' values: an allocation, not four.
	v := make([]string, 4)
	v[0], v[1], v[2], v[3] = strconv.FormatInt(c.queue.Milliseconds(), 10), c.class, g.deploymentOf(c).name, c.model
	h := resp.Header
	h[contract.HeaderQueueMs], h[contract.HeaderClass], h[contract.HeaderUpstream] = v[0:1:1], v[1:2:2], v[2:3:3]
	if c.model != "" {
		h[contract.HeaderModel] = v[3:4:4]
	}
	c.stampUpstreamID(resp.Header) // the provider's X-Request-Id (accesslog.go)
	g.stampHeadroom(resp.Header, c.permit.Request(), c.budget, true)
	if r := c.permit.Request(); r.Observe {
		stampWould(resp.Header, r)
	}
	g.metrics.response(c.class, resp.StatusCode).Inc()
	c.idem.Respond(resp.StatusCode, resp.Header) // Idempotency-Key: after the stamps, so replays carry them
	result := admission.Success
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		result = admission.Failure
		c.rateLimited = resp.StatusCode == http.StatusTooManyRequests
	}
	c.meter = wire.NewUsageMeter(resp.Header.Get("Content-Type"))
	resp.Body = &releasingBody{ReadCloser: resp.Body, c: c, result: result}
	return nil
}

// proxyError answers when no upstream response reached the caller. The
// caller learns the kind of failure, never the addresses or the error's
// text, which name internal hosts and ports; the log has it all.
func (c *call) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	g := c.g
	// A deadline that cut the call is named first: the caller may have
	// left after it did.
	if end := c.cutBy(false); end != endCallerLeft || c.caller.Err() != nil {
		c.finish(admission.Canceled, end)
		g.metrics.responses.WithLabelValues(c.class, "0").Inc()
		switch end {
		case endCallerDeadline:
			wire.WriteError(w, http.StatusGatewayTimeout, "timeout_error", "deadline_exceeded",
				"the request's deadline (X-Sluice-Timeout-Ms) passed before the provider answered; the upstream call was cancelled")
		case endMaxDuration:
			wire.WriteError(w, http.StatusGatewayTimeout, "timeout_error", "max_call_duration",
				"the provider did not answer within limits.max_call_duration; the upstream call was cancelled")
		}
		return // else the caller left: nobody to answer
	}
	if rej, ok := errors.AsType[*admission.Rejection](err); ok {
		// Refused after its deployment could not be reached (retry.go):
		// it never reached a provider.
		c.unreachable = true
		c.finish(admission.Failure, endProviderError)
		g.metrics.upstreamFailures.WithLabelValues(failUnreachable.code).Inc()
		g.log.Warn("upstream call failed", "path", r.URL.Path, "kind", failUnreachable.code, "request_id", c.x.requestID(),
			"upstream", g.deploymentOf(c).name, "refused", rej.Reason.String())
		g.stampHeadroom(w.Header(), c.permit.Request(), c.budget, false)
		g.refuse(w, rej, c.class, c.tenant)
		return
	}
	kind := upstreamFailure(err)
	c.unreachable = kind == failUnreachable
	c.finish(admission.Failure, endProviderError)
	g.metrics.responses.WithLabelValues(c.class, "0").Inc()
	g.metrics.upstreamFailures.WithLabelValues(kind.code).Inc()
	g.log.Warn("upstream call failed", "path", r.URL.Path, "kind", kind.code, "request_id", c.x.requestID(), "err", err)
	wire.WriteError(w, kind.status, "upstream_error", kind.code, kind.msg)
}

func (g *Gateway) refuse(w http.ResponseWriter, rej *admission.Rejection, class, tenant string) {
	exchangeOf(w).refused(rej.Reason, class)
	g.metrics.rejections.WithLabelValues(reasonLabel(rej.Reason), class, tenant).Inc()
	wire.WriteRejection(w, rej)
}

func (g *Gateway) badInput(w http.ResponseWriter, err error) {
	code := "invalid_request"
	var br *wire.BadRequest
	if errors.As(err, &br) {
		code = br.Code
		if br.Cause != nil { // the detail the caller is not shown
			g.log.Info("bad request", "code", code, "request_id", w.Header().Get(contract.HeaderRequestID), "err", br.Cause)
		}
	}
	g.metrics.badInput.WithLabelValues(code).Inc()
	wire.WriteBadRequest(w, err)
}

// notFound refuses a path the gateway does not forward, in the caller's API
// shape.
func (g *Gateway) notFound(w http.ResponseWriter, r *http.Request) {
	g.metrics.badInput.WithLabelValues("not_found").Inc()
	msg := "sluice does not forward this path (not a gated API nor in passthrough)"
	wire.WriteError(w, http.StatusNotFound, "invalid_request_error", "not_found", msg)
}

// methodNotAllowed refuses a method the path does not take (rt may be nil:
// TRACE and CONNECT are refused on every path).
func (g *Gateway) methodNotAllowed(w http.ResponseWriter, rt *route) {
	g.metrics.badInput.WithLabelValues("method_not_allowed").Inc()
	msg := "method not allowed on this path"
	if rt != nil {
		w.Header().Set("Allow", strings.Join(rt.methods, ", "))
	}
	wire.WriteError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", msg)
}

func (g *Gateway) unauthorized(w http.ResponseWriter) {
	g.metrics.badInput.WithLabelValues("invalid_api_key").Inc()
	wire.WriteError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
		"missing or unknown API key (Authorization: Bearer <key>, or x-api-key: <key>)")
}
