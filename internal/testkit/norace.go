//go:build !race

package testkit

// Race is true when the test binary is built with the race detector
// (-race); see race.go.
const Race = false
