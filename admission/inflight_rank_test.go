package admission

import (
	"slices"
	"testing"
)

// TestInFlightByRank: Stats counts the slots in use by the rank they were
// served at — granted at once, granted from the queue, released through a
// Permit or through Core.Release — which is the demand a replica publishes
// for its lease of a cluster's slots.
func TestInFlightByRank(t *testing.T) {
	g, err := New(Config{Concurrency: 2, MaxQueue: 4})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := g.Rank(Request{Class: ClassSpeculative})
	inter, _ := g.Rank(Request{Class: ClassInteractive})
	want := func(what string, byRank map[int]int) {
		t.Helper()
		s := g.Stats()
		w := make([]int, len(s.Depth))
		for r, n := range byRank {
			w[r] = n
		}
		if !slices.Equal(s.InFlightByRank, w) {
			t.Fatalf("%s: in flight by rank %v, want %v", what, s.InFlightByRank, w)
		}
	}
	a, err := g.TryAcquire(Request{Class: ClassSpeculative})
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.TryAcquire(Request{Class: ClassInteractive})
	if err != nil {
		t.Fatal(err)
	}
	want("two granted", map[int]int{spec: 1, inter: 1})
	a.Done(Outcome{Result: Success})
	a.Done(Outcome{Result: Success}) // counted once
	want("one done", map[int]int{inter: 1})
	b.Drop()
	want("all back", nil)

	c := newCore(t, Config{Concurrency: 1, MaxQueue: 4})
	mustArrive(t, c, at(0), Request{Class: ClassSpeculative}, &Ticket{})
	var tk Ticket
	mustArrive(t, c, at(0), Request{Class: ClassInteractive}, &tk)
	c.Release(at(10), Request{Class: ClassSpeculative}, Outcome{})
	if s := c.Stats(at(10)); s.InFlightByRank[inter] != 1 || s.InFlightByRank[spec] != 0 || !tk.Granted() {
		t.Fatalf("after the queued interactive call was served: %v", s.InFlightByRank)
	}
}
