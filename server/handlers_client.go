package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// validateNewTask applies the shared validation plus the server's own
// (possibly lower) limits, and the caller's queue scope. prefix names the
// task in a batch ("tasks[3]"); "" for a single submit.
func (s *Server) validateNewTask(p *principal, prefix string, nt *norn.NewTask) error {
	wrap := func(err error) error {
		if prefix == "" || err == nil {
			return err
		}
		return norn.WithFieldPrefix(err, prefix)
	}
	if len(nt.Spec) > s.cfg.MaxSpecBytes {
		return wrap(norn.TooLarge("spec", "is %d bytes, more than the limit of %d", len(nt.Spec), s.cfg.MaxSpecBytes))
	}
	if len(nt.Labels) > s.cfg.MaxLabels {
		return wrap(norn.Invalid("labels", "has %d labels, more than the limit of %d", len(nt.Labels), s.cfg.MaxLabels))
	}
	if err := nt.Validate(); err != nil {
		return wrap(err)
	}
	if nt.ID != "" {
		// Ids of Norn's own producers (schedule ticks, the Kafka bridge)
		// are theirs: taken first, they would suppress a tick or a
		// message in any queue.
		if err := norn.ValidateCallerID("id", nt.ID); err != nil {
			return wrap(err)
		}
	}
	return wrap(p.checkQueue(nt.Queue))
}

// checkBatch is norn.ValidateBatch for tasks that validateNewTask has
// already checked one by one: only the batch-wide rules remain (the size
// and ids appearing twice), with the same errors. Validating every task
// again would scan every spec once more.
func checkBatch(prefix string, tasks []norn.NewTask) error {
	if len(tasks) > norn.MaxBatch {
		return norn.TooLarge(prefix, "batch has %d tasks, more than the limit of %d", len(tasks), norn.MaxBatch)
	}
	var ids map[string]int
	for i := range tasks {
		id := tasks[i].ID
		if id == "" {
			continue
		}
		if ids == nil {
			ids = make(map[string]int, len(tasks)-i)
		}
		if j, ok := ids[id]; ok {
			return norn.Invalid(fmt.Sprintf("%s[%d].id", prefix, i), "id %q appears twice in the batch (also at index %d)", id, j)
		}
		ids[id] = i
	}
	return nil
}

// checkTaskScope answers for a task outside a scoped principal's queues
// exactly as for a task that does not exist, so a scoped token cannot tell
// another queue's ids from unused ones. It costs a read, so it only runs
// for scoped tokens.
func (s *Server) checkTaskScope(ctx context.Context, p *principal, id string) error {
	if !p.scoped() {
		return nil
	}
	t, err := s.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if p.checkQueue(t.Queue) != nil {
		return norn.NotFound(id)
	}
	return nil
}

// tooLarge is the answer for a response that would pass
// Config.MaxResponseBytes.
func (s *Server) tooLarge(what string) error {
	return norn.TooLarge("response", "would be larger than the limit of %d bytes; %s", s.cfg.MaxResponseBytes, what)
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) error {
	var nt norn.NewTask
	if err := readRequest(r, &nt, false); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if err := s.validateNewTask(p, "", &nt); err != nil {
		return err
	}
	tasks := []norn.NewTask{nt}
	h, err := s.hideForeign(r.Context(), p, newTaskDeps(tasks))
	if err != nil {
		return err
	}
	h.hideDeps(tasks)
	res, err := s.store.Submit(submitContext(r), tasks...)
	if err != nil {
		return h.restore(err)
	}
	if len(res) != 1 {
		return fmt.Errorf("store returned %d results for one task", len(res))
	}
	status := http.StatusCreated
	if res[0].Duplicate {
		status = http.StatusOK
	} else {
		s.m.submitted(res[0].Task.Queue, 1)
	}
	writeJSON(w, status, wire.TaskResponse{Task: res[0].Task, Duplicate: res[0].Duplicate, Replaced: res[0].Replaced})
	return nil
}

