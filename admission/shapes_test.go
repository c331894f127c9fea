package admission

import (
	"testing"
	"time"
)

// Two callers of one key, one of short calls and one of long: each is
// estimated by its own shape once the shape has its samples, not by the
// mixture of the key.
const (
	shortShape, longShape = 1, 2
	shortFamily           = 11
	longFamily            = 12
)

// warmShapes records n samples of each shape: short calls of 100 ms, long
// calls of 1 s, one key ("m").
func warmShapes(c *Core, n int) {
	for range n {
		c.record(t0, "m", shortShape, shortFamily, Outcome{ServiceTime: 100 * time.Millisecond})
		c.record(t0, "m", longShape, longFamily, Outcome{ServiceTime: time.Second})
	}
}

func TestShapesEstimateEachCallByItsOwn(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 100})
	warmShapes(c, 100)
	short := Request{Key: "m", Shape: shortShape, Family: shortFamily, Deadline: at(10_000)}
	long := Request{Key: "m", Shape: longShape, Family: longFamily, Deadline: at(10_000)}
	ds, err := c.Estimate(t0, short)
	if err != nil {
		t.Fatal(err)
	}
	dl, _ := c.Estimate(t0, long)
	if ds.ServiceP95 > 150*time.Millisecond || dl.ServiceP95 < 900*time.Millisecond {
		t.Fatalf("p95 of a short call %v, of a long one %v: want each its shape's (about 100ms, 1s)", ds.ServiceP95, dl.ServiceP95)
	}
	// By the key alone, both are the mixture's: its p95 is the long
	// calls'. A short call with a 500ms budget fits its own p95.
	tight := short
	tight.Deadline = at(500)
	if d := mustArrive(t, c, t0, tight, &Ticket{}); d.Verdict != Granted {
		t.Errorf("a short call with 500ms left: %v, want granted on its own p95", d.Verdict)
	}
	keyOnly := Request{Key: "m", Deadline: at(500)}
	if d, _ := c.Estimate(t0, keyOnly); d.ServiceP95 < 900*time.Millisecond {
		t.Errorf("a call of no shape: p95 %v, want the key's mixture (about 1s)", d.ServiceP95)
	}
}

// A queue of short calls is a short wait: the work ahead of a newcomer is
// counted in time (each call's shape's mean), not in calls.
func TestQueuedWorkIsCountedByShape(t *testing.T) {
	wait := func(shape, family uint64) time.Duration {
		c := newCore(t, Config{Concurrency: 1, MaxQueue: 100})
		warmShapes(c, 100)
		mustArrive(t, c, t0, Request{Key: "m", Shape: longShape, Family: longFamily}, &Ticket{}) // the slot
		for range 10 {
			mustArrive(t, c, t0, Request{Key: "m", Shape: shape, Family: family, Deadline: at(60_000)}, &Ticket{})
		}
		d, _ := c.Estimate(t0, Request{Key: "m", Shape: longShape, Family: longFamily, Deadline: at(60_000)})
		return d.EstimatedWait
	}
	shorts, longs := wait(shortShape, shortFamily), wait(longShape, longFamily)
	if shorts*3 > longs {
		t.Fatalf("behind ten short calls the wait is %v, behind ten long ones %v: want the short calls' a fraction of the long", shorts, longs)
	}
}

// A shape estimates by its family until it has samples enough of its
// own: a new size of a known caller is not the key's mixture.
func TestShapeFallsBackToItsFamily(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 100})
	warmShapes(c, 100)
	const newShape = 3
	for range 20 {
		c.record(t0, "m", newShape, shortFamily, Outcome{ServiceTime: 120 * time.Millisecond})
	}
	d, _ := c.Estimate(t0, Request{Key: "m", Shape: newShape, Family: shortFamily, Deadline: at(10_000)})
	if d.ServiceP95 > 200*time.Millisecond {
		t.Fatalf("a shape of 20 samples in the short family: p95 %v, want the family's (about 100ms), not the key's", d.ServiceP95)
	}
}

// However many shapes come, the gate keeps at most MaxShapes windows of
// each kind; a shape that has had no sample for a minute gives its place,
// and while every one is in use a new shape goes by its family or key.
func TestShapesAreBounded(t *testing.T) {
	c := newCore(t, Config{Concurrency: 1, MaxQueue: 10, MaxShapes: 4})
	for i := range 10 {
		c.record(t0, "m", uint64(100+i), uint64(200+i), Outcome{ServiceTime: time.Second})
	}
	if len(c.shapes) != 4 || len(c.families) != 4 {
		t.Fatalf("%d shapes, %d families after 10 of each, want at most 4", len(c.shapes), len(c.families))
	}
	if c.shapes[109] != nil {
		t.Fatal("a fifth shape took the place of one in use")
	}
	later := t0.Add(2 * time.Minute)
	c.record(later, "m", 109, 209, Outcome{ServiceTime: time.Second})
	if c.shapes[109] == nil || len(c.shapes) != 4 {
		t.Fatalf("a shape seen when the others have idled for a minute: kept %v, %d shapes; want it kept in place of one", c.shapes[109] != nil, len(c.shapes))
	}
	off := newCore(t, Config{Concurrency: 1, MaxQueue: 10, MaxShapes: -1})
	off.record(t0, "m", 1, 2, Outcome{ServiceTime: time.Second})
	if len(off.shapes) != 0 || len(off.families) != 0 {
		t.Fatal("MaxShapes -1 kept a shape")
	}
}
