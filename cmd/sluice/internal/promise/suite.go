package promise

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The provider every scenario runs against: 16 slots, lognormal service
// times of median 200 ms and σ 0.5 — the setting of issue 21.
const (
	Slots    = 16
	Median   = 200 * time.Millisecond
	Sigma    = 0.5
	Deadline = 2 * time.Second // interactive callers wait this long
)

// NominalCapacity is the provider's answers per second: slots over the
// mean service time, median·e^(σ²/2).
func NominalCapacity() float64 {
	return Slots / (Median.Seconds() * math.Exp(Sigma*Sigma/2))
}

// Scenario is one row of the suite: traffic at Load × capacity, the shape
// of the fleet, and the floors its figures must hold.
type Scenario struct {
	// Name is the row's name, e.g. "storm-5x".
	Name string
	// Load is the offered rate of first attempts, as a multiple of the
	// nominal capacity, over every source.
	Load float64
	// Sources are the callers, each a share of Load.
	Sources []Source
	// Slowdown, when above 1, multiplies every service time from the
	// middle of the run on: the gateway's estimates, learnt on the fast
	// provider, must follow it down.
	Slowdown float64
	// Replicas, when above 1, runs that many gateways sharing the
	// provider's slots through one Redis, traffic spread round-robin.
	Replicas int
	// Production, when set, makes the scenario a production-shaped one
	// (see Production): its sources are its services, its load their
	// trace's, its provider's time by tokens; Load and Slowdown are not
	// used.
	Production *Production
	// Floors are what the scenario promises.
	Floors []Floor
}

// Runs says whether the scenario is run with callers v: a production
// scenario's calls are each their own prompt.
func (sc Scenario) Runs(v Variant) bool { return sc.Production == nil || !v.SamePrompt }

// Source is one kind of caller: a class, a share of the load, a deadline,
// and a tenant (empty: the anonymous one, no key) — or, in a production
// scenario, a service of its trace (sending its own key).
type Source struct {
	Tenant   string
	Class    string
	Share    float64
	Deadline time.Duration
	Service  string
}

// Name is how a source's success is reported: its service, its class, or
// tenant/class.
func (s Source) Name() string {
	if s.Service != "" {
		return s.Service
	}
	if s.Tenant == "" {
		return s.Class
	}
	return s.Tenant + "/" + s.Class
}

// Variant is how the callers send their requests.
type Variant struct {
	// SamePrompt: one prompt for every caller, byte for byte — as load
	// tools and popular prompts do. Otherwise each request its own.
	SamePrompt bool
	// Undeclared: no retry header at all. Otherwise every attempt says
	// its number, in X-Sluice-Attempt and X-Stainless-Retry-Count.
	Undeclared bool
}

func (v Variant) String() string {
	p, h := "distinct", "declared"
	if v.SamePrompt {
		p = "one-prompt"
	}
	if v.Undeclared {
		h = "no-headers"
	}
	return p + "/" + h
}

// Variants are the four ways every scenario is run.
func Variants() []Variant {
	return []Variant{{}, {SamePrompt: true}, {Undeclared: true}, {SamePrompt: true, Undeclared: true}}
}

// Result is what one run of a scenario measured. Percentages are 0–100.
type Result struct {
	Scenario, Variant string
	// Way is "sim" or "http".
	Way string
	// GoodputPct is on-time answers per second over the arrival window
	// as a share of capacity (see the package doc) — with a Slowdown, of
	// the capacity before it and after it, each for its time.
	GoodputPct float64
	// WastePct is the provider's calls whose answer reached nobody in
	// time (late, or to a caller who had gone), of all its calls.
	WastePct float64
	// UnansweredPct is the attempts that got neither an answer nor a
	// refusal before their caller's own timeout, of all attempts.
	UnansweredPct float64
	// RefusalP99Ms is the p99 of the time from an attempt's send to its
	// refusal, in milliseconds; Refusals how many refusals it is over.
	RefusalP99Ms float64
	Refusals     int
	// Success is each source's share of requests answered in time, by
	// Source.Name.
	Success map[string]float64
	// PeakInFlight is the most calls the provider held at once (HTTP
	// only; -1 when not measured).
	PeakInFlight int
	// Declared says the callers declared their attempts (the variant), and
	// Recognised counts the calls the gateway took for retries by their
	// fingerprint — which it must not do to a call whose caller declared
	// its attempt.
	Declared   bool
	Recognised int
	// Learnt says the gateway was told no concurrency and learnt it
	// (HTTPOptions.Concurrency 0, SimOptions.Learn), as `sluice serve
	// --upstream U` does: the floors' Learnt bounds apply.
	Learnt bool `json:",omitempty"`
	// OnTime and Requests are the logical requests answered in time and
	// sent; NoGateway and Bound, in a production scenario, what the same
	// calls got with no gateway at all and in the offline schedule (see
	// Production). Zero and nil in the others.
	OnTime, Requests int       `json:",omitempty"`
	NoGateway        *Baseline `json:",omitempty"`
	Bound            *Baseline `json:",omitempty"`
	// Seconds is how long the run took, in wall time.
	Seconds float64
	// Limits are each gateway's concurrency every quarter of a second
	// from the warm-up on over HTTP, or the simulated gate's learnt one
	// every second (sim.LearnedResult.Limit; a bucket where it did not
	// change reads -1): what a learnt one did in the run. Empty for a
	// simulated gate told its concurrency.
	Limits [][]int `json:",omitempty"`
}

