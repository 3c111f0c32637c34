package server

import (
	"net/http"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// handleRetry runs again an aborted or cancelled task. The body is
// optional: none (or {}) retries at once, without dependents.
func (s *Server) handleRetry(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var o wire.RetryRequest
	if err := wire.ReadBody(r.Body, &o, true); err != nil {
		return err
	}
	if err := s.checkTaskScope(r.Context(), principalFrom(r.Context()), id); err != nil {
		return err
	}
	t, err := s.store.Retry(r.Context(), id, o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.TaskResponse{Task: t})
	return nil
}

// handleRetryMatching retries every aborted or cancelled task matching the
// filter of the query string, which must name at least one condition (as
// for DELETE /v1/tasks). A queue-scoped token retries within its queues.
func (s *Server) handleRetryMatching(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	if err := wire.CheckParams(v, wire.FilterParams); err != nil {
		return err
	}
	f, err := wire.ParseFilter(v, s.cfg.MaxLabels)
	if err != nil {
		return err
	}
	if f.Empty() {
		return norn.Invalid("filter", "at least one filter parameter is required to retry by filter")
	}
	var empty wire.Empty
	if err := wire.ReadBody(r.Body, &empty, true); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if f.Queues, err = p.scopeQueues(f.Queues); err != nil {
		return err
	}
	n, err := s.store.RetryMatching(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.RetriedResponse{Retried: n})
	return nil
}
