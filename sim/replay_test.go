package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
)

// arrival is one scripted attempt: sent At from the start of the run by a
// caller of the traffic source named Source (which gives its tenant, tier,
// class, model and tokens), as attempt number Attempt, by a caller that
// waits Timeout for it. Attempts with the same non-zero Prompt ask the same
// thing (copies of one request, to the recognise stage); zero is a prompt
// of the attempt's own.
type arrival struct {
	At      time.Duration
	Source  string
	Attempt int
	Timeout time.Duration
	Prompt  int
}

// heard is what the caller of an attempt heard, and when (from the start
// of the run).
type heard struct {
	Verdict string
	At      time.Duration
}

// verdictServed is what replay reports for an attempt that was answered;
// any other verdict is a refusal's reason, or "timeout" for a caller that
// stopped waiting.
const verdictServed = "served"

// replay runs policy on sc with exactly the scripted attempts and no
// traffic of its own: each attempt is a call of its own, sent once and
// never retried, through the simulator's own shell around the policy (the
// engine and, for a sluice policy, gateServer). It returns what the caller
// of each attempt heard, in script order.
func replay(ctx context.Context, sc *scenario.Scenario, policy string, script []arrival) ([]heard, error) {
	// Polite callers give each attempt the time left to their call's
	// deadline, which replay sets from the attempt's timeout.
	s, err := newSetup(sc, policy, 1, Options{Client: "polite"})
	if err != nil {
		return nil, err
	}
	byName := map[string]*source{}
	for _, src := range s.sources {
		if byName[src.name] != nil {
			return nil, fmt.Errorf("traffic: two sources are named %q", src.name)
		}
		byName[src.name] = src
		src.script = []time.Duration{} // no arrivals of its own
		src.maxAttempts = 1
	}
	var last time.Duration
	for i, a := range script {
		if byName[a.Source] == nil {
			return nil, fmt.Errorf("script[%d].source: no traffic source is named %q", i, a.Source)
		}
		if a.At < 0 || a.Timeout <= 0 || a.Attempt < 0 {
			return nil, fmt.Errorf("script[%d]: want at ≥ 0, timeout > 0, attempt ≥ 0; got %v, %v, %d", i, a.At, a.Timeout, a.Attempt)
		}
		last = max(last, a.At+a.Timeout)
	}
	// A call still running when its caller left ends within a minute of
	// that in any scenario replay is used with.
	s.window = last + time.Nanosecond
	s.end = s.window + time.Minute
	e, err := s.newEngine()
	if err != nil {
		return nil, err
	}
	out := make([]heard, len(script))
	e.heard = func(a *attempt, answered bool, why refusal) {
		v := verdictServed
		if !answered {
			v = why.String()
		}
		out[a.c.seq] = heard{v, e.now}
	}
	for i, a := range script {
		c := e.newCall()
		c.seq = uint64(i)
		c.src = byName[a.Source]
		c.sized(c.src)
		c.arrival = a.At
		c.deadline = a.At + a.Timeout
		c.sent = int32(a.Attempt) // so the attempt sent is number Attempt
		c.prompt = uint64(a.Prompt)
		e.q.push(event{at: a.At, kind: evSend, c: c})
	}
	if _, err := e.loop(ctx); err != nil {
		return nil, err
	}
	for i, h := range out {
		if h.Verdict == "" {
			return nil, fmt.Errorf("script[%d]: its caller heard nothing by the end of the run", i)
		}
	}
	return out, nil
}
