package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/nornq/norn"
)

// statusOf is the one place that maps norn error codes to HTTP status codes
// (API-WIRE.md). Everything that writes an error goes through it, so the
// client can map statuses back without guessing.
func statusOf(c norn.Code) int {
	switch c {
	case norn.CodeNotFound:
		return http.StatusNotFound
	case norn.CodeConflict, norn.CodeLeaseLost, norn.CodeCancelled, norn.CodeDuplicate:
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
	default:
		return http.StatusInternalServerError
	}
}

// wireError is the JSON form of an error on the wire:
// {"code":"…","message":"…","field":"…"}. norn.Error has no JSON tags (its
// cause is not for clients), so the server writes this shape everywhere an
// error is embedded in a response: error bodies, lease batch results, the
// last line of an NDJSON stream.
type wireError struct {
	Code    norn.Code `json:"code"`
	Message string    `json:"message"`
	Field   string    `json:"field,omitempty"`
}

// errorBody is the body of every error response.
type errorBody struct {
	Error wireError `json:"error"`
}

// toNornError classifies any error into a *norn.Error. Errors that are not
// typed become internal errors whose message does not leak details; the
// caller logs the original.
func toNornError(err error) *norn.Error {
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

// toWire converts a typed error for the wire. Internal errors keep a generic
// message: the details are logged, not sent.
func toWire(ne *norn.Error) wireError {
	msg := ne.Message
	if msg == "" {
		msg = string(ne.Code)
	}
	if ne.Code == norn.CodeInternal {
		msg = "internal error"
	}
	return wireError{Code: ne.Code, Message: msg, Field: ne.Field}
}

// writeError writes err as a JSON error response with its mapped status.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ne := toNornError(err)
	status := statusOf(ne.Code)
	if status >= 500 && r.Context().Err() == nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Any("error", err))
	}
	if ne.Code == norn.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="norn"`)
	}
	writeJSON(w, status, errorBody{Error: toWire(ne)})
}

// writeJSON writes v as the JSON response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}
