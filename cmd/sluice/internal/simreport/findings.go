package simreport

import (
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// The figures behind the README's proposed section, the headlines and the
// findings (templates/readme.md.tmpl, headlines.md.tmpl, findings.md.tmpl).
// A field is nil when the scenario or the run it needs is missing; a
// premise on the figures themselves is a conditional in the template.

// readme is the README's proposed "why" section: the retry storm at the
// headline load, and the runaway tenant's bill.
type readme struct {
	Load    float64
	Results []*sim.Result
	// Runaway is nil without the runaway tenant, or when its alert did
	// not fire.
	Runaway *runaway
}

// MaxSuccessPct is the most requests that can succeed at Load, in
// percent: the upstream serves one load's worth.
func (r *readme) MaxSuccessPct() float64 { return 100 / r.Load }

func newReadme(sweeps []*sweep) *readme {
	sw := find(sweeps, "retry-storm")
	if sw == nil {
		return nil
	}
	i := slices.Index(sw.Loads, headlineLoad)
	if i < 0 {
		return nil
	}
	r := &readme{Load: headlineLoad, Results: sw.Results[i]}
	if ra := headlineRunaway(sweeps); ra != nil && ra.Alert() != nil {
		r.Runaway = ra
	}
	return r
}

// headlineRunaway is the runaway tenant at the headline load, with the
// run without the limiter and other tenants to compare, or nil.
func headlineRunaway(sweeps []*sweep) *runaway {
	sw := find(sweeps, "runaway-tenant")
	if sw == nil {
		return nil
	}
	i := slices.Index(sw.Loads, headlineLoad)
	if i < 0 {
		return nil
	}
	ra := sw.runaway(i)
	if ra == nil || ra.Without == nil || len(ra.Others) == 0 {
		return nil
	}
	return ra
}

// headlines are the claims sim/headline_test.go holds.
type headlines struct {
	Load float64
	// StormSluice and StormFIFO are the retry storm at Load.
	StormSluice, StormFIFO *sim.Result
	// Step is nil without the service step's depth threshold at 1×.
	Step *stepHeadline
	// Flood is sluice's interactive success in the speculative flood, by
	// load.
	Flood []loadSuccess
	// Runaway is nil without the runaway tenant.
	Runaway *runaway
}

type stepHeadline struct {
	// Sluice is sluice's recovery by load.
	Sluice []loadRecovery
	// Depth is the depth threshold; DepthRecovery its recovery at 1×.
	Depth         int
	DepthRecovery *sim.Recovery
}

type loadRecovery struct {
	Load     float64
	Recovery *sim.Recovery
}

type loadSuccess struct {
	Load, SuccessPct float64
}

func newHeadlines(sweeps []*sweep) headlines {
	h := headlines{Load: headlineLoad}
	if sw := find(sweeps, "retry-storm"); sw != nil {
		s, f := sw.Result(headlineLoad, "sluice"), sw.Result(headlineLoad, "fifo")
		if s != nil && f != nil {
			h.StormSluice, h.StormFIFO = s, f
		}
	}
	if sw := find(sweeps, "service-step"); sw != nil {
		if d := sw.Result(1, "depth-threshold"); d != nil && d.Recovery != nil {
			st := &stepHeadline{Depth: depthThreshold(sw.Scenario), DepthRecovery: d.Recovery}
			for _, load := range sw.Loads {
				if r := sw.Result(load, "sluice"); r != nil && r.Recovery != nil {
					st.Sluice = append(st.Sluice, loadRecovery{load, r.Recovery})
				}
			}
			h.Step = st
		}
	}
	if sw := find(sweeps, "speculative-flood"); sw != nil {
		for _, load := range sw.Loads {
			if r := sw.Result(load, "sluice"); r != nil && len(r.Sources) > 0 {
				h.Flood = append(h.Flood, loadSuccess{load, r.Sources[0].SuccessPct})
			}
		}
	}
	h.Runaway = headlineRunaway(sweeps)
	return h
}

// depthThreshold is the depth-threshold baseline's bound.
func depthThreshold(sc *scenario.Scenario) int {
	if d := sc.Baselines.DepthThreshold; d > 0 {
		return d
	}
	return 500
}

// smallQueueWork is the small bounded queue's places as work: how long a
// full queue takes to drain at the upstream's mean service time, times
// factor.
func smallQueueWork(sc *scenario.Scenario, factor float64) time.Duration {
	size := sc.Baselines.SmallQueue
	if size == 0 {
		size = sc.Upstream.Concurrency
	}
	return time.Duration(float64(time.Duration(size)*sc.Upstream.Service.Mean()/time.Duration(sc.Upstream.Concurrency)) * factor)
}

// findings are what the tables show, each stated by a paragraph of
// templates/findings.md.tmpl when its figures are here and its premise
// holds.
type findings struct {
	Load float64
	// Depth is the service step at 1×: the depth threshold against sluice.
	Depth *depthFinding
	// Mean is, per scenario, waste at Load by the p50 and by the mean.
	Mean []meanFinding
	// WaitMean and Expiry are the retry storm at Load.
	WaitMean, Expiry *sim.Result
	// LIFO is the retry storm's expiry and LIFO rungs at 1× and sluice at
	// Load; LIFOFlood the flood's LIFO rung at 10× and LIFOStep the
	// step's at Load, or nil.
	LIFO                *lifoFinding
	LIFOFlood, LIFOStep *sim.Result
	// SmallQueue is the small bounded queue against sluice.
	SmallQueue *smallQueueFinding
	// PrioritySluice and PriorityLIFO are mixed deadlines at Load.
	PrioritySluice, PriorityLIFO *sim.Result
	// Runaway is the runaway tenant at Load, with the small queue beside
	// it.
	Runaway           *runaway
	RunawaySmallQueue *sim.Result
}

type depthFinding struct {
	Depth int
	// Before and After are the threshold as work, before and after the
	// step; Deadline is the first class's.
	Before, After, Deadline time.Duration
	Threshold, Sluice       *sim.Result
}

type meanFinding struct {
	Scenario  string
	P50, Mean *sim.Result
}

type lifoFinding struct {
	Expiry, LIFO, Sluice *sim.Result
}

type smallQueueFinding struct {
	// Work is the queue's places as work in the retry storm; Gap the
	// largest goodput difference from sluice over every scenario and load.
	Work time.Duration
	Gap  float64
	// Queue and Sluice are the speculative flood at 10×.
	Queue, Sluice *sim.Result
	// StepAfter is the queue's places as work after the service step,
	// against StepDeadline; zero without the step.
	StepAfter, StepDeadline time.Duration
}

func newFindings(sweeps []*sweep) findings {
	f := findings{Load: headlineLoad}
	at := func(name string, load float64, policy string) *sim.Result {
		if sw := find(sweeps, name); sw != nil {
			return sw.Result(load, policy)
		}
		return nil
	}
	if sw := find(sweeps, "service-step"); sw != nil && len(sw.Scenario.Upstream.Steps) > 0 {
		d, s := sw.Result(1, "depth-threshold"), sw.Result(1, "sluice")
		if d != nil && s != nil && d.Recovery != nil {
			sc := sw.Scenario
			depth := depthThreshold(sc)
			before := time.Duration(depth) * sc.Upstream.Service.Mean() / time.Duration(sc.Upstream.Concurrency)
			f.Depth = &depthFinding{
				Depth: depth, Before: before, After: time.Duration(float64(before) * sc.Upstream.Steps[0].Factor),
				Deadline: sc.Classes[0].Deadline, Threshold: d, Sluice: s,
			}
		}
	}
	for _, sw := range sweeps {
		p, m := sw.Result(headlineLoad, "wait-p50"), sw.Result(headlineLoad, "wait-mean")
		if p != nil && m != nil {
			f.Mean = append(f.Mean, meanFinding{sw.Scenario.Name, p, m})
		}
	}
	if m, e := at("retry-storm", headlineLoad, "wait-mean"), at("retry-storm", headlineLoad, "expiry"); m != nil && e != nil {
		f.WaitMean, f.Expiry = m, e
	}
	if e, l, s := at("retry-storm", 1, "expiry"), at("retry-storm", 1, "lifo"), at("retry-storm", headlineLoad, "sluice"); e != nil && l != nil && s != nil {
		f.LIFO = &lifoFinding{e, l, s}
		if fl, st := at("speculative-flood", 10, "lifo"), at("service-step", headlineLoad, "lifo"); fl != nil && st != nil {
			f.LIFOFlood, f.LIFOStep = fl, st
		}
	}
	if q, s, sw := at("speculative-flood", 10, "small-queue"), at("speculative-flood", 10, "sluice"), find(sweeps, "retry-storm"); q != nil && s != nil && sw != nil && len(q.Sources) > 0 && len(s.Sources) > 0 {
		sq := &smallQueueFinding{Work: smallQueueWork(sw.Scenario, 1), Queue: q, Sluice: s}
		for _, sw := range sweeps {
			for _, load := range sw.Loads {
				if q, s := sw.Result(load, "small-queue"), sw.Result(load, "sluice"); q != nil && s != nil {
					sq.Gap = max(sq.Gap, math.Abs(q.GoodputPct-s.GoodputPct))
				}
			}
		}
		if st := find(sweeps, "service-step"); st != nil && len(st.Scenario.Upstream.Steps) > 0 {
			sc := st.Scenario
			sq.StepAfter, sq.StepDeadline = smallQueueWork(sc, sc.Upstream.Steps[0].Factor), sc.Classes[0].Deadline
		}
		f.SmallQueue = sq
	}
	if s, l := at("mixed-deadlines", headlineLoad, "sluice"), at("mixed-deadlines", headlineLoad, "lifo"); s != nil && l != nil && len(s.Sources) > 1 && len(l.Sources) > 1 {
		f.PrioritySluice, f.PriorityLIFO = s, l
	}
	if ra, q := headlineRunaway(sweeps), at("runaway-tenant", headlineLoad, "small-queue"); ra != nil && q != nil && len(ra.Tenants) > 0 {
		f.Runaway, f.RunawaySmallQueue = ra, q
	}
	return f
}
