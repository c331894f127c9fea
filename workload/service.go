package workload

import (
	"fmt"
	"math"
	"time"
)

// ServiceModel is the time a decode-bound provider takes over a call: a
// fixed part, a part per prompt token (reading the prompt) and a part per
// answer token (writing the answer, one token after another, the part
// that dominates), times a lognormal factor of median 1 — the call's luck:
//
//	(Base + prompt × PerPromptToken + output × PerOutputToken) × e^(Sigma·Z)
//
// The zero ServiceModel takes no time.
type ServiceModel struct {
	Base           time.Duration
	PerPromptToken time.Duration
	PerOutputToken time.Duration
	// Sigma is the standard deviation of the factor's logarithm, 0 to 3.
	Sigma float64
}

// ProductionModel is the provider of the production-shaped scenarios: a
// call takes 50 ms, 0.02 ms a prompt token and 2 ms an answer token, times
// a lognormal factor of σ 0.2 — a chat answer of 200 tokens about half a
// second, a code completion of 13 about a tenth.
func ProductionModel() ServiceModel {
	return ServiceModel{Base: 50 * time.Millisecond, PerPromptToken: 20 * time.Microsecond, PerOutputToken: 2 * time.Millisecond, Sigma: 0.2}
}

// maxModelTime caps a drawn time, so that no draw overflows.
const maxModelTime = 24 * time.Hour

// Validate reports a part that is negative or longer than an hour, or a
// sigma outside 0 to 3, naming it.
func (m ServiceModel) Validate() error {
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"base", m.Base}, {"per_prompt_token", m.PerPromptToken}, {"per_output_token", m.PerOutputToken}} {
		if p.d < 0 || p.d > time.Hour {
			return fmt.Errorf("%s: %v, want 0 to 1h", p.name, p.d)
		}
	}
	if !(m.Sigma >= 0 && m.Sigma <= 3) {
		return fmt.Errorf("sigma: %v, want 0 to 3", m.Sigma)
	}
	return nil
}

// IsZero reports whether the model takes no time.
func (m ServiceModel) IsZero() bool { return m == ServiceModel{} }

// Median is the median time of a call of the given sizes: the factor's
// median is 1.
func (m ServiceModel) Median(prompt, output int) time.Duration {
	ns := float64(m.Base) + float64(prompt)*float64(m.PerPromptToken) + float64(output)*float64(m.PerOutputToken)
	return capTime(ns)
}

// Mean is the mean time of a call of the given sizes: the median times
// e^(σ²/2).
func (m ServiceModel) Mean(prompt, output int) time.Duration {
	return capTime(float64(m.Median(prompt, output)) * math.Exp(m.Sigma*m.Sigma/2))
}

// Time is the time of a call of the given sizes whose luck is z, a
// standard normal draw.
func (m ServiceModel) Time(prompt, output int, z float64) time.Duration {
	return capTime(float64(m.Median(prompt, output)) * math.Exp(m.Sigma*z))
}

func capTime(ns float64) time.Duration {
	if !(ns < float64(maxModelTime)) {
		return maxModelTime
	}
	return time.Duration(max(ns, 0))
}

// MeanService is the mean time the trace's calls take under m: the
// provider's work per call.
func (t *Trace) MeanService(m ServiceModel) time.Duration {
	if len(t.Calls) == 0 {
		return 0
	}
	var sum float64
	for _, c := range t.Calls {
		sum += float64(m.Mean(c.PromptTokens, c.OutputTokens))
	}
	return time.Duration(sum / float64(len(t.Calls)))
}

// Load is the work the trace offers a provider of slots under m, as a
// share of what it can do: the calls' mean time times their rate over the
// slots (1: as much work as the provider does when always busy).
func (t *Trace) Load(m ServiceModel, slots int) float64 {
	span := t.Span()
	if span <= 0 || slots <= 0 || len(t.Calls) < 2 {
		return 0
	}
	rate := float64(len(t.Calls)-1) / span.Seconds()
	return rate * t.MeanService(m).Seconds() / float64(slots)
}

// AtLoad returns the trace played at the speed that makes its load on a
// provider of slots under m the given one (see Load).
func (t *Trace) AtLoad(m ServiceModel, slots int, load float64) (*Trace, error) {
	now := t.Load(m, slots)
	if now <= 0 {
		return nil, fmt.Errorf("workload: a trace of %d calls over %v offers no load to speed up", len(t.Calls), t.Span())
	}
	return t.Faster(load / now)
}
