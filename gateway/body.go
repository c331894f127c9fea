package gateway

import (
	"errors"
	"io"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// releasingBody holds the call's slot until the response body has been read
// to its end (or given up), not merely until the headers arrived: a stream
// occupies the provider for as long as it runs.
type releasingBody struct {
	io.ReadCloser
	c      *call
	result admission.Result
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.meter.Feed(p[:n])
		b.c.idem.Capture(p[:n]) // Idempotency-Key: a copy, the caller's bytes are not held back
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.c.idem.Complete(time.Now()) // the whole answer: kept for duplicates
		b.c.finish(b.result, answered(b.result))
	default:
		// The stream broke off: the caller left, a deadline cut it, or
		// the provider dropped the connection.
		b.c.cutShort(err)
	}
	return n, err
}

// Close ends the call; a body closed before its end was abandoned. An
// answer captured for an Idempotency-Key is first read to its end (within
// the call's deadline and max_entry_bytes) for the caller's retry, which
// then costs nothing instead of a second call.
func (b *releasingBody) Close() error {
	if b.c.idem.WantsRest() {
		buf := copyBuffers.Get().(*[]byte)
		for b.c.idem.WantsRest() {
			if _, err := b.Read(*buf); err != nil {
				break
			}
		}
		copyBuffers.Put(buf)
	}
	err := b.ReadCloser.Close()
	b.c.finish(admission.Canceled, b.c.cutBy(false))
	return err
}
