package server

import (
	"net/http"

	"github.com/nornq/norn/internal/wire"
)

// handleRetry runs again an aborted or cancelled task. The body is
// optional: none (or {}) retries at once, without dependents.
func (s *Server) handleRetry(w http.ResponseWriter, r *http.Request) error {
	var o wire.RetryRequest
	id, err := pathRequest(r, pathID, &o, true)
	if err != nil {
		return err
	}
	// Options first: a bad run_at is refused alike for every id.
	if err := o.Validate(); err != nil {
		return err
	}
	if err := s.checkTaskScope(r.Context(), principalFrom(r.Context()), id); err != nil {
		return err
	}
	t, err := s.store.Retry(r.Context(), id, o)
	return reply(w, wire.TaskResponse{Task: t}, err)
}

// handleRetryMatching retries every aborted or cancelled task matching the
// filter of the query string, which must name at least one condition (as
// for DELETE /v1/tasks). A queue-scoped token retries within its queues.
func (s *Server) handleRetryMatching(w http.ResponseWriter, r *http.Request) error {
	f, err := s.matchingRequest(r, "retry", &wire.Empty{})
	if err != nil {
		return err
	}
	n, err := s.store.RetryMatching(r.Context(), f)
	return reply(w, wire.RetriedResponse{Retried: n}, err)
}
