//go:build !race

package promise

const raceEnabled = false
