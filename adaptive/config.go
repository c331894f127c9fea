package adaptive

import (
	"github.com/sluicehq/sluice/internal/yamlpath"
)

// Defaults applied to zero fields of Config.
const (
	// DefaultMin is the floor: one call at a time still measures the
	// provider.
	DefaultMin = 1
	// DefaultMax is the ceiling when nothing else bounds the limit: well
	// above what one key of a provider serves at once, low enough that a
	// provider that never shows a queue is not sent an unbounded burst.
	DefaultMax = 1000
	// DefaultInitial is where a pool starts before it has measured
	// anything: few enough that a small deployment is not flooded in its
	// first second, and the slow start doubles it within a few windows.
	DefaultInitial = 4
	// MaxLimit bounds Min, Max and Initial (as admission.concurrency is
	// bounded: each slot is a goroutine and a connection).
	MaxLimit = 100_000
)

// Config bounds the learned concurrency. The zero Config is valid and
// gives the defaults. It is also the YAML of admission.learn in the
// gateway's configuration and of sluice.learn in a simulator scenario.
type Config struct {
	// Min is the lowest the limit goes, whatever the provider answers.
	// Zero means DefaultMin (1).
	Min int `yaml:"min"`
	// Max is the highest it goes. Zero means DefaultMax (1000), or the
	// configured concurrency when there is one (which is then a hard cap:
	// Max may not exceed it).
	Max int `yaml:"max"`
	// Initial is where it starts. Zero means DefaultInitial (4), raised to
	// Min and cut to Max.
	Initial int `yaml:"initial"`
}

// Validate checks c as written in a configuration file, naming the first
// bad key by its YAML name (a *yamlpath.FieldError relative to the
// section): each field 0 to MaxLimit, and min ≤ initial ≤ max where they
// are set.
func (c Config) Validate() error {
	for _, f := range []struct {
		key string
		v   int
	}{{"min", c.Min}, {"max", c.Max}, {"initial", c.Initial}} {
		if f.v < 0 || f.v > MaxLimit {
			return yamlpath.Errorf(f.key, "%d is out of range, want 0..%d (0: the default)", f.v, MaxLimit)
		}
	}
	if c.Max != 0 && c.Min > c.Max {
		return yamlpath.Errorf("min", "%d is above max (%d)", c.Min, c.Max)
	}
	if c.Initial != 0 && c.Initial < c.Min {
		return yamlpath.Errorf("initial", "%d is below min (%d)", c.Initial, c.Min)
	}
	if c.Initial != 0 && c.Max != 0 && c.Initial > c.Max {
		return yamlpath.Errorf("initial", "%d is above max (%d)", c.Initial, c.Max)
	}
	return nil
}

// WithDefaults returns c with its zero fields filled in; ceiling, when
// positive, is the configured concurrency: Max's default, and a cap on
// Max and Initial.
func (c Config) WithDefaults(ceiling int) Config {
	if c.Min == 0 {
		c.Min = DefaultMin
	}
	if c.Max == 0 {
		c.Max = DefaultMax
		if ceiling > 0 {
			c.Max = ceiling
		}
	}
	if ceiling > 0 {
		c.Max = min(c.Max, ceiling)
	}
	c.Min = min(c.Min, c.Max)
	if c.Initial == 0 {
		c.Initial = DefaultInitial
	}
	c.Initial = max(c.Min, min(c.Initial, c.Max))
	return c
}
