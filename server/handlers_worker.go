package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

func (s *Server) handleRegisterWorker(w http.ResponseWriter, r *http.Request) error {
	var info norn.WorkerInfo
	if err := readRequest(r, &info, true); err != nil {
		return err
	}
	// The store assigns these; a client cannot choose them. The
	// registrar binds the worker id to the caller's token.
	p := principalFrom(r.Context())
	info.ID, info.Registered, info.LastSeen, info.Registrar = "", time.Time{}, time.Time{}, s.registrar(p)
	if len(info.Name) > 256 {
		return norn.Invalid("name", "is longer than 256 bytes")
	}
	if len(info.Queues) > 1000 {
		return norn.Invalid("queues", "has more than 1000 queues")
	}
	for i, q := range info.Queues {
		f := fmt.Sprintf("queues[%d]", i)
		if err := norn.ValidateQueue(f, q); err != nil {
			return err
		}
		if err := p.checkQueue(q); err != nil {
			return err
		}
	}
	id, err := s.store.RegisterWorker(r.Context(), info)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wire.RegisterResponse{ID: id})
	return nil
}

func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	ws, err := s.store.Workers(r.Context())
	if err != nil {
		return err
	}
	if p := principalFrom(r.Context()); p.scoped() {
		ws = scopeWorkers(ws, p)
	}
	if ws == nil {
		ws = []norn.WorkerInfo{}
	}
	writeJSON(w, http.StatusOK, wire.WorkersResponse{Workers: ws})
	return nil
}

// scopeWorkers keeps the workers that serve one of p's queues, with only
// those queues listed: a scoped token learns nothing about other queues'
// workers. Workers registered without queues are not shown to it.
func scopeWorkers(ws []norn.WorkerInfo, p *principal) []norn.WorkerInfo {
	out := []norn.WorkerInfo{}
	for _, w := range ws {
		var qs []string
		for _, q := range w.Queues {
			if p.checkQueue(q) == nil {
				qs = append(qs, q)
			}
		}
		if len(qs) > 0 {
			w.Queues = qs
			out = append(out, w)
		}
	}
	return out
}

// claimQueue is the queue of POST /v1/queues/{queue}/claim; claim checks
// the caller's scope.
func claimQueue(r *http.Request) (string, error) {
	q := r.PathValue("queue")
	return q, norn.ValidateQueue("queue", q)
}

func (s *Server) handleClaimQueue(w http.ResponseWriter, r *http.Request) error {
	var b wire.QueueClaimRequest
	q, err := pathRequest(r, claimQueue, &b, false)
	if err != nil {
		return err
	}
	return s.claim(w, r, norn.ClaimRequest{Worker: b.Worker, Queues: []string{q}, N: b.N, Timeout: b.Timeout, Wait: b.Wait,
		Min: b.Min, Linger: b.Linger, GroupBy: b.GroupBy})
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request) error {
	var req norn.ClaimRequest
	if err := readRequest(r, &req, false); err != nil {
		return err
	}
	return s.claim(w, r, req)
}

