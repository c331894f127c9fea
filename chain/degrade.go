package chain

import "time"

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
