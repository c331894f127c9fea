package contract

// ErrorBody is the JSON body of every error the gateway writes, OpenAI's
// {"error":{"message","type","param","code"}} with sluice's fields beside
// the usual ones, so that a client that reads only message, type and code
// still gets the gist:
//
//	{"error":{"message":"sluice refused the request (queue_wait): ...",
//	 "type":"overloaded_error","param":null,"code":"queue_wait",
//	 "reason":"queue_wait","estimated_wait_ms":5200,"retry_after_ms":4100}}
//
// A reader must accept a body without the sluice fields: a server that is
// not sluice (the provider, a load balancer) may have answered.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the "error" object of an ErrorBody.
type ErrorDetail struct {
	// Message is for people; nothing should parse it.
	Message string `json:"message"`
	// Type is the error's class: ErrorTypeRateLimit, ErrorTypeOverloaded,
	// ErrorTypeInvalidRequest, or another the gateway uses for failures of
	// the upstream.
	Type string `json:"type"`
	// Param names the offending parameter; OpenAI sends null when there is
	// none, and so does the gateway (nil).
	Param *string `json:"param"`
	// Code is the machine-readable error: the reason of a rejection, or
	// what was wrong with a refused request (e.g. "invalid_header").
	Code string `json:"code"`
	// Reason is the rejection's reason (one of the Reason constants);
	// empty, and omitted, on errors that are not rejections.
	Reason string `json:"reason,omitempty"`
	// EstimatedWaitMs is how long the request would have queued, in
	// milliseconds; nil, and omitted, on errors that are not rejections.
	EstimatedWaitMs *int64 `json:"estimated_wait_ms,omitempty"`
	// RetryAfterMs is when trying again has a chance, in milliseconds; nil,
	// and omitted, on errors that are not rejections.
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
}
