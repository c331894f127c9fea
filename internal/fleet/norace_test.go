//go:build !race

package fleet

import "time"

// median is the tests' provider service time (see race_test.go).
const median = 300 * time.Millisecond
