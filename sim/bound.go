package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/sim/scenario"
	"github.com/sluicehq/sluice/workload"
)

// BoundResult is the best offline schedule of a run's calls (see Bound).
type BoundResult struct {
	Scenario string  `json:"scenario"`
	Load     float64 `json:"load"`
	// Requests are the run's logical requests; OnTime how many the
	// schedule answers by their deadline, SuccessPct the share.
	Requests   int     `json:"requests"`
	OnTime     int     `json:"on_time"`
	SuccessPct float64 `json:"success_pct"`
	// Started counts the calls it starts (each billed).
	Started int `json:"started"`
	// Sources break the figures down by traffic source.
	Sources []BoundSource `json:"sources"`
}

// BoundSource is one traffic source's part of a BoundResult.
type BoundSource struct {
	Name       string  `json:"name"`
	Requests   int     `json:"requests"`
	OnTime     int     `json:"on_time"`
	SuccessPct float64 `json:"success_pct"`
	// MarginMs is the p95 of the source's service times, the margin the
	// schedule starts its calls with.
	MarginMs float64 `json:"margin_ms"`
}

// Bound schedules the calls a run of sc at load would see — the same
// arrivals, sizes, deadlines and service times, drawn as every policy
// draws them (a first attempt's) — offline, earliest deadline first on the
// upstream's slots, a call started only when its source's p95 service
// time still fits before its deadline (workload.Bound). It is the bar the
// production-shaped scenarios hold a gateway to: it knows no more than
// each source's statistics, which a gateway can learn, and it never
// retries, wastes a start, or leaves a slot idle while work waits.
func Bound(sc *scenario.Scenario, load float64) (*BoundResult, error) {
	s, err := newSetup(sc, scenario.PolicyFIFO, load, Options{})
	if err != nil {
		return nil, err
	}
	var jobs []workload.Job
	var bySource [][]time.Duration
	for i, src := range s.sources {
		var times []time.Duration
		for n := uint64(0); ; n++ {
			at, ok := src.next()
			if !ok {
				break
			}
			seq := uint64(i)<<40 | n
			in, out := int(src.usage.Input), int(src.usage.Output)
			deadline := src.deadline
			if src.calls != nil {
				tc := src.calls[n]
				in, out = tc.PromptTokens, tc.OutputTokens
				if tc.Deadline > 0 {
					deadline = tc.Deadline
				}
			}
			d := s.sampler.draw(uniform(s.seed, saltService, seq, 0), at, src.model.factorFor(at), in, out)
			times = append(times, d)
			jobs = append(jobs, workload.Job{At: at, Deadline: at + deadline, Service: d, Group: i})
		}
		bySource = append(bySource, times)
	}
	margins := make([]time.Duration, len(s.sources))
	for i, times := range bySource {
		if len(times) == 0 {
			continue
		}
		sorted := slices.Clone(times)
		slices.Sort(sorted)
		margins[i] = sorted[(len(sorted)*95+99)/100-1]
	}
	for k := range jobs {
		jobs[k].Margin = margins[jobs[k].Group]
	}
	br := workload.Bound(jobs, sc.Upstream.Concurrency)
	out := &BoundResult{Scenario: sc.Name, Load: load, Requests: len(jobs), OnTime: br.OnTime, Started: br.Started}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("bound: %s at %v: no calls", sc.Name, load)
	}
	out.SuccessPct = 100 * float64(out.OnTime) / float64(out.Requests)
	for i, src := range s.sources {
		bs := BoundSource{Name: src.name, Requests: len(bySource[i]), MarginMs: float64(margins[i]) / 1e6}
		if i < len(br.OnTimeBy) {
			bs.OnTime = br.OnTimeBy[i]
		}
		if bs.Requests > 0 {
			bs.SuccessPct = 100 * float64(bs.OnTime) / float64(bs.Requests)
		}
		out.Sources = append(out.Sources, bs)
	}
	return out, nil
}