// claim validates and runs a (possibly long-polling) claim. A long poll
// ends early, with no tasks, when the server starts shutting down, so a
// drain never waits out a five-minute poll.
func (s *Server) claim(w http.ResponseWriter, r *http.Request, req norn.ClaimRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	for i, q := range req.Queues {
		if err := p.checkQueue(q); err != nil {
			return norn.WithFieldPrefix(err, fmt.Sprintf("queues[%d]", i))
		}
	}
	if err := s.checkWorker(r.Context(), p, req.Worker); err != nil {
		return err
	}
	if req.Wait > 0 {
		release, err := s.streams.acquire(callerKey(p, r))
		if err != nil {
			return err
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	tasks, err := s.store.Claim(ctx, req)
	if err != nil {
		if s.drainCtx.Err() != nil && r.Context().Err() == nil &&
			(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
			tasks, err = nil, nil
		} else {
			return err
		}
	}
	if len(tasks) > 0 && r.Context().Err() != nil {
		// The caller hung up while the claim waited (a worker shutting down
		// aborts its long poll): nobody will receive these leases, so give
		// the tasks back at once instead of leaving them running until
		// their leases time out.
		s.giveBack(tasks)
		return r.Context().Err()
	}
	if tasks == nil {
		tasks = []*norn.Task{}
	}
	s.m.claimed(tasks, time.Now())
	writeTasks(w, http.StatusOK, tasks, nil)
	return nil
}

// giveBack yields tasks claimed for a caller that is gone. It uses its own
// context because the request's is cancelled; a failure only leaves the
// tasks to the lease timeout, as before.
func (s *Server) giveBack(tasks []*norn.Task) {
	ops := make([]norn.LeaseOp, len(tasks))
	for i, t := range tasks {
		ops[i] = norn.LeaseOp{Op: norn.OpYield, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: t.Owner, Lease: t.Lease}}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.drainCtx), 10*time.Second)
	defer cancel()
	if _, err := s.store.LeaseBatch(ctx, ops); err != nil {
		s.log.Warn("giving back tasks claimed for a caller that hung up", "tasks", len(tasks), "err", err)
	}
}

// leaseRef reads the lease reference of a worker route and checks the
// caller's queue scope (which costs a read, for scoped tokens only).
func (s *Server) leaseRef(r *http.Request, b wire.LeaseOwner) (norn.LeaseRef, error) {
	ref := norn.LeaseRef{TaskID: r.PathValue("id"), Worker: b.Worker, Lease: b.Lease}
	if err := ref.Validate(); err != nil {
		return ref, err
	}
	// The worker first: its refusal says nothing of the task.
	p := principalFrom(r.Context())
	if err := s.checkWorker(r.Context(), p, ref.Worker); err != nil {
		return ref, err
	}
	return ref, s.checkTaskScope(r.Context(), p, ref.TaskID)
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) error {
	var b wire.HeartbeatRequest
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	hb := norn.Heartbeat{Progress: b.Progress, Extend: b.Extend}
	if err := hb.Validate(); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b.LeaseOwner)
	if err != nil {
		return err
	}
	if b.SignalsAfter != nil {
		if err := norn.ValidateSeq("signals_after", *b.SignalsAfter); err != nil {
			return err
		}
	}
	d, err := s.store.Heartbeat(r.Context(), ref, hb)
	if err != nil || b.SignalsAfter == nil {
		return reply(w, wire.DeadlineResponse{Deadline: d}, err)
	}
	// After the heartbeat proved the lease: its owner may read them.
	sigs, err := s.store.Signals(r.Context(), ref.TaskID, *b.SignalsAfter)
	return reply(w, wire.DeadlineResponse{Deadline: d, Signals: sigs}, err)
}

// handleSignal sends a signal to a task: any caller allowed to change it
// (client role, queue scope applies).
func (s *Server) handleSignal(w http.ResponseWriter, r *http.Request) error {
	var in norn.NewSignal
	id, err := s.taskRequest(r, &in, false)
	if err != nil {
		return err
	}
	if err := in.Validate(); err != nil {
		return err
	}
	sg, err := s.store.Signal(r.Context(), id, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wire.SignalResponse{Signal: sg})
	return nil
}

// handleSignals lists a task's signals after ?after=N.
func (s *Server) handleSignals(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	if err := wire.CheckParams(v, []string{"after"}); err != nil {
		return err
	}
	after, err := wire.ParseAfter(v)
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
	sigs, err := s.store.Signals(r.Context(), id, after)
	return reply(w, wire.SignalsResponse{Signals: sigs}, err)
}

func (s *Server) handleAppendLog(w http.ResponseWriter, r *http.Request) error {
	var b wire.AppendLogRequest
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	if len(b.Data) == 0 {
		// An absent or null entry is a JSON null entry, as the client sends it.
		b.Data = json.RawMessage("null")
	}
	if err := norn.ValidateJSON("data", b.Data, norn.MaxLogBytes); err != nil {
		return err
	}
	if err := (norn.LogAppend{Seq: b.Seq}).ValidateRange(); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b.LeaseOwner)
	if err != nil {
		return err
	}
	e, err := s.store.AppendLog(r.Context(), ref, norn.LogAppend{Seq: b.Seq, Data: b.Data})
	return reply(w, wire.EntryResponse{Entry: e}, err)
}

