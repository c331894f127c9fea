package dashboard

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/spend"
)

// capacityReason names the refusals that say capacity is missing.
var capacityReason = map[string]bool{
	admission.ReasonQueueWait.String(): true,
	admission.ReasonQueueFull.String(): true,
	admission.ReasonEvicted.String():   true,
	admission.ReasonExpired.String():   true,
}

// storeUp is Store.State while Redis answers (store.StateUp: this
// package does not import the store).
const storeUp = "up"

// status is the status of recent samples (oldest first, the last being
// now). top names the classes of the highest rank. The most urgent finding
// is the text; the rest are details.
func status(recent []*Sample, top map[string]bool) Status {
	if len(recent) == 0 {
		return Status{Level: "ok", Text: "Starting: no sample yet"}
	}
	last := recent[len(recent)-1]
	var topShed, otherShed float64
	byClass := map[string]float64{}
	policy := map[string]float64{} // refusals by the spend policy or the retry budget, by reason
	for _, d := range recent {
		for reason, n := range d.RefusedReason {
			if !capacityReason[reason] && reason != admission.ReasonDraining.String() {
				policy[reason] += n
			}
		}
		for class, n := range d.ShedClass {
			byClass[class] += n
			if top[class] {
				topShed += n
			} else {
				otherShed += n
			}
		}
	}
	type finding struct {
		level, text string
	}
	var found []finding
	if last.Draining {
		found = append(found, finding{"warn", "Draining: new work is refused while the gateway shuts down"})
	}
	var down []string
	for _, p := range last.Pools {
		if p.Down {
			down = append(down, p.Name)
		}
	}
	if len(down) > 0 {
		found = append(found, finding{"warn", fmt.Sprintf("Deployment down, calls going elsewhere and one probe at a time: %s", strings.Join(down, ", "))})
	}
	if st := last.Store; st != nil && st.State != storeUp {
		since := time.UnixMilli(st.Since)
		found = append(found, finding{"warn", fmt.Sprintf("Redis unreachable since %s UTC (for %v): the replicas share nothing until it answers again, and Batch API calls get 503",
			since.UTC().Format(time.TimeOnly), max(0, time.UnixMilli(last.Time).Sub(since)).Round(time.Second))})
	}
	if topShed > 0 {
		found = append(found, finding{"crit", fmt.Sprintf("%s work is being shed: capacity is missing (%s refused in the last 5 minutes)",
			capitalize(strings.Join(sortedNames(top, byClass), ", ")), count(topShed))})
	}
	if sp := last.Spend; sp != nil && (sp.Alerting || len(sp.TenantsAlert) > 0) {
		who := "global"
		if !sp.Alerting {
			who = "tenant " + strings.Join(sp.TenantsAlert, ", ")
		}
		found = append(found, finding{"crit", fmt.Sprintf("Spend rate over its alert level (%s)", who)})
	}
	if sp := last.Spend; sp != nil && sp.Stage != spend.StageNormal.String() {
		found = append(found, finding{"warn", fmt.Sprintf("Spend ceiling in force: stage %s", sp.Stage)})
	}
	if otherShed > 0 {
		var lower []string
		for class := range byClass {
			if !top[class] {
				lower = append(lower, class)
			}
		}
		slices.Sort(lower)
		found = append(found, finding{"warn", fmt.Sprintf("Lower-priority work is being shed (%s: %s refused in the last 5 minutes)",
			strings.Join(lower, ", "), count(otherShed))})
	}
	if n := policy[admission.ReasonRetryBudget.String()]; n > 0 {
		// Not the budget's level: it is empty on an idle gateway too, and
		// fills with first attempts; what matters is retries refused.
		found = append(found, finding{"warn", fmt.Sprintf("Retry budget exhausted: %.0f retries refused in the last 5 minutes", n)})
		delete(policy, admission.ReasonRetryBudget.String())
	}
	if len(policy) > 0 {
		var parts []string
		for _, reason := range slices.Sorted(maps.Keys(policy)) {
			parts = append(parts, fmt.Sprintf("%s: %s", reason, count(policy[reason])))
		}
		found = append(found, finding{"warn", fmt.Sprintf("Refused by the spend policy in the last 5 minutes (%s)", strings.Join(parts, ", "))})
	}
	if len(found) == 0 {
		return Status{Level: "ok", Text: "All clear: nothing shed in the last 5 minutes"}
	}
	// The most severe first; among equals, the order above.
	slices.SortStableFunc(found, func(a, b finding) int { return cmp.Compare(severity(b.level), severity(a.level)) })
	st := Status{Level: found[0].level, Text: found[0].text}
	for _, f := range found[1:] {
		st.Details = append(st.Details, f.text)
	}
	return st
}

func severity(level string) int {
	switch level {
	case "crit":
		return 2
	case "warn":
		return 1
	}
	return 0
}

// sortedNames lists the top classes that were refused, or all of them.
func sortedNames(top map[string]bool, refused map[string]float64) []string {
	var names []string
	for class := range top {
		if refused[class] > 0 {
			names = append(names, class)
		}
	}
	slices.Sort(names)
	return names
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func count(n float64) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%.0f requests", n)
}
