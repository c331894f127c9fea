// Package gateway is sluice's OpenAI-compatible reverse proxy: every call
// to a gated API (chat completions, completions, embeddings, responses,
// Anthropic's messages) and every path the configuration passes through is
// run through the admission chain (package chain) and, admitted, forwarded
// to the deployment the chain chose; everything else is refused. New builds
// a Gateway from a config.Config; it is an http.Handler, and
// AdminHandler serves its admin listener. Middleware puts the same gate in
// front of any Go handler.
//
// # A call's way through
//
// In the order the code runs it:
//
//  1. ServeHTTP (gateway.go) opens the exchange — X-Request-Id, the
//     access log's record and the span (accesslog.go, trace.go) — and
//     refuses headers over their bound (headerlimit.go);
//  2. the estimate endpoint is answered (estimate.go); otherwise the path
//     is matched (routes.go) and a method that is never forwarded refused;
//  3. the caller is identified by its key (tenants.go): 401 for an
//     unknown one; then an unmatched path is a 404, a method the route
//     does not allow a 405, and a draining gateway refuses (draining);
//  4. the Batch API's paths go to package batchapi (batch.go); a call
//     goes on to serveCall, which reads the sluice headers (request.go)
//     and, when the gateway's own CPU is saturated, sheds it before any
//     stage of the chain (saturated.go, package saturation; the chain
//     never sees such a call);
//  5. the body is read within its bounds (body.go, request.go), a
//     duplicate Idempotency-Key answered from the first call's answer
//     (package idempotency), and the chain asked (package chain, its
//     stages in the order chain/stage.go lists): a refusal is answered at
//     once (package wire writes it, 429 or 503 with Retry-After, the
//     reason and the estimated wait), and an error about the call itself
//     (a class the tenant may not use, a model nobody serves or prices)
//     gets the one answer every entrance gives it (chainerr.go);
//  6. an admitted call gets a *call, which forwards itself (call.forward)
//     through a ReverseProxy of its own whose hooks are the call's
//     methods — rewrite to the deployment (upstreams.go, pools.go), the
//     gateway's own retries and failover to the next pool (retry.go,
//     upstreamerr.go), the answer's stamps and the provider's rate-limit
//     signals to the adaptive limit (limit.go) — and whose body releases
//     the slot when it ends (body.go), settling the call with its usage.
//
// Nothing about a call travels in the request's context.
//
// # The rooms
//
// What is not the proxy core is a package of its own, none of which imports
// this one, each given what it needs explicitly:
//
//   - config: the configuration file, its defaults and validation, and the
//     chain it describes (the one loader);
//   - gateway/guard: the API listener's connection caps and timeouts
//     (server.go listens through it);
//   - gateway/wire: the error bodies in OpenAI's and Anthropic's shapes,
//     the usage in answers and streams, the providers' rate-limit headers;
//   - gateway/idempotency: Idempotency-Key, the answers kept for
//     duplicates;
//   - gateway/observe: the access log's line and the spans (accesslog.go,
//     trace.go fill its record);
//   - gateway/batchapi: the Batch API (batch.go wires it);
//   - gateway/cluster: where the spend books live, and the lease of a
//     fleet's concurrency on Redis (cluster.go adapts the pools to it);
//   - gateway/dashboard: the admin dashboard's page, history and events
//     (dashboard.go reads the gateway's state for it);
//   - gateway/saturation: shedding when the gateway's own CPU is the
//     bottleneck (saturated.go wires it in front of the chain).
//
// The admin listener is the file set admin.go (its routes, the state dump,
// health and readiness), metrics.go (the Prometheus registry and the
// gateway's metrics), reload.go (policies changed without a restart),
// estimate.go (the estimate endpoint, also on the API listener) and the
// dashboard's adapter.
package gateway
