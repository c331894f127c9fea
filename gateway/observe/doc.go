// Package observe is what the gateway tells an operator about each request
// to its public listener: the access log's line and the OpenTelemetry
// spans.
//
// # Model
//
// LogConfig is the YAML `log:` section; its Logger is the gateway's
// logger. A request is identified by RequestID (the caller's X-Request-Id
// when it is one sane token, else a new random one). When the request is
// over, the gateway fills a Record — who, at which class, which model,
// what happened and why, how long it queued and how long the provider
// took, what it cost — and LogAccess writes it as one line at level Info.
// The text format's line is written by hand, in the bytes slog's
// TextHandler would write (it was a tenth of a short call's CPU); every
// other line, and the JSON format, are slog's.
//
// With a tracer (NewTracer; nil when tracing is off), StartServerSpan
// opens the request's server span, continuing a W3C traceparent, and
// EndServerSpan names it after its route and sets the Record's attributes.
// Acquire wraps the admission wait in a span of its own, and RoundTrip each
// upstream attempt in a client span whose context the provider receives.
//
// # Goals
//
// One line and one span per request, with the same fields in both, and
// none that holds a key, a body or a query string; a value a caller
// chooses (its request id, its path) is bounded before it reaches a line.
// Without a tracer no tracing code runs at all.
//
// # Non-goals
//
// Metrics (the gateway's Prometheus registry), and deciding anything
// about a request: this package only reports. The gateway fills the
// Record from its own per-call state; this package does not import the
// gateway.
package observe
