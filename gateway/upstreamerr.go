package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
)

// failureKind is how a call the provider never answered is reported.
type failureKind struct {
	status int
	code   string
	msg    string
}

var (
	failUnreachable = failureKind{http.StatusBadGateway, "upstream_unreachable", "the provider could not be reached"}
	failReset       = failureKind{http.StatusBadGateway, "upstream_reset", "the provider closed the connection before answering"}
	failTimeout     = failureKind{http.StatusGatewayTimeout, "upstream_timeout", "the provider did not answer in time"}
)

// upstreamFailure classifies a transport error. The error itself names
// internal addresses ("read tcp 127.0.0.1:43798->10.0.0.7:443: connection
// reset by peer"), so only its kind goes to the caller.
func upstreamFailure(err error) failureKind {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return failReset
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return failTimeout
	}
	return failUnreachable
}
