package config

import (
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/yamlpath"
)

// A pool's concurrency is learnt (package adaptive) when it is not
// configured — admission.concurrency absent with upstream, or
// upstreams[i].concurrency (and the model's) absent with upstreams — or
// when admission.learn is set, the configured number then a hard cap.
// admission.learn bounds every learnt pool; without it the defaults of
// adaptive.Config apply. Without learning, a configured number is fixed,
// adapted only by upstream_limit's AIMD on the provider's 429s, as
// before.

// learnFor is the learning of a pool whose concurrency is configured as
// configured (zero: absent): its bounds with their defaults, and whether
// it learns at all.
func (c Config) learnFor(configured int) (adaptive.Config, bool) {
	if configured != 0 && c.Admission.Learn == nil {
		return adaptive.Config{}, false
	}
	var l adaptive.Config
	if c.Admission.Learn != nil {
		l = *c.Admission.Learn
	}
	return l.WithDefaults(configured), true
}

// startConcurrency is a pool's gate's concurrency at start: the configured
// one, or the learning's initial limit.
func (c Config) startConcurrency(configured int) int {
	if l, ok := c.learnFor(configured); ok {
		return l.Initial
	}
	return configured
}

// ceilingFor is the most a pool's gate may run at: the configured one, or
// the learning's max.
func (c Config) ceilingFor(configured int) int {
	if l, ok := c.learnFor(configured); ok {
		return l.Max
	}
	return configured
}

// Learning is, per pool of the chain in its order (one with upstream),
// the bounds of its learnt concurrency with their defaults, or nil when
// its concurrency is fixed. c must have its defaults (WithDefaults).
func (c Config) Learning() []*adaptive.Config {
	var out []*adaptive.Config
	add := func(configured int) {
		if l, ok := c.learnFor(configured); ok {
			out = append(out, &l)
		} else {
			out = append(out, nil)
		}
	}
	if len(c.Upstreams) == 0 {
		add(c.Admission.Concurrency)
		return out
	}
	for _, d := range c.Upstreams {
		for _, m := range d.Models {
			add(m.concurrency(d))
		}
	}
	return out
}

// Learns reports whether any pool's concurrency is learnt.
func (c Config) Learns() bool {
	for _, l := range c.Learning() {
		if l != nil {
			return true
		}
	}
	return false
}

// validateLearn checks admission.learn, against the configured
// concurrency it is capped by, and that no learnt pool is shared by
// leases (store.redis), which divide a known number.
func (c Config) validateLearn() error {
	if l := c.Admission.Learn; l != nil {
		if err := l.Validate(); err != nil {
			return errorf("%v", yamlpath.At("admission.learn", err))
		}
		if n := c.Admission.Concurrency; n != 0 && !c.Admission.concurrencyDerived {
			if l.Max > n {
				return errorf("admission.learn.max: %d is above admission.concurrency (%d), which caps it", l.Max, n)
			}
			if l.Initial > n {
				return errorf("admission.learn.initial: %d is above admission.concurrency (%d), which caps it", l.Initial, n)
			}
		}
	}
	if s := c.Store; s != nil && s.Redis != nil && (s.Redis.Lease == nil || !s.Redis.Lease.Disabled) && c.Learns() {
		field := "admission.concurrency"
		if len(c.Upstreams) > 0 {
			field = "upstreams[i].concurrency"
		}
		return errorf("%s is required with store.redis: the replicas share a known concurrency by leases, and cannot learn one each (or set store.redis.lease.disabled)", field)
	}
	return nil
}
