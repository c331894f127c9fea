package sim

import (
	"testing"

	"github.com/sluicehq/sluice/sim/scenario"
)

// BenchmarkMillionRequests is the speed target: 1,000,000 logical requests
// of the retry storm at 5× (about 2.6 million attempts) through full sluice,
// on one goroutine, in at most 10 seconds. Run it with
//
//	go test -run '^$' -bench MillionRequests -benchtime 1x -count 5 ./sim/
func BenchmarkMillionRequests(b *testing.B) {
	sc, err := scenario.Load("../scenarios/retry-storm.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := Run(b.Context(), sc, "sluice", 5, Options{Requests: 1_000_000})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.Requests), "requests/op")
		b.ReportMetric(float64(r.Events), "events/op")
	}
}

// BenchmarkPolicies times 100,000 requests of the retry storm at 5× under
// each policy: the baselines' queues grow without bound, sluice's do not.
func BenchmarkPolicies(b *testing.B) {
	sc, err := scenario.Load("../scenarios/retry-storm.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range scenario.PolicyNames() {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(b.Context(), sc, p, 5, Options{Requests: 100_000}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