func (s *Server) handleSubmitBatch(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	var tasks []norn.NewTask
	err := wire.DecodeBatch(r.Body, "tasks", s.cfg.MaxBatch, func(i int, nt *norn.NewTask) error {
		if err := s.validateNewTask(p, fmt.Sprintf("tasks[%d]", i), nt); err != nil {
			return err
		}
		tasks = append(tasks, *nt)
		return nil
	})
	if err != nil {
		return err
	}
	if err := checkBatch("tasks", tasks); err != nil {
		return err
	}
	resp := wire.BatchResponse{Tasks: make([]*norn.Task, 0, len(tasks)), Duplicates: []string{}}
	if len(tasks) > 0 {
		h, err := s.hideForeign(r.Context(), p, newTaskDeps(tasks))
		if err != nil {
			return err
		}
		h.hideDeps(tasks)
		res, err := s.store.Submit(submitContext(r), tasks...)
		if err != nil {
			return h.restore(err)
		}
		perQueue := map[string]int{}
		for _, sub := range res {
			resp.Tasks = append(resp.Tasks, sub.Task)
			if sub.Replaced {
				resp.Replaced = append(resp.Replaced, len(resp.Tasks)-1)
			}
			if sub.Duplicate {
				resp.Duplicates = append(resp.Duplicates, sub.Task.ID)
			} else {
				perQueue[sub.Task.Queue]++
			}
		}
		for q, n := range perQueue {
			s.m.submitted(q, n)
		}
	}
	writeBatchResponse(w, &resp)
	return nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	seg := r.PathValue("id")
	if strings.Contains(seg, ",") {
		ids, err := wire.SplitIDs(seg, s.cfg.MaxBatch)
		if err != nil {
			return err
		}
		resp, err := s.getMany(r.Context(), p, ids)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, resp)
		return nil
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := s.store.Get(r.Context(), id)
	if err != nil {
		return err
	}
	if p.checkQueue(t.Queue) != nil {
		return norn.NotFound(id)
	}
	writeJSON(w, http.StatusOK, wire.TaskResponse{Task: t})
	return nil
}

// getManyChunk is how many tasks a multi-get reads from the store at a
// time, so the response limit stops it before it holds them all.
const getManyChunk = 256

// getMany answers GET /v1/tasks/{id1},{id2},…: each id once (repeats would
// multiply a large task into a huge response), tasks outside the caller's
// scope reported missing like ids that do not exist, and the whole bounded
// by Config.MaxResponseBytes.
func (s *Server) getMany(ctx context.Context, p *principal, ids []string) (wire.ManyResponse, error) {
	resp := wire.ManyResponse{Tasks: []*norn.Task{}, Missing: []string{}}
	seen := make(map[string]bool, len(ids))
	uniq := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	size := int64(64)
	for start := 0; start < len(uniq); start += getManyChunk {
		chunk := uniq[start:min(start+getManyChunk, len(uniq))]
		found, _, err := s.store.GetMany(ctx, chunk)
		if err != nil {
			return resp, err
		}
		byID := make(map[string]*norn.Task, len(found))
		for _, t := range found {
			byID[t.ID] = t
		}
		for _, id := range chunk {
			t := byID[id]
			if t == nil || p.checkQueue(t.Queue) != nil {
				resp.Missing = append(resp.Missing, id)
				size += int64(len(id)) + 3
				continue
			}
			resp.Tasks = append(resp.Tasks, t)
			size += int64(wire.TaskSizeHint([]*norn.Task{t}))
		}
		if size > s.cfg.MaxResponseBytes {
			return resp, s.tooLarge("ask for fewer ids at a time")
		}
	}
	return resp, nil
}

