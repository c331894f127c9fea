//go:build race

package fleet

import "time"

// The race detector makes every request several times dearer: under it the
// tests' provider is slower, so that the same multiple of its capacity is
// a quarter of the requests.
const median = time.Second
