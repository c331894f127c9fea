package gateway

import (
	"errors"
	"io"

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
		b.c.meter.write(p[:n])
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.c.finish(b.result)
	default:
		// The stream broke off: the caller left, the deadline cut it, or
		// the provider dropped the connection.
		b.c.finish(admission.Canceled)
	}
	return n, err
}

// Close ends the call; a body closed before its end was abandoned.
func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.c.finish(admission.Canceled)
	return err
}
