package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// writeError writes err as a JSON error response with the status
// wire.StatusOf maps its code to. Server errors are logged with their cause;
// the client only sees a generic message for them.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ne := wire.Classify(err)
	status := wire.Status(err)
	if reason := refusedBy(err); reason != "" {
		s.m.refused.WithLabelValues(reason).Inc()
	}
	var se *wire.StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(se.RetryAfter.Seconds()))))
	} else if status == http.StatusServiceUnavailable {
		// Unavailable is retryable by definition; a second apart is what
		// the health probe and a failover's recovery move at.
		w.Header().Set("Retry-After", "1")
	}
	if status >= 500 && r.Context().Err() == nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Any("error", err))
	}
	var mna *methodNotAllowed
	if errors.As(err, &mna) {
		w.Header().Set("Allow", strings.Join(mna.allow, ", "))
	}
	if ne.Code == norn.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="norn"`)
	}
	we := wire.FromError(ne)
	writeJSON(w, status, wire.ErrorBody{Error: &we})
}

// methodNotAllowed is a request whose path is served, but not with its
// method; allow lists the methods that are.
type methodNotAllowed struct {
	allow []string
	err   error
}

func (e *methodNotAllowed) Error() string { return e.err.Error() }
func (e *methodNotAllowed) Unwrap() error { return e.err }

// writeJSON writes v as the JSON response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeRaw(w, http.StatusInternalServerError, []byte(wire.InternalErrorBody))
		return
	}
	writeRaw(w, status, append(b, '\n'))
}

// writeRaw writes an encoded JSON body.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeTasks writes a batch submit (dups non-nil) or claim response with
// the hand-written encoder.
func writeTasks(w http.ResponseWriter, status int, tasks []*norn.Task, dups []string) {
	b, err := wire.AppendTasksBody(make([]byte, 0, wire.TaskSizeHint(tasks)+16*len(dups)), tasks, dups)
	if err != nil {
		// The answer writeJSON gives when json.Marshal fails.
		writeRaw(w, http.StatusInternalServerError, []byte(wire.InternalErrorBody))
		return
	}
	writeRaw(w, status, b)
}

// writeBatchResponse writes a batch submit's answer with the hand-written
// encoder.
func writeBatchResponse(w http.ResponseWriter, r *wire.BatchResponse) {
	b, err := wire.AppendBatchResponse(make([]byte, 0, wire.TaskSizeHint(r.Tasks)+16*len(r.Duplicates)), r)
	if err != nil {
		writeRaw(w, http.StatusInternalServerError, []byte(wire.InternalErrorBody))
		return
	}
	writeRaw(w, http.StatusOK, b)
}

// writeLeaseResults writes a lease batch response with the hand-written
// encoder.
func writeLeaseResults(w http.ResponseWriter, results []wire.LeaseResult) {
	b, err := wire.AppendLeaseResults(make([]byte, 0, 32+48*len(results)), results)
	if err != nil {
		writeRaw(w, http.StatusInternalServerError, []byte(wire.InternalErrorBody))
		return
	}
	writeRaw(w, http.StatusOK, b)
}
