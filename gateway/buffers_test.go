package gateway

import (
	"testing"

	"github.com/sluicehq/sluice/gateway/wire"
)

// TestStreamsTakeSmallCopyBuffers: the proxy's copy buffer is 32 KiB for
// a JSON answer and streamBufferSize for a stream, which holds its buffer
// for as long as it runs; each goes back to its own pool, and Put
// allocates nothing.
func TestStreamsTakeSmallCopyBuffers(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		want        int
	}{{"application/json", 32 << 10}, {"text/event-stream; charset=utf-8", streamBufferSize}} {
		c := &call{meter: wire.NewUsageMeter(tc.contentType)}
		pool := (*callBuffers)(c)
		if b := pool.Get(); len(b) != tc.want {
			t.Errorf("%s: a buffer of %d bytes, want %d", tc.contentType, len(b), tc.want)
		}
		pool.Put(nil)
		if c.copyBuf != nil {
			t.Errorf("%s: the buffer is still the call's after Put", tc.contentType)
		}
		if allocs := testing.AllocsPerRun(100, func() { pool.Put(pool.Get()) }); allocs != 0 {
			t.Errorf("%s: %v allocations a Get and Put, want 0", tc.contentType, allocs)
		}
	}
}
