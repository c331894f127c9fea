package chain

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/yamlpath"
)

// DegradeConfig is degrading under load, the configuration's `degrade:`
// section (the gateway's, and the simulator's sluice.degrade): a call none
// of whose model's pools can serve it in time is sent one rung down the
// ladder instead of being refused, when its class allows it (Classes) or
// the call asks (Request.AllowDegrade). It becomes RoutingConfig's Ladder
// and DegradeClasses.
type DegradeConfig struct {
	// Ladder maps a model (as callers name it) to its cheaper rung, e.g.
	// gpt-4o: gpt-4o-mini. Both must be served by some pool; the ladder
	// must not loop.
	Ladder map[string]string `yaml:"ladder"`
	// Classes are the classes degraded under load without asking; each
	// must be a configured class, none twice. Empty means none: only calls
	// that ask.
	Classes []string `yaml:"classes"`
}

// Validate checks the ladder (ValidateLadder, served saying which models
// some pool serves) and the classes against the configured ones, naming
// the first bad entry by its path inside the section: ladder.<model>,
// classes[i].
func (d DegradeConfig) Validate(served func(model string) bool, classes []string) error {
	if err := yamlpath.At("ladder", ValidateLadder(d.Ladder, served)); err != nil {
		return err
	}
	first := map[string]int{}
	for i, class := range d.Classes {
		field := fmt.Sprintf("classes[%d]", i)
		if !slices.Contains(classes, class) {
			return yamlpath.Errorf(field, "%q is not a class of classes (%s)", class, strings.Join(classes, ", "))
		}
		if prev, dup := first[class]; dup {
			return yamlpath.Errorf(field, "%q is listed twice (also classes[%d])", class, prev)
		}
		first[class] = i
	}
	return nil
}

// ValidateLadder checks a ladder of models (the degrade section's, or the
// spend section's, whose rungs must be routed too): every model and rung
// served by some pool, and no loop. An error names the entry by its model
// (the path inside the ladder): the first unserved, or the one that leads
// back to a model already on the ladder.
func ValidateLadder(ladder map[string]string, served func(model string) bool) error {
	for _, from := range slices.Sorted(maps.Keys(ladder)) {
		to := ladder[from]
		if !served(from) {
			return yamlpath.Errorf(from, "model %q is served by no deployment", from)
		}
		if !served(to) {
			return yamlpath.Errorf(from, "rung %q is served by no deployment", to)
		}
		seen := map[string]bool{from: true}
		for prev, m := from, to; m != ""; prev, m = m, ladder[m] {
			if seen[m] {
				return yamlpath.Errorf(prev, "the ladder loops back to %q", m)
			}
			seen[m] = true
		}
	}
	return nil
}

// degrader is the degrade stage, degrade under load: a call that none of
// its model's pools would serve in time (by the route stage's estimates:
// the first usable pool's estimate misses the deadline, or it would serve
// the call late, see choice.late), and that may be degraded
// (RoutingConfig.Ladder, DegradeClasses, Request.AllowDegrade), goes one
// rung down the ladder when the rung's pools can serve it in time.
//
// It stands before the spend stage so that spend reserves once, at the
// model the call will call; it takes nothing, and the route stage then
// picks the pool of the model the call leaves spend with. A chain without
// a ladder has no degrade stage.
type degrader struct{ rt *router }

// Admit degrades the call when it should be; it never refuses one. A
// model the route stage cannot pick a pool for is left as it is, for the
// route stage to report.
func (d *degrader) Admit(now time.Time, r *Request) (Hold, error) {
	d.degrade(now, r)
	return nil, nil
}

// Peek degrades the call as Admit would: Admit takes nothing.
func (d *degrader) Peek(now time.Time, r *Request) error {
	d.degrade(now, r)
	return nil
}

func (d *degrader) degrade(now time.Time, r *Request) {
	rt := d.rt
	if !rt.mayDegrade(r) {
		return
	}
	c, err := rt.pick(now, r, r.Model, nil)
	if err != nil || c.inTime(now, r) {
		return
	}
	lower := rt.ladder[r.Model]
	if lc, err := rt.pick(now, r, lower, nil); err == nil && lc.fits {
		if r.Observe {
			r.WouldDegrade = lower
			return
		}
		r.AskedModel, r.Model, r.Degraded, r.DegradedBy = r.Model, lower, true, DegradedByLoad
	}
}

// mayDegrade says whether the call may be sent down the ladder under load:
// it has not been moved already, its model has a rung, and its class or
// its caller allows it.
func (rt *router) mayDegrade(r *Request) bool {
	return !r.Degraded && rt.ladder[r.Model] != "" && (r.AllowDegrade || rt.degrade[r.Class])
}

var (
	_ Stage  = (*degrader)(nil)
	_ Peeker = (*degrader)(nil)
)
