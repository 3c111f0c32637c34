package server

import (
	"fmt"
	"net/http"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Batches belong to no queue; their callbacks and members do. A
// queue-scoped token may use a batch whose callbacks submit to its queues
// (a batch without callbacks is anyone's), and every other batch looks
// like one that does not exist. Members join through the submit routes,
// which check each member's queue as for any task.

func pathBatch(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, norn.ValidateBatchID("id", id)
}

// batchVisible reports whether p may use b.
func batchVisible(p *principal, b *norn.Batch) bool {
	for _, cb := range []*norn.NewTask{b.OnSuccess, b.OnComplete} {
		if cb != nil && p.checkQueue(cb.Queue) != nil {
			return false
		}
	}
	return true
}

// scopedBatch reads a batch the caller may use, or not_found.
func (s *Server) scopedBatch(r *http.Request, id string) (*norn.Batch, error) {
	b, err := s.store.GetBatch(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if !batchVisible(principalFrom(r.Context()), b) {
		return nil, norn.BatchNotFound("", id)
	}
	return b, nil
}

func (s *Server) handleCreateBatch(w http.ResponseWriter, r *http.Request) error {
	var nb norn.NewBatch
	if err := readRequest(r, &nb, false); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	for _, c := range []struct {
		field string
		t     *norn.NewTask
	}{{"on_success", nb.OnSuccess}, {"on_complete", nb.OnComplete}} {
		if c.t == nil {
			continue
		}
		if err := s.validateCallback(p, c.field, c.t); err != nil {
			return err
		}
	}
	for i := range nb.Tasks {
		if err := s.validateNewTask(p, fmt.Sprintf("tasks[%d]", i), &nb.Tasks[i]); err != nil {
			return err
		}
	}
	h, err := s.hideForeign(r.Context(), p, newTaskDeps(nb.Tasks))
	if err != nil {
		return err
	}
	h.hideDeps(nb.Tasks)
	out, err := s.store.CreateBatch(submitContext(r), nb)
	if err != nil {
		return h.restore(err)
	}
	for _, t := range out.Tasks {
		if !t.Duplicate {
			s.m.submitted(t.Task.Queue, 1)
		}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// validateCallback checks a callback as a submission of p's (the server's
// limits, the queue in scope); its id is Norn's, so none is allowed.
func (s *Server) validateCallback(p *principal, field string, t *norn.NewTask) error {
	if t.ID != "" {
		return norn.Invalid(field+".id", "a callback's id is Norn's; leave it empty")
	}
	return s.validateNewTask(p, field, t)
}

func (s *Server) handleBatches(w http.ResponseWriter, r *http.Request) error {
	q, err := wire.ParseBatchQuery(r.URL.Query())
	if err != nil {
		return err
	}
	all, err := s.store.ListBatches(r.Context(), q)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	out := make([]*norn.Batch, 0, len(all))
	for _, b := range all {
		if batchVisible(p, b) {
			out = append(out, b)
		}
	}
	writeJSON(w, http.StatusOK, wire.BatchesResponse{Batches: out})
	return nil
}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) error {
	id, err := pathRequest(r, pathBatch, nil, false)
	if err != nil {
		return err
	}
	b, err := s.scopedBatch(r, id)
	return reply(w, wire.OneBatch{Batch: b}, err)
}

func (s *Server) handleSealBatch(w http.ResponseWriter, r *http.Request) error {
	id, err := pathRequest(r, pathBatch, nil, false)
	if err != nil {
		return err
	}
	if _, err := s.scopedBatch(r, id); err != nil {
		return err
	}
	b, err := s.store.SealBatch(r.Context(), id)
	return reply(w, wire.OneBatch{Batch: b}, err)
}

// handleDeleteBatch deletes a batch and, with members=true, the members
// the caller may delete (those of its queues).
func (s *Server) handleDeleteBatch(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	if err := wire.CheckParams(v, []string{"members"}); err != nil {
		return err
	}
	members := false
	switch m := v.Get("members"); m {
	case "", "false":
	case "true":
		members = true
	default:
		return norn.Invalid("members", "must be true or false, got %q", wire.Trunc(m))
	}
	id, err := pathBatch(r)
	if err != nil {
		return err
	}
	if _, err := s.scopedBatch(r, id); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if !members || !p.scoped() {
		n, err := s.store.DeleteBatch(r.Context(), id, members)
		return reply(w, wire.BatchDeleted{Deleted: n}, err)
	}
	if _, err := s.store.DeleteBatch(r.Context(), id, false); err != nil {
		return err
	}
	n, err := s.store.DeleteMatching(r.Context(), norn.Filter{Batch: id, Queues: p.queues})
	return reply(w, wire.BatchDeleted{Deleted: int(n)}, err)
}
