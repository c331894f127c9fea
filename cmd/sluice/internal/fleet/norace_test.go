//go:build !race

package fleet

import "time"

// median is the tests' provider service time (see race_test.go).
const median = 300 * time.Millisecond

// maxWaste is the share of billed calls the storm test lets be wasted (see
// race_test.go).
const maxWaste = 0.01
