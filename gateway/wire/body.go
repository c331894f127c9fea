package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

// The answers to a request body that could not be read whole. Their
// messages are fixed and say what went wrong in the caller's terms; the
// error that caused them (a socket error naming both addresses, a Go
// runtime string) is Cause, for the log with the request id, never for the
// body.
const (
	// CodeBodyTooLarge: over the route's limit (413), from Content-Length
	// before any byte is read or while a chunked body is read.
	CodeBodyTooLarge = "body_too_large"
	// CodeBodyStalled: the body did not arrive within its read deadline
	// (408; the SDKs retry it, and a second attempt may well get through).
	CodeBodyStalled = "body_stalled"
	// CodeBodyIncomplete: the connection ended, or the chunked encoding
	// broke, before the body's declared end (400).
	CodeBodyIncomplete = "body_incomplete"
	// CodeInvalidJSON: the body is not well-formed JSON (400).
	CodeInvalidJSON = "invalid_json"
)

// BodyTooLarge is the 413 for a body over limit bytes; name is the config
// key that sets it (limits.max_body_bytes, batch.max_file_bytes).
func BodyTooLarge(name string, limit int64) *BadRequest {
	return &BadRequest{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
		Msg: fmt.Sprintf("the request body is larger than %s (%d bytes)", name, limit)}
}

// BodyError is the answer to err, returned while reading a request body
// bounded by http.MaxBytesReader at limit bytes (name is the limit's
// config key): a 413 when the limit was passed, a 408 when the body
// stalled past its read deadline, otherwise a 400 for a body cut short.
// err is kept as Cause.
func BodyError(err error, name string, limit int64) *BadRequest {
	var tooBig *http.MaxBytesError
	var netErr net.Error
	var br *BadRequest
	switch {
	case errors.As(err, &br):
		return br
	case errors.As(err, &tooBig):
		b := BodyTooLarge(name, limit)
		b.Cause = err
		return b
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return &BadRequest{Status: http.StatusRequestTimeout, Code: CodeBodyStalled, Cause: err,
			Msg: "the request body stalled: it did not arrive whole within the time allowed for it (server.read_body_timeout); send it again"}
	}
	return &BadRequest{Status: http.StatusBadRequest, Code: CodeBodyIncomplete, Cause: err,
		Msg: "the request body was cut off before its declared end (the connection closed or its chunked encoding broke)"}
}

// InvalidJSON is the 400 for a body that is not well-formed JSON, err
// being encoding/json's error: the message names the byte offset where a
// syntax error was found, not encoding/json's wording.
func InvalidJSON(err error) *BadRequest {
	var syn *json.SyntaxError
	msg := "the request body is not valid JSON"
	switch {
	case errors.As(err, &syn):
		msg = fmt.Sprintf("the request body is not valid JSON: malformed at byte %d", syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		msg = "the request body is not valid JSON: it ends before its JSON value does"
	}
	return &BadRequest{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Msg: msg, Cause: err}
}