// Floor is one promise: a figure of a Result and the bound it must keep.
type Floor struct {
	// What names the figure, as printed.
	What string
	// Min, when true, makes Bound a minimum; otherwise a maximum.
	Min   bool
	Bound float64
	// Learnt, when not zero, is the bound for a gateway that learnt its
	// concurrency (Result.Learnt) — where holding one to four calls at
	// the provider, the price of not being told, costs a figure that a
	// gateway told the exact number does not pay. Each is explained
	// where the floor is set.
	Learnt float64
	// HTTPSlack, when not zero, is how much lower a minimum (higher a
	// maximum) a run over HTTP is held to than the simulator: for a
	// figure against a baseline computed from the provider's model (the
	// offline bound), which a run on loopback — three processes and the
	// load generator sharing two cores, a millisecond or more of HTTP a
	// call — does not get the whole of. Explained where it is set.
	HTTPSlack float64
	// Of reads the figure from a result, and false when the result has
	// none (the simulator does not measure the provider's calls at once).
	Of func(*Result) (float64, bool)
	// Source names the source whose success the floor is about, if any.
	Source string
}

// Check is one floor checked against a result.
type Check struct {
	Floor Floor
	// Bound is the floor's bound that applied: Floor.Learnt for a
	// learnt run that has one, else Floor.Bound.
	Bound float64
	Got   float64
	Has   bool
	OK    bool
}

func (c Check) String() string {
	if !c.Has {
		return fmt.Sprintf("%s: not measured", c.Floor.What)
	}
	op, mark := "≤", "ok"
	if c.Floor.Min {
		op = "≥"
	}
	if !c.OK {
		mark = "BELOW THE FLOOR"
	}
	return fmt.Sprintf("%s %.1f (%s %g) %s", c.Floor.What, c.Got, op, c.Bound, mark)
}

// Checks checks every floor of sc against r.
func Checks(sc Scenario, r *Result) []Check {
	out := make([]Check, 0, len(sc.Floors))
	for _, f := range sc.Floors {
		bound := f.Bound
		if r.Learnt && f.Learnt != 0 {
			bound = f.Learnt
		}
		switch {
		case r.Way != "http":
		case f.Min:
			bound -= f.HTTPSlack
		default:
			bound += f.HTTPSlack
		}
		got, has := f.Of(r)
		ok := !has || (f.Min && got >= bound) || (!f.Min && got <= bound)
		out = append(out, Check{Floor: f, Bound: bound, Got: got, Has: has, OK: ok})
	}
	return out
}

// Failed lists the floors r falls below, as text; empty when it holds
// them all.
func Failed(sc Scenario, r *Result) []string {
	var out []string
	for _, c := range Checks(sc, r) {
		if !c.OK {
			out = append(out, c.String())
		}
	}
	return out
}

// The floors, as issue 21 states them.

func goodput(min float64) Floor {
	return Floor{What: "goodput % of capacity", Min: true, Bound: min,
		Of: func(r *Result) (float64, bool) { return r.GoodputPct, true }}
}

func waste(max float64) Floor {
	return Floor{What: "waste % of calls", Bound: max,
		Of: func(r *Result) (float64, bool) { return r.WastePct, true }}
}

// learnt sets the floor's bound for a gateway that learnt its
// concurrency (Floor.Learnt).
func (f Floor) learnt(bound float64) Floor {
	f.Learnt = bound
	return f
}

// overHTTP sets the floor's slack over HTTP (Floor.HTTPSlack).
func (f Floor) overHTTP(slack float64) Floor {
	f.HTTPSlack = slack
	return f
}

// unanswered: in every scenario, at most 1% of attempts left without an
// answer by their caller's own timeout.
var unanswered = Floor{What: "unanswered % of attempts", Bound: 1,
	Of: func(r *Result) (float64, bool) { return r.UnansweredPct, true }}

// refusedEarly: in one-class storms, refusals answered within a tenth of
// the caller's deadline at p99.
var refusedEarly = Floor{What: "refusal p99 ms", Bound: float64(Deadline.Milliseconds()) / 10,
	Of: func(r *Result) (float64, bool) { return r.RefusalP99Ms, r.Refusals > 0 }}

