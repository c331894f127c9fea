package admission

import "time"

// Shapes: service times by what is known of a call at admission.
//
// A gate that keeps its statistics by model alone judges a 13-token code
// completion by the p95 of 1,000-token chats, and a chat by a mixture
// dominated by completions: the completion is refused for a wait it would
// have had time for, the chat admitted on a p95 it will not meet. What is
// known of a call before it runs — who sends it, the model, the
// endpoint, the size of its prompt, its max_tokens — predicts its time
// far better: a service's calls take alike, another's differently. The
// caller of the gate folds these into a shape (Request.Shape, a hash;
// package chain makes it), and the gate keeps a window of service times
// per shape besides the one per key and the one of all calls.
//
// Shapes come in families (Request.Family: the same caller, model and
// endpoint, any size): a call is estimated by its shape's window once it
// has minShapeSamples samples, else by its family's once it has
// minKeySamples, else by its key's, else by all calls'. A service whose
// prompts spread over several sizes is estimated as one until each size
// has enough calls of its own, and a rare size never by a handful of
// samples. The windows are those of the keys (window.go: a ring and a
// log-bucketed histogram, a level shift followed), so a shape's p95
// follows a slowdown as a key's does.
//
// Memory is bounded however many shapes appear: at most Config.MaxShapes
// windows, each a fixed size. A shape seen when the table is full takes
// the place of the shape recorded least recently, if that one has had
// no sample for shapeIdle — a flood of one-off shapes cannot push out the
// shapes in use — and otherwise has no window of its own: it is
// estimated by its key's, as a call with no shape is.
//
// The expected work of a queued call is its shape's mean over the mean
// of all calls (unitsOf): the wait ahead of a newcomer is the work of
// the calls ahead, not their count, so a queue of short calls is seen to
// drain faster than one of long calls.

// shapeStats is one shape's window, and when it last had a sample.
type shapeStats struct {
	w    *window
	last time.Time
}

// shapeIdle is how long a shape must have had no sample before a new
// shape may take its place in a full table.
const shapeIdle = time.Minute

// recordShape adds a service time of shape (or family: table is then
// c.families) at now.
func (c *Core) recordShape(now time.Time, table map[uint64]*shapeStats, shape uint64, d time.Duration) {
	st := table[shape]
	if st == nil {
		if c.cfg.MaxShapes < 0 {
			return
		}
		if len(table) >= c.cfg.MaxShapes {
			var idle uint64
			var oldest time.Time
			for k, v := range table {
				if oldest.IsZero() || v.last.Before(oldest) {
					idle, oldest = k, v.last
				}
			}
			if oldest.IsZero() || now.Sub(oldest) < shapeIdle {
				return // every shape is in use: this one goes by its key
			}
			st = table[idle]
			delete(table, idle)
			st.w.reset()
		} else {
			st = &shapeStats{w: newWindow(c.cfg.ServiceWindow, !c.cfg.NoEarlyRefusal)}
		}
		table[shape] = st
	}
	st.w.add(d)
	st.last = now
}

// minShapeSamples is how many samples a shape needs before its own
// statistics are trusted over its family's: its mean within a tenth or so
// for the spread of LLM latencies, and a p95 that is not its largest
// sample.
const minShapeSamples = 64

// shapeWindow is the window that estimates calls of shape and family:
// the shape's when it has minShapeSamples, else the family's when it has
// minKeySamples, else nil.
func (c *Core) shapeWindow(shape, family uint64) *window {
	if shape != 0 && len(c.shapes) > 0 {
		if st := c.shapes[shape]; st != nil && st.w.count() >= minShapeSamples {
			return st.w
		}
	}
	if family != 0 && len(c.families) > 0 {
		if st := c.families[family]; st != nil && st.w.count() >= minKeySamples {
			return st.w
		}
	}
	return nil
}

// expected is the window that estimates a call of key, shape and family
// (see shapeWindow; then the key's, then all calls'), and nil without
// samples.
func (c *Core) expected(key string, shape, family uint64) *window {
	if w := c.shapeWindow(shape, family); w != nil {
		return w
	}
	if key != "" {
		if w := c.keys[key]; w != nil && w.count() >= minKeySamples {
			return w
		}
	}
	if c.all.count() > 0 {
		return c.all
	}
	return nil
}

// unitsOf is the expected work of a call of mean service time mean, in
// calls of the mean service time of all; 1 without statistics. A mean
// within a tenth of all calls' counts as theirs: two windows of one
// dependency's times differ by a few percent by chance, and a difference
// that small, counted, would only move one caller's waits against
// another's by that chance. It is kept within [1/64, 64]: a call
// estimated by a window of a few slow samples must not count as the whole
// queue.
func (c *Core) unitsOf(mean time.Duration) float64 {
	all := c.all.mean()
	if all <= 0 || mean <= 0 {
		return 1
	}
	u := float64(mean) / float64(all)
	if u > 1/1.1 && u < 1.1 {
		return 1
	}
	return min(max(u, 1.0/64), 64)
}

// place is where a request would wait, as its admission sees it: its
// lane class, when it is due (Ticket.due), its expected work, and
// the service times its decision uses.
type place struct {
	class    uint8
	due      time.Time
	units    float64
	p50, p95 time.Duration
}

// placeOf works out req's place at now.
func (c *Core) placeOf(now time.Time, req *Request) place {
	var pl place
	pl.p50, pl.p95 = c.service(now, req.Key, req.Shape, req.Family)
	hasDeadline := !req.Deadline.IsZero()
	pl.class = laneOf(req.Deadline.Sub(now), hasDeadline)
	pl.due = now // without a deadline, by its arrival (see lane.go)
	if hasDeadline {
		pl.due = req.Deadline
	}
	pl.units = 1
	if len(c.shapes) > 1 || len(c.families) > 1 || len(c.keys) > 1 {
		if w := c.expected(req.Key, req.Shape, req.Family); w != nil {
			pl.units = c.unitsOf(w.mean())
		}
	}
	return pl
}
