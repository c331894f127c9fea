package store

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable is matched (errors.Is) by every error of Redis.Do that
// says Redis did not answer — the breaker open (ErrOpen), a connection
// refused or dropped, a call past its timeout, a Redis loading its data or
// failing over — as against an answer that was an error (a script's, data
// that does not parse), which a later call would get again. Such an error
// is an *UnavailableError.
var ErrUnavailable = errors.New("store: redis unavailable")

// UnavailableError is Redis.Do's error when Redis did not answer: since
// when it has not, and when the breaker lets the next call through.
type UnavailableError struct {
	// Since is when Redis stopped answering: the first failed call of
	// the failures in a row this one belongs to (the breaker's since
	// while it is down or probing).
	Since time.Time
	// RetryAt is when the open breaker lets its next probe through; zero
	// when it lets calls through now (it is closed, or probing).
	RetryAt time.Time
	// Err is ErrOpen, or the call's error.
	Err error
}

func (e *UnavailableError) Error() string {
	if e.Err == ErrOpen {
		return ErrOpen.Error()
	}
	return ErrUnavailable.Error() + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes the error match ErrUnavailable whatever its cause.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// unreachable says whether err, a call's error, means that Redis did not
// answer, or answered that it cannot serve now: what waiting may cure.
// It is a list of what is known, not "anything but a reply", so that an
// error of the data (a value that does not parse) is never mistaken for
// an outage and retried for ever.
func unreachable(err error) bool {
	var ne net.Error // refused, reset, timed out, not resolved
	switch {
	case errors.Is(err, context.DeadlineExceeded), // the call's timeout
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), // the connection dropped mid-answer
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, redis.ErrClosed), // the client closed: the gateway is shutting down
		errors.As(err, &ne):
		return true
	}
	// Replies that say Redis cannot serve yet: loading its data after a
	// restart, a replica promoted or demoted, a cluster or master down,
	// its connections full.
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err)
}