func success(source string, min float64) Floor {
	return Floor{What: source + " success %", Min: true, Bound: min, Source: source,
		Of: func(r *Result) (float64, bool) { v, ok := r.Success[source]; return v, ok }}
}

// believed: a declared attempt is believed — no call of a caller that
// says which attempt it is is taken for a retry by its fingerprint.
var believed = Floor{What: "declared calls taken for retries", Bound: 0,
	Of: func(r *Result) (float64, bool) { return float64(r.Recognised), r.Declared }}

func peak(max int) Floor {
	return Floor{What: "provider calls at once", Bound: float64(max),
		Of: func(r *Result) (float64, bool) { return float64(r.PeakInFlight), r.PeakInFlight >= 0 }}
}

// Suite is the table: the scenarios of issue 21, each with its floors.
func Suite() []Scenario {
	storm := func(load float64) Scenario {
		return Scenario{
			Name:    fmt.Sprintf("storm-%gx", load),
			Load:    load,
			Sources: []Source{{Class: "interactive", Share: 1, Deadline: Deadline}},
			Floors:  []Floor{goodput(95), waste(1), unanswered, refusedEarly},
		}
	}
	others := []Source{}
	runaway := Scenario{Name: "runaway-tenant", Load: 1.4}
	// The runaway sends 1.0× of capacity; five tenants 8% each, half
	// interactive, half batch with 30s deadlines.
	runaway.Sources = append(runaway.Sources, Source{Tenant: "runaway", Class: "interactive", Share: 1.0, Deadline: Deadline})
	for i := 1; i <= 5; i++ {
		t := fmt.Sprintf("t%d", i)
		others = append(others,
			Source{Tenant: t, Class: "interactive", Share: 0.04, Deadline: Deadline},
			Source{Tenant: t, Class: "batch", Share: 0.04, Deadline: 30 * time.Second})
	}
	runaway.Sources = append(runaway.Sources, others...)
	runaway.Floors = []Floor{unanswered}
	for _, s := range others {
		runaway.Floors = append(runaway.Floors, success(s.Name(), 99))
	}
	for i := range runaway.Sources {
		runaway.Sources[i].Share /= 1.4
	}
	production := Scenario{Name: "production", Production: &Production{Base: 0.65}, Sources: prodSources()}
	production.Floors = productionFloors(production.Sources)
	all := []Scenario{
		storm(2), storm(5), storm(10),
		{
			Name: "slowdown-4x", Load: 2, Slowdown: 4,
			Sources: []Source{{Class: "interactive", Share: 1, Deadline: Deadline}},
			// Learnt, the gateway holds one to four calls waiting at
			// the provider (docs/learned-concurrency.md): four times
			// slower, each waits four times as long, and callers whose
			// 2 s barely covers the slowed p95 (1.8 s) give up on
			// more of them — told 19 slots rather than 16, the same:
			// 0.9–3.9% by seed (docs/perf.md, "The promise under the
			// defaults"), so the learnt bound leaves a point of room.
			Floors: []Floor{goodput(90), waste(2).learnt(5), unanswered},
		},
		{
			Name: "mixed-deadlines", Load: 3,
			Sources: []Source{
				{Class: "interactive", Share: 0.3, Deadline: Deadline},
				{Class: "batch", Share: 0.7, Deadline: 30 * time.Second},
			},
			Floors: []Floor{success("interactive", 99), unanswered},
		},
		{
			Name: "speculative-flood", Load: 5,
			Sources: []Source{
				{Class: "interactive", Share: 0.15, Deadline: Deadline},
				{Class: "speculative", Share: 0.85, Deadline: Deadline},
			},
			Floors: []Floor{success("interactive", 99), unanswered},
		},
		runaway,
		{
			Name: "replicas-3", Load: 5, Replicas: 3,
			Sources: []Source{{Class: "interactive", Share: 1, Deadline: Deadline}},
			Floors:  []Floor{goodput(95), waste(1), unanswered, peak(Slots + 4)},
		},
		production,
	}
	for i := range all {
		all[i].Floors = append(all[i].Floors, believed)
	}
	return all
}

// Lookup returns the scenarios whose names are in names (comma-separated;
// empty: all), or an error naming one that is not in the suite.
func Lookup(names string) ([]Scenario, error) {
	all := Suite()
	if strings.TrimSpace(names) == "" {
		return all, nil
	}
	var out []Scenario
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, sc := range all {
			if sc.Name == n {
				out = append(out, sc)
				found = true
			}
		}
		if !found {
			var known []string
			for _, sc := range all {
				known = append(known, sc.Name)
			}
			return nil, fmt.Errorf("no scenario %q in the suite (%s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}