func (s *Server) handleComplete(w http.ResponseWriter, r *http.Request) error {
	var b wire.CompleteRequest
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	if err := norn.ValidateJSON("result", b.Result, norn.MaxResultBytes); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b.LeaseOwner)
	if err != nil {
		return err
	}
	if err := s.store.Complete(r.Context(), ref, b.Result); err != nil {
		return err
	}
	s.m.finished(norn.OpComplete, ref.TaskID, time.Now())
	writeJSON(w, http.StatusOK, wire.Empty{})
	return nil
}

func (s *Server) handleFail(w http.ResponseWriter, r *http.Request) error {
	return s.failOrAbort(w, r, norn.OpFail)
}

func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) error {
	return s.failOrAbort(w, r, norn.OpAbort)
}

func (s *Server) failOrAbort(w http.ResponseWriter, r *http.Request, op norn.LeaseOpKind) error {
	var b wire.FailRequest
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	var e norn.ErrorInfo
	if b.Error != nil {
		e = *b.Error
	}
	if err := norn.ValidateErrorInfo("error", e); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b.LeaseOwner)
	if err != nil {
		return err
	}
	if op == norn.OpFail {
		err = s.store.Fail(r.Context(), ref, e)
	} else {
		err = s.store.Abort(r.Context(), ref, e)
	}
	if err != nil {
		return err
	}
	s.m.finished(op, ref.TaskID, time.Now())
	writeJSON(w, http.StatusOK, wire.Empty{})
	return nil
}

func (s *Server) handleYield(w http.ResponseWriter, r *http.Request) error {
	var b wire.LeaseOwner
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b)
	if err != nil {
		return err
	}
	if err := s.store.Yield(r.Context(), ref); err != nil {
		return err
	}
	s.m.finished(opAwait, ref.TaskID, time.Now())
	writeJSON(w, http.StatusOK, wire.Empty{})
	return nil
}

func (s *Server) handleSnooze(w http.ResponseWriter, r *http.Request) error {
	var b wire.SnoozeRequest
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	if err := b.Snooze.Validate(); err != nil {
		return err
	}
	if err := b.Snooze.ValidateRange(); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b.LeaseOwner)
	if err != nil {
		return err
	}
	t, err := s.store.Snooze(r.Context(), ref, b.Snooze)
	if err != nil {
		return err
	}
	s.m.finished(norn.OpSnooze, ref.TaskID, time.Now())
	writeJSON(w, http.StatusOK, wire.TaskResponse{Task: t})
	return nil
}

// handleAwait submits a running task's children and makes it wait for
// them. The children are submissions of the worker's: its scope applies
// to their queues and dependencies as to a client's submit.
func (s *Server) handleAwait(w http.ResponseWriter, r *http.Request) error {
	var b wire.AwaitRequest
	if err := readRequest(r, &b, false); err != nil {
		return err
	}
	if err := b.AwaitRequest.Validate(0); err != nil {
		return err
	}
	ref, err := s.leaseRef(r, b.LeaseOwner)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	for i := range b.Tasks {
		if err := s.validateNewTask(p, fmt.Sprintf("tasks[%d]", i), &b.Tasks[i]); err != nil {
			return err
		}
	}
	h, err := s.hideForeign(r.Context(), p, newTaskDeps(b.Tasks))
	if err != nil {
		return err
	}
	h.hideDeps(b.Tasks)
	res, err := s.store.Await(submitContext(r), ref, b.AwaitRequest)
	if err != nil {
		return h.restore(err)
	}
	for _, c := range res.Children {
		if !c.Duplicate {
			s.m.submitted(c.Task.Queue, 1)
		}
	}
	s.m.finished(norn.OpYield, ref.TaskID, time.Now())
	writeJSON(w, http.StatusOK, res)
	return nil
}

