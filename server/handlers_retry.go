package server

import (
	"context"
	"net/http"
	"time"

	"github.com/nornq/norn"
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
	if p := principalFrom(r.Context()); p.scoped() {
		if err := s.checkRetryScope(r.Context(), p, id, o); err != nil {
			return err
		}
	}
	t, err := s.store.Retry(r.Context(), id, o)
	return reply(w, wire.TaskResponse{Task: t}, err)
}

// checkRetryScope decides a scoped token's retry before the store does:
//   - a task of another queue answers as a task that does not exist;
//   - a dependency of the task in another queue answers as a dependency
//     that does not exist (deleted), so the outcome does not tell its
//     status (a token may depend only on tasks it may read);
//   - with dependents, the retry would also bring back tasks aborted
//     because of this one; if one of them is outside the token's queues
//     the retry is refused (403), since a scoped token changes nothing
//     outside its queues. Without dependents it is allowed.
func (s *Server) checkRetryScope(ctx context.Context, p *principal, id string, o norn.RetryOptions) error {
	t, err := s.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if p.checkQueue(t.Queue) != nil {
		return norn.NotFound(id)
	}
	h, err := s.hideForeign(ctx, p, t.DependsOn)
	if err != nil {
		return err
	}
	if h != nil {
		if err := norn.CheckRetry(t.ID, t.Status); err != nil {
			return err
		}
		found, _, err := s.store.GetMany(ctx, t.DependsOn)
		if err != nil {
			return err
		}
		status := make(map[string]norn.Status, len(found))
		for _, d := range found {
			if _, hide := h.stand[d.ID]; !hide {
				status[d.ID] = d.Status
			}
		}
		if _, err := norn.DecideRetry(t, time.Now(), o, func(d string) norn.Status { return status[d] }); err != nil {
			return err
		}
	}
	if o.WithDependents {
		outside, err := s.dependentsOutside(ctx, p, id)
		if err != nil {
			return err
		}
		if outside {
			return norn.Errorf(norn.CodePermissionDenied,
				"task %q has dependents outside this token's queues, which a retry with with_dependents would bring back; retry it without with_dependents, or with a token that may use their queues", id)
		}
	}
	return nil
}

// dependentsOutside reports whether a retry of id with dependents would
// reach a task outside p's queues: it follows, level by level, the tasks
// aborted because their dependency failed (norn.AbortedBecauseOf), as
// the stores do.
func (s *Server) dependentsOutside(ctx context.Context, p *principal, id string) (bool, error) {
	seen := map[string]bool{id: true}
	for next := []string{id}; len(next) > 0; {
		cur := next[0]
		next = next[1:]
		it, err := s.store.Stream(ctx, norn.Query{Filter: norn.Filter{DependsOn: cur, Statuses: []norn.Status{norn.StatusAborted}}})
		if err != nil {
			return false, err
		}
		for it.Next() {
			t := it.Item()
			if seen[t.ID] || !norn.AbortedBecauseOf(t.Status, norn.LastError(t), cur) {
				continue
			}
			if p.checkQueue(t.Queue) != nil {
				it.Close()
				return true, nil
			}
			seen[t.ID] = true
			next = append(next, t.ID)
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return false, err
		}
	}
	return false, nil
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
