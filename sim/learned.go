package sim

import (
	"slices"
	"time"
)

// LearnedResult is what the policy learned did with the concurrency it
// was not told (Result.Learned, that policy only).
type LearnedResult struct {
	// Limit is the learnt concurrency at the end of each bucket of the
	// run (Options.Bucket, 1s by default), from the first.
	Limit []int `json:"limit"`
	// WarmupSeconds is the start of the run the figures below leave out:
	// the time the controller is given to find the capacity.
	WarmupSeconds float64 `json:"warmup_seconds"`
	// ReachSeconds is when the on-time answers first averaged 90% of the
	// upstream's capacity over five seconds; -1 if they never did.
	ReachSeconds float64 `json:"reach_seconds"`
	// WarmupGoodputPct and GoodputPct are the on-time answers in the
	// warm-up and from its end to the upstream's first step (or the end
	// of the arrival window), as a percentage of the capacity then.
	WarmupGoodputPct float64 `json:"warmup_goodput_pct"`
	GoodputPct       float64 `json:"goodput_pct"`
	// ProviderQueueP99 and ProviderQueueMax are the calls found waiting
	// for one of the upstream's own slots by the calls sent after the
	// warm-up (before the first step, as GoodputPct).
	ProviderQueueP99 int `json:"provider_queue_p99"`
	ProviderQueueMax int `json:"provider_queue_max"`
}

// learnedWarmup is LearnedResult.WarmupSeconds.
const learnedWarmup = 20 * time.Second

// learnedMetrics accumulates the policy learned's figures.
type learnedMetrics struct {
	limit []int // per bucket; -1: unchanged since the bucket before
	queue []int // the upstream's queue each call found, after the warm-up
}

// learnedLimit records the learnt limit n at now.
func (m *metrics) learnedLimit(now time.Duration, n int) {
	if m.learned == nil {
		m.learned = &learnedMetrics{limit: slices.Repeat([]int{-1}, len(m.good))}
	}
	m.learned.limit[m.bucket(now)] = n
}

// providerQueue records the calls waiting at the upstream that a call
// sent at now found there.
func (m *metrics) providerQueue(now time.Duration, n int) {
	if m.learned == nil || now < learnedWarmup || now >= m.s.firstStep() {
		return
	}
	m.learned.queue = append(m.learned.queue, n)
}

// firstStep is when the upstream first steps, or the end of the arrival
// window.
func (s *setup) firstStep() time.Duration {
	if st := s.sampler.steps; len(st) > 0 && st[0].at < s.window {
		return st[0].at
	}
	return s.window
}

// learnedResult summarises the policy learned's figures, nil for the
// other policies.
func (m *metrics) learnedResult() *LearnedResult {
	l := m.learned
	if l == nil {
		return nil
	}
	s := m.s
	r := &LearnedResult{WarmupSeconds: learnedWarmup.Seconds(), ReachSeconds: -1}
	last := 0
	for _, n := range l.limit {
		if n >= 0 {
			last = n
		}
		r.Limit = append(r.Limit, last)
	}
	end := s.firstStep()
	good := func(from, to time.Duration) float64 {
		n := 0
		for b := m.bucket(from); b < m.bucket(to) && b < len(m.good); b++ {
			n += int(m.good[b])
		}
		if c := s.capacityOver(from, to); c > 0 {
			return 100 * float64(n) / c
		}
		return 0
	}
	r.WarmupGoodputPct = good(0, min(learnedWarmup, end))
	if end > learnedWarmup {
		r.GoodputPct = good(learnedWarmup, end)
	}
	const stretch = 5 * time.Second
	for t := time.Duration(0); t+stretch <= end; t += s.bucket {
		if good(t, t+stretch) >= 90 {
			r.ReachSeconds = t.Seconds()
			break
		}
	}
	if len(l.queue) > 0 {
		q := slices.Clone(l.queue)
		slices.Sort(q)
		r.ProviderQueueP99 = q[(len(q)*99)/100]
		r.ProviderQueueMax = q[len(q)-1]
	}
	return r
}
