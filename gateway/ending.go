package gateway

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/admission"
)

// Who ends a call. A deadline the caller did not set must not cut an
// answer the provider is already writing (and billing): the class's
// default_timeout, and the SDKs' X-Stainless-Timeout, decide whether a call
// starts and how long it may wait for a slot; once it has started, only
// the caller (by leaving), the caller's own X-Sluice-Timeout-Ms, sluice's
// bound on any call (limits.max_call_duration) or the provider ends it.
// The access line's outcome and sluice_calls_ended_total say which.

// ending is how a call ended: who ended it.
type ending uint8

const (
	endUnknown ending = iota
	// endCompleted: the provider's answer reached the caller whole,
	// whatever its status.
	endCompleted
	// endProviderError: the provider answered with an error (5xx, 429), or
	// was never reached (502/504 upstream_*).
	endProviderError
	// endProviderCut: the provider broke off an answer it had started.
	endProviderCut
	// endCallerLeft: the caller hung up, or stopped reading.
	endCallerLeft
	// endCallerDeadline: the caller's X-Sluice-Timeout-Ms passed.
	endCallerDeadline
	// endMaxDuration: limits.max_call_duration passed.
	endMaxDuration
	numEndings
)

var endingNames = [numEndings]string{
	endUnknown:        "unknown",
	endCompleted:      "completed",
	endProviderError:  "provider_error",
	endProviderCut:    "provider_cut",
	endCallerLeft:     "caller_left",
	endCallerDeadline: "caller_deadline",
	endMaxDuration:    "max_duration",
}

func (e ending) String() string {
	if e < numEndings {
		return endingNames[e]
	}
	return "unknown"
}

// The causes of the upstream context's end, so that a call cut short can
// say which deadline cut it.
var (
	errCallerDeadline = errors.New("the caller's deadline (X-Sluice-Timeout-Ms) passed")
	errMaxDuration    = errors.New("the call ran for limits.max_call_duration")
)

// upstreamContext is the context the provider is called in, from caller,
// the caller's request context: it ends when the caller leaves, at the
// caller's stated deadline, or at limits.max_call_duration from the call's
// start, whichever comes first. A keyed call (Idempotency-Key) outlives
// its caller, whose retry is to get its answer: it ends only at the
// deadlines.
//
// admitted is the context the call was admitted in: the caller's with its
// deadline. When that deadline is the stated one and ends the call first,
// the call goes on in it, without a context of its own (cutBy reads its
// plain DeadlineExceeded as the caller's deadline).
func (c *call) upstreamContext(admitted, caller context.Context, stated, keyed bool) (context.Context, context.CancelFunc) {
	end := c.start.Add(c.g.cfg.Limits.MaxCallDuration.D())
	c.stated = stated
	if stated && !keyed && c.deadline.Before(end) {
		c.upCtx = admitted
		return admitted, func() {}
	}
	parent := caller
	if keyed {
		parent = context.WithoutCancel(caller)
	}
	cause := errMaxDuration
	if stated && c.deadline.Before(end) {
		end, cause = c.deadline, errCallerDeadline
	}
	ctx, cancel := context.WithDeadlineCause(parent, end, cause)
	c.upCtx = ctx
	return ctx, cancel
}

// cutBy says who cut a call short of a whole answer: a deadline, as the
// upstream context's cause tells (the caller may leave after the cut, but
// the deadline came first); else the caller, if it left; else the provider
// — or, when theProvider is false (the proxy abandoned the body because
// its write to the caller failed), a caller that stopped reading.
func (c *call) cutBy(theProvider bool) ending {
	if c.upCtx != nil {
		switch cause := context.Cause(c.upCtx); {
		case cause == errCallerDeadline, cause == context.DeadlineExceeded && c.stated:
			return endCallerDeadline
		case cause == errMaxDuration:
			return endMaxDuration
		}
	}
	if c.caller.Err() != nil || !theProvider {
		return endCallerLeft
	}
	return endProviderCut
}

// answered is the ending of a call whose answer reached the caller whole:
// the provider's error or not, by its result.
func answered(result admission.Result) ending {
	if result == admission.Failure {
		return endProviderError
	}
	return endCompleted
}

// cutShort ends a call whose answer broke off (err, from the provider's
// body): a cut by the provider is logged, with the request id.
func (c *call) cutShort(err error) {
	end := c.cutBy(true)
	if end == endProviderCut {
		c.g.log.Warn("the provider cut its answer short", "request_id", c.x.requestID(), "upstream", c.g.deploymentOf(c).name,
			"model", c.model, "err", err)
	}
	c.finish(admission.Canceled, end)
}
