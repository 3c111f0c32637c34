package norn

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error class. Over HTTP each maps to one
// status code (see server): not_found 404, conflict 409, lease_lost 409,
// cancelled 409, invalid_argument 400, too_large 413, unauthenticated 401,
// permission_denied 403, unavailable 503, insufficient_storage 507,
// internal 500.
type Code string

// The error codes of the API (docs/api.md).
const (
	CodeNotFound         Code = "not_found"
	CodeConflict         Code = "conflict"
	CodeLeaseLost        Code = "lease_lost"
	CodeCancelled        Code = "cancelled"
	CodeInvalidArgument  Code = "invalid_argument"
	CodeTooLarge         Code = "too_large"
	CodeUnauthenticated  Code = "unauthenticated"
	CodePermissionDenied Code = "permission_denied"
	CodeUnavailable      Code = "unavailable"
	// CodeInsufficientStorage: the store's disk is full (or below the
	// free space it keeps in reserve), so the write was refused; it has
	// changed nothing. Writes resume by themselves once space is freed.
	CodeInsufficientStorage Code = "insufficient_storage"
	CodeInternal            Code = "internal"
)

// Error is the typed error every Store returns for expected failures. Compare
// with errors.Is against the sentinels (ErrNotFound, ...), which match on Code,
// or extract with errors.As to read Field and Message.
type Error struct {
	Code    Code
	Message string
	// Field names the offending input for invalid_argument and too_large,
	// e.g. "queue", "tasks[3].priority", "update[0].if_version".
	Field string
	// Err is an underlying cause, if any.
	Err error
	// Cause classifies an unavailable error for clients (CauseUnreachable
	// and the other Cause constants; "" when unknown).
	Cause string
	// closed marks the unavailable errors that mean "this store (or
	// client) is closed", the only ones that match ErrClosed.
	closed bool
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = string(e.Code)
	}
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same Code, so errors.Is(err, ErrNotFound)
// works for every not-found error whatever its message. ErrClosed is
// narrower than its code: it matches only errors that say the store or
// client was closed (see Closed), not every unavailable error, so a
// database outage is not mistaken for a closed store.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Code != e.Code {
		return false
	}
	return !t.closed || e.closed
}

// Sentinels for errors.Is. Never return these directly where a message can
// say more; use the constructors.
var (
	ErrNotFound         = &Error{Code: CodeNotFound, Message: "not found"}
	ErrConflict         = &Error{Code: CodeConflict, Message: "conflict"}
	ErrLeaseLost        = &Error{Code: CodeLeaseLost, Message: "lease lost"}
	ErrCancelled        = &Error{Code: CodeCancelled, Message: "task was cancelled"}
	ErrInvalidArgument  = &Error{Code: CodeInvalidArgument, Message: "invalid argument"}
	ErrTooLarge         = &Error{Code: CodeTooLarge, Message: "too large"}
	ErrUnauthenticated  = &Error{Code: CodeUnauthenticated, Message: "unauthenticated"}
	ErrPermissionDenied = &Error{Code: CodePermissionDenied, Message: "permission denied"}
	ErrUnavailable      = &Error{Code: CodeUnavailable, Message: "unavailable"}
	// ErrInsufficientStorage matches writes refused because the disk is full.
	ErrInsufficientStorage = &Error{Code: CodeInsufficientStorage, Message: "insufficient storage"}
	// ErrClosed (code unavailable) is returned by calls after Close.
	ErrClosed = Closed("store is closed")
)

// Closed builds the error of a call made after Close: unavailable, and
// matching ErrClosed (as well as ErrUnavailable).
func Closed(message string) *Error {
	return &Error{Code: CodeUnavailable, Message: message, closed: true}
}

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid builds an invalid_argument error naming field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}

// TooLarge builds a too_large error naming field.
func TooLarge(field, format string, args ...any) *Error {
	return &Error{Code: CodeTooLarge, Field: field, Message: fmt.Sprintf(format, args...)}
}

// NotFound builds a not_found error for a task id.
func NotFound(id string) *Error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf("task %q not found", id)}
}

// IDTaken builds the conflict of a submission whose id belongs to a task
// in another queue (ids are unique across queues). It names the field and
// says nothing else of that task: not its queue, not its content.
func IDTaken(field, id string) *Error {
	return &Error{Code: CodeConflict, Field: field, Message: fmt.Sprintf("id %q is already taken", id)}
}

// LeaseLost builds a lease_lost error: the caller's lease is not the current one.
func LeaseLost(id string, lease uint64) *Error {
	return &Error{Code: CodeLeaseLost, Message: fmt.Sprintf("task %q: lease %d is not the current lease", id, lease)}
}

// Cancelled builds a cancelled error for a worker call on a cancelled task.
func Cancelled(id string) *Error {
	return &Error{Code: CodeCancelled, Message: fmt.Sprintf("task %q was cancelled", id)}
}

// Unavailable wraps a backend failure (database down, store closed) so
// clients see a retryable 503 rather than an internal error.
func Unavailable(err error) *Error {
	return &Error{Code: CodeUnavailable, Message: "store unavailable", Err: err}
}

// InsufficientStorage builds the error of a write refused for lack of disk
// space; err, if any, is the cause (the file system's ENOSPC).
func InsufficientStorage(message string, err error) *Error {
	return &Error{Code: CodeInsufficientStorage, Message: message, Err: err}
}

// CodeOf returns the Code of err, CodeInternal for untyped errors and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// WithFieldPrefix returns err with its Field prefixed (e.g. "tasks[3]."),
// used when one item of a batch is invalid. Non-*Error errors pass through.
func WithFieldPrefix(err error, prefix string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	if c.Field == "" {
		c.Field = prefix
	} else {
		c.Field = prefix + "." + c.Field
	}
	return &c
}