// validateLeaseOp checks one op of a lease batch (norn.LeaseOp.ValidateInBatch,
// as the stores do); errors are not prefixed.
func validateLeaseOp(op *norn.LeaseOp) error { return op.ValidateInBatch() }

func (s *Server) handleLeaseBatch(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	var ops []norn.LeaseOp
	err := wire.DecodeBatch(r.Body, "ops", s.cfg.MaxBatch, func(i int, op *norn.LeaseOp) error {
		if err := validateLeaseOp(op); err != nil {
			return norn.WithFieldPrefix(err, fmt.Sprintf("ops[%d]", i))
		}
		ops = append(ops, *op)
		return nil
	})
	if err != nil {
		return err
	}
	resp := wire.LeaseBatchResponse{Results: make([]wire.LeaseResult, 0, len(ops))}
	if len(ops) > 0 {
		p := principalFrom(r.Context())
		// Ops naming a worker the caller did not register are refused one
		// by one, like any failing op, and never reach the store.
		refused := map[int]error{}
		checked := map[string]error{}
		for i := range ops {
			err, ok := checked[ops[i].Worker]
			if !ok {
				err = s.checkWorker(r.Context(), p, ops[i].Worker)
				if err != nil && norn.CodeOf(err) != norn.CodePermissionDenied {
					return err
				}
				checked[ops[i].Worker] = err
			}
			if err != nil {
				refused[i] = err
			}
		}
		var h *hidden
		if p.scoped() {
			ids := make([]string, 0, len(ops))
			for i := range ops {
				if refused[i] == nil {
					ids = append(ids, ops[i].TaskID)
				}
			}
			if h, err = s.hideForeign(r.Context(), p, ids); err != nil {
				return err
			}
		}
		sent := ops
		if h != nil || len(refused) > 0 {
			sent = make([]norn.LeaseOp, 0, len(ops))
			for i := range ops {
				if refused[i] == nil {
					op := ops[i]
					op.TaskID = h.id(op.TaskID)
					sent = append(sent, op)
				}
			}
		}
		var stored []norn.LeaseOpResult
		if len(sent) > 0 {
			if stored, err = s.store.LeaseBatch(r.Context(), sent); err != nil {
				return h.restore(err)
			}
			if len(stored) != len(sent) {
				return fmt.Errorf("store returned %d results for %d lease ops", len(stored), len(sent))
			}
		}
		results := make([]norn.LeaseOpResult, len(ops))
		for i, j := 0, 0; i < len(ops); i++ {
			if err := refused[i]; err != nil {
				e := norn.WithFieldPrefix(err, fmt.Sprintf("ops[%d].worker", i)).(*norn.Error)
				results[i] = norn.LeaseOpResult{Err: e}
				continue
			}
			results[i] = stored[j]
			if results[i].Err != nil && len(refused) > 0 {
				// The store numbered the ops it saw.
				results[i].Err = renumber(results[i].Err, j, i)
			}
			j++
		}
		now := time.Now()
		for i, res := range results {
			lr := wire.LeaseResult{Deadline: res.Deadline}
			if res.Err != nil {
				we := wire.FromError(h.restoreError(res.Err))
				lr.Error = &we
			} else {
				s.m.finished(ops[i].Op, ops[i].TaskID, now)
			}
			resp.Results = append(resp.Results, lr)
		}
	}
	writeLeaseResults(w, resp.Results)
	return nil
}

// renumber names op i of the caller's batch in an error the store gave
// for op j of the ops it was sent.
func renumber(e *norn.Error, j, i int) *norn.Error {
	from, to := fmt.Sprintf("ops[%d]", j), fmt.Sprintf("ops[%d]", i)
	if i == j || !strings.HasPrefix(e.Field, from) {
		return e
	}
	c := *e
	c.Field = to + strings.TrimPrefix(e.Field, from)
	return &c
}
