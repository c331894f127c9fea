package contract

// EstimatePath is the gateway endpoint that answers "what would happen to
// such a request now?", so that a producer can decide whether to submit at
// all. GET it with the query parameters priority, timeout_ms, attempt
// (which mean what HeaderPriority, HeaderTimeoutMs and HeaderAttempt mean),
// model, input_tokens (the prompt's size), max_tokens and endpoint (the
// path the call would be sent to, /v1/chat/completions by default: with
// the model, the caller and the sizes, what the gate estimates a call's
// service time by); every one is optional. The answer is an Estimate: what a request of the calling
// tenant with those would get now from every rule — the tenant's classes,
// the retry budgets, the spend ceiling and the tenant's budget, the model
// ladder, the queue — with nothing taken.
const EstimatePath = "/sluice/v1/estimate"

// Estimate is the JSON answer of EstimatePath. Durations are in whole
// milliseconds. A reader must ignore fields it does not know, so that the
// gateway may add to it.
type Estimate struct {
	// Priority is the class the estimate is for: after the default, and
	// after the tenant's class rules (what X-Sluice-Class would say).
	Priority string `json:"priority"`
	// Rank is the class's shedding rank: higher is served first and shed
	// last.
	Rank int `json:"rank"`
	// EstimatedWaitMs is how long a request of this class would queue.
	EstimatedWaitMs int64 `json:"estimated_wait_ms"`
	// ServiceP50Ms and ServiceP95Ms are the recent service-time
	// percentiles.
	ServiceP50Ms int64 `json:"service_p50_ms"`
	ServiceP95Ms int64 `json:"service_p95_ms"`
	// Admit says whether a request with the given timeout would be
	// admitted now (run at once or queued); Reason and RetryAfterMs say
	// why not and when to ask again — the reason and retry-after-ms the
	// request would be refused with. EstimatedWaitMs stays the queue's
	// wait even when a budget would refuse.
	Admit        bool   `json:"admit"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	// QueueDepth is the number of requests queued, InFlight the number
	// being served, Concurrency the number of slots, and Mode the queue's
	// current order ("fifo", or "lifo" under overload). They describe
	// everyone's load, not the caller's, so the gateway sends them only to
	// callers allowed to see its global state (on its admin listener);
	// otherwise they are absent.
	QueueDepth  *int   `json:"queue_depth,omitempty"`
	InFlight    *int   `json:"in_flight,omitempty"`
	Concurrency *int   `json:"concurrency,omitempty"`
	Mode        string `json:"mode,omitempty"`
	// TimeoutMs is the time budget the estimate assumed: the timeout_ms
	// asked for, or the class's default.
	TimeoutMs int64 `json:"timeout_ms"`
	// Model is the model asked about; omitted when none was.
	Model string `json:"model,omitempty"`
	// ModelCalled is the cheaper rung of the model's ladder the request
	// would be degraded to (what X-Sluice-Model would say); omitted when
	// it would not be.
	ModelCalled string `json:"model_called,omitempty"`
	// Upstream is the deployment the request would be sent to, with
	// several deployments (what X-Sluice-Upstream would say); omitted with
	// one.
	Upstream string `json:"upstream,omitempty"`
}