// wantsNDJSON reports whether the client asked for a streamed list.
func wantsNDJSON(r *http.Request) bool {
	for _, a := range r.Header.Values("Accept") {
		for _, part := range strings.Split(a, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "application/x-ndjson") {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) error {
	stream := wantsNDJSON(r)
	maxLimit := norn.MaxListLimit
	if stream {
		maxLimit = 0
	}
	q, err := wire.ParseQuery(r.URL.Query(), s.cfg.MaxLabels, maxLimit)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if q.Queues, err = p.scopeQueues(q.Queues); err != nil {
		return err
	}
	if stream {
		release, err := s.streams.acquire(callerKey(p, r))
		if err != nil {
			return err
		}
		defer release()
		return s.streamList(w, r, q)
	}
	page, err := s.store.List(r.Context(), q)
	if err != nil {
		return err
	}
	if page.Tasks == nil {
		page.Tasks = []*norn.Task{}
	}
	if int64(wire.TaskSizeHint(page.Tasks)) > s.cfg.MaxResponseBytes {
		return s.tooLarge("ask for a smaller limit, view=summary, or stream the list (Accept: application/x-ndjson)")
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// ndjsonFlushEvery bounds how many lines wait in the buffer before the
// client sees them, so a slow producer still shows progress.
const ndjsonFlushEvery = 256

// streamList writes every match as one JSON line, never holding more than
// one task and a small buffer. An error after the header went out becomes a
// final {"error":…} line, since the status can no longer change.
func (s *Server) streamList(w http.ResponseWriter, r *http.Request, q norn.Query) error {
	it, err := s.store.Stream(r.Context(), q)
	if err != nil {
		return err
	}
	defer it.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	n := 0
	for it.Next() {
		if err := enc.Encode(it.Item()); err != nil {
			return nil // the client went away; nothing more can be said
		}
		n++
		if n%ndjsonFlushEvery == 0 {
			if bw.Flush() != nil {
				return nil
			}
			_ = rc.Flush()
		}
	}
	if err := it.Err(); err != nil && r.Context().Err() == nil {
		ne := wire.Classify(err)
		if ne.Code == norn.CodeInternal {
			s.log.Error("stream failed", "error", err)
		}
		_ = enc.Encode(wire.ErrorBody{Error: new(wire.FromError(ne))})
	}
	if bw.Flush() == nil {
		_ = rc.Flush()
	}
	return nil
}

func (s *Server) handleCount(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	if err := wire.CheckParams(v, wire.FilterParams, []string{"group"}); err != nil {
		return err
	}
	f, err := wire.ParseFilter(v, s.cfg.MaxLabels)
	if err != nil {
		return err
	}
	group, err := wire.ParseGroup(v)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if f.Queues, err = p.scopeQueues(f.Queues); err != nil {
		return err
	}
	if !group {
		n, err := s.store.Count(r.Context(), f)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wire.CountResponse{Count: n})
		return nil
	}
	groups, err := s.store.CountGrouped(r.Context(), f)
	if err != nil {
		return err
	}
	resp := wire.GroupedCountResponse{Groups: groups}
	if resp.Groups == nil {
		resp.Groups = []norn.GroupCount{}
	}
	for _, g := range groups {
		resp.Count += g.Count
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) error {
	id, err := s.taskRequest(r, nil, false)
	if err != nil {
		return err
	}
	return reply(w, wire.DeletedResponse{Deleted: 1}, s.store.Delete(r.Context(), id))
}

func (s *Server) handleDeleteMatching(w http.ResponseWriter, r *http.Request) error {
	f, err := s.matchingRequest(r, "delete", nil)
	if err != nil {
		return err
	}
	n, err := s.store.DeleteMatching(r.Context(), f)
	return reply(w, wire.DeletedResponse{Deleted: n}, err)
}

func (s *Server) validateUpdate(u *norn.Update) error {
	if u.Labels != nil && len(u.Labels) > s.cfg.MaxLabels {
		return norn.Invalid("labels", "has %d labels, more than the limit of %d", len(u.Labels), s.cfg.MaxLabels)
	}
	return u.Validate()
}

func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) error {
	var wu wire.Update
	id, err := pathRequest(r, pathID, &wu, false)
	if err != nil {
		return err
	}
	u := wu.Domain()
	if err := s.validateUpdate(&u); err != nil {
		return err
	}
	if err := s.checkTaskScope(r.Context(), principalFrom(r.Context()), id); err != nil {
		return err
	}
	t, err := s.store.Update(r.Context(), id, u)
	return reply(w, wire.TaskResponse{Task: t}, err)
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) error {
	id, err := s.taskRequest(r, &wire.Empty{}, true)
	if err != nil {
		return err
	}
	t, err := s.store.Cancel(r.Context(), id)
	return reply(w, wire.TaskResponse{Task: t}, err)
}

// handleCancelMatching cancels every pending task matching the filter of
// the query string, which must name at least one condition (as for DELETE
// /v1/tasks). A queue-scoped token cancels within its queues.
func (s *Server) handleCancelMatching(w http.ResponseWriter, r *http.Request) error {
	f, err := s.matchingRequest(r, "cancel", &wire.Empty{})
	if err != nil {
		return err
	}
	n, err := s.store.CancelMatching(r.Context(), f)
	return reply(w, wire.CancelledResponse{Cancelled: n}, err)
}

func (s *Server) handleReadLog(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := wire.ParseLogParams(r.URL.Query())
	if err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.checkTaskScope(r.Context(), principalFrom(r.Context()), id); err != nil {
		return err
	}
	entries, err := s.store.ReadLog(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []norn.LogEntry{}
	}
	size := int64(64)
	for _, e := range entries {
		size += 96 + int64(len(e.Data))
	}
	if size > s.cfg.MaxResponseBytes {
		return s.tooLarge("read the log in parts (after, limit)")
	}
	writeJSON(w, http.StatusOK, wire.LogResponse{Entries: entries})
	return nil
}

func (s *Server) handleTransact(w http.ResponseWriter, r *http.Request) error {
	var wtx wire.Txn
	if err := readRequest(r, &wtx, false); err != nil {
		return err
	}
	tx := wtx.Domain()
	if ops := tx.Ops(); ops > s.cfg.MaxBatch {
		return norn.TooLarge("body", "transaction has %d operations, more than the limit of %d", ops, s.cfg.MaxBatch)
	}
	p := principalFrom(r.Context())
	for i := range tx.Submit {
		if err := s.validateNewTask(p, fmt.Sprintf("submit[%d]", i), &tx.Submit[i]); err != nil {
			return err
		}
	}
	if err := checkBatch("submit", tx.Submit); err != nil {
		return err
	}
	var ids []string
	for i := range tx.Update {
		f := fmt.Sprintf("update[%d]", i)
		if err := norn.ValidateID(f+".id", tx.Update[i].ID); err != nil {
			return err
		}
		if err := s.validateUpdate(&tx.Update[i].Update); err != nil {
			return norn.WithFieldPrefix(err, f)
		}
		ids = append(ids, tx.Update[i].ID)
	}
	for _, list := range []struct {
		name string
		ids  []string
	}{{"cancel", tx.Cancel}, {"delete", tx.Delete}} {
		for i, id := range list.ids {
			if err := norn.ValidateID(fmt.Sprintf("%s[%d]", list.name, i), id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
	}
	for i, req := range tx.Require {
		if err := norn.ValidateID(fmt.Sprintf("require[%d].id", i), req.ID); err != nil {
			return err
		}
		if err := req.ValidateRange(fmt.Sprintf("require[%d]", i)); err != nil {
			return err
		}
		ids = append(ids, req.ID)
	}
	h, err := s.hideForeign(r.Context(), p, append(ids, newTaskDeps(tx.Submit)...))
	if err != nil {
		return err
	}
	res, err := s.store.Transact(submitContext(r), h.hideTxn(tx))
	if err != nil {
		return h.restore(err)
	}
	perQueue := map[string]int{}
	for _, sub := range res.Submitted {
		if !sub.Duplicate {
			perQueue[sub.Task.Queue]++
		}
	}
	for q, n := range perQueue {
		s.m.submitted(q, n)
	}
	if res.Submitted == nil {
		res.Submitted = []norn.Submitted{}
	}
	if res.Updated == nil {
		res.Updated = []*norn.Task{}
	}
	if res.Cancelled == nil {
		res.Cancelled = []*norn.Task{}
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
