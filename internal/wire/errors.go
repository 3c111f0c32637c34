package wire

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nornq/norn"
)

// StatusOf is the one place that maps norn error codes to HTTP status codes.
// Everything the server writes as an error goes through it, and CodeOfStatus
// maps statuses back for bodies that say nothing (a proxy's error page).
func StatusOf(c norn.Code) int {
	switch c {
	case norn.CodeNotFound:
		return http.StatusNotFound
	case norn.CodeConflict, norn.CodeLeaseLost, norn.CodeCancelled:
		return http.StatusConflict
	case norn.CodeInvalidArgument:
		return http.StatusBadRequest
	case norn.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case norn.CodeUnauthenticated:
		return http.StatusUnauthorized
	case norn.CodePermissionDenied:
		return http.StatusForbidden
	case norn.CodeUnavailable:
		return http.StatusServiceUnavailable
	case norn.CodeInsufficientStorage:
		return http.StatusInsufficientStorage
	default:
		return http.StatusInternalServerError
	}
}

// CodeOfStatus maps an HTTP status to a code when the response body carries
// no error envelope (a proxy's error page, a 404 from a server of another
// kind). It is the inverse of StatusOf where StatusOf is one to one.
func CodeOfStatus(status int) norn.Code {
	switch status {
	case http.StatusNotFound:
		return norn.CodeNotFound
	case http.StatusConflict:
		return norn.CodeConflict
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType, http.StatusRequestTimeout:
		return norn.CodeInvalidArgument
	case http.StatusRequestEntityTooLarge:
		return norn.CodeTooLarge
	case http.StatusUnauthorized:
		return norn.CodeUnauthenticated
	case http.StatusForbidden, http.StatusMisdirectedRequest:
		return norn.CodePermissionDenied
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return norn.CodeUnavailable
	case http.StatusInsufficientStorage:
		return norn.CodeInsufficientStorage
	}
	return norn.CodeInternal
}

// Error is the JSON form of an error on the wire:
// {"code":"…","message":"…","field":"…"}. norn.Error has no JSON tags (its
// cause is not for clients), so this shape is written everywhere an error is
// embedded in a response: error bodies, lease batch results, the last line
// of an NDJSON stream.
type Error struct {
	Code    norn.Code `json:"code"`
	Message string    `json:"message"`
	Field   string    `json:"field,omitempty"`
	// Cause classifies an unavailable error (norn.CauseUnreachable, …).
	Cause string `json:"cause,omitempty"`
}

// Err converts the wire form back into the error the server had.
func (e *Error) Err() *norn.Error {
	return &norn.Error{Code: e.Code, Message: e.Message, Field: e.Field, Cause: e.Cause}
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// InternalErrorBody is the error body written when even encoding a response
// failed: the same bytes json.Marshal gives for an internal error.
const InternalErrorBody = `{"error":{"code":"internal","message":"internal error"}}` + "\n"

// Classify turns any error into a *norn.Error. Errors that are not typed
// become internal errors whose message does not leak details; the caller
// logs the original.
func Classify(err error) *norn.Error {
	var ne *norn.Error
	if errors.As(err, &ne) {
		return ne
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return norn.TooLarge("body", "request body is larger than the limit of %d bytes", mbe.Limit)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &norn.Error{Code: norn.CodeUnavailable, Message: "request cancelled", Err: err}
	}
	return &norn.Error{Code: norn.CodeInternal, Message: "internal error", Err: err}
}

// FromError converts a typed error for the wire. Internal errors keep a
// generic message: the details are logged, not sent.
func FromError(ne *norn.Error) Error {
	msg := ne.Message
	if msg == "" {
		msg = string(ne.Code)
	}
	if ne.Code == norn.CodeInternal {
		msg = "internal error"
	}
	return Error{Code: ne.Code, Message: msg, Field: ne.Field, Cause: ne.Cause}
}

// StatusError gives an error a status of its own where the code's usual
// status (StatusOf) would be less precise: 415 for a body that is not
// JSON, 408 for a body that never arrived, 421 for a Host the server does
// not answer, 429 with Retry-After for a caller over its limits. The
// client reads it back as the code.
type StatusError struct {
	Status int
	// RetryAfter, when positive, is sent as the Retry-After header.
	RetryAfter time.Duration
	Err        *norn.Error
}

func (e *StatusError) Error() string { return e.Err.Error() }
func (e *StatusError) Unwrap() error { return e.Err }

// WithStatus gives err the HTTP status status.
func WithStatus(status int, err *norn.Error) error {
	return &StatusError{Status: status, Err: err}
}

// Status is the HTTP status of any error: its StatusError's, else
// StatusOf its code.
func Status(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return StatusOf(Classify(err).Code)
}
