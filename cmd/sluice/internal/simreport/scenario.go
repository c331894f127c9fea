package simreport

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/scenario"
)

// scenarioSection is a scenario's section of results.md
// (templates/scenario.md.tmpl): its table, what the table shows, and the
// spend limiter's tables when its traffic runs away.
type scenarioSection struct {
	Scenario *scenario.Scenario
	// Description is the scenario's, trimmed.
	Description string
	// First is the first run, for the capacity and the request count.
	First *sim.Result
	Table table
	// AllSame are the loads at which every policy gave the same figures.
	AllSame []float64
	// Unchanged are the sluice rungs that gave the same figures as the
	// rung above them at some load (AllSame left out).
	Unchanged []unchanged
	// Best is, per load, the best baseline's goodput against sluice's.
	Best []bestBaseline
	// Spend is nil unless the scenario's traffic runs away under the
	// spend limiter.
	Spend *spendSection
}

type unchanged struct {
	Label, Above string
	Loads        []float64
}

type bestBaseline struct {
	Load             float64
	Baseline, Sluice *sim.Result
}

func newScenarioSection(sw *sweep) *scenarioSection {
	s := &scenarioSection{
		Scenario:    sw.Scenario,
		Description: strings.TrimSpace(sw.Scenario.Description),
		First:       sw.Results[0][0],
		Table:       sweepTable(sw.Sweep),
		Spend:       newSpendSection(sw),
	}
	same := func(a, b *sim.Result) bool {
		return a.OnTime == b.OnTime && a.Billed == b.Billed && a.Wasted == b.Wasted && a.Attempts == b.Attempts
	}
	// At a load where every policy gives the same figures, nothing queued
	// long enough for them to differ.
	for i, load := range sw.Loads {
		row := sw.Results[i]
		if !slices.ContainsFunc(row, func(r *sim.Result) bool { return !same(r, row[0]) }) {
			s.AllSame = append(s.AllSame, load)
		}
	}
	// A rung whose figures equal those of the rung above it adds nothing
	// there: its feature never engaged.
	for j := 1; j < len(sw.Policies); j++ {
		if !sw.Policies[j].Sluice || !sw.Policies[j-1].Sluice {
			continue
		}
		u := unchanged{Label: sw.Policies[j].Label, Above: sw.Policies[j-1].Label}
		for i, load := range sw.Loads {
			if !slices.Contains(s.AllSame, load) && same(sw.Results[i][j-1], sw.Results[i][j]) {
				u.Loads = append(u.Loads, load)
			}
		}
		if len(u.Loads) > 0 {
			s.Unchanged = append(s.Unchanged, u)
		}
	}
	if j := slices.IndexFunc(sw.Policies, func(p sim.Policy) bool { return p.Name == "sluice" }); j >= 0 {
		for i, load := range sw.Loads {
			best := -1
			for k, p := range sw.Policies {
				if !p.Sluice && (best < 0 || sw.Results[i][k].GoodputPct > sw.Results[i][best].GoodputPct) {
					best = k
				}
			}
			if best >= 0 {
				s.Best = append(s.Best, bestBaseline{load, sw.Results[i][best], sw.Results[i][j]})
			}
		}
	}
	return s
}
