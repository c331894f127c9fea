//go:build race

package config

// raceBuild: TestConfigAtTheBoundsLoads parses a 6.7 MB config, which
// takes 2 s, and 15 s under the race detector: it skips under it.
const raceBuild = true
