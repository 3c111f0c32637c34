package embedded

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nornq/norn"
)

// Importing (norn copy into an embedded store): ImportTasks writes each
// task's records in the layout the store itself writes, and FinishImport
// rebuilds the in-memory indexes (ready queues, timers, leases, counts,
// unique keys, dependencies) from them, as opening the store does. Until
// FinishImport the imported tasks are on disk but not yet claimable or
// counted.

var _ norn.TaskImporter = (*Store)(nil)

// ImportTasks writes recs in one batch; see norn.TaskImporter.
func (s *Store) ImportTasks(ctx context.Context, recs []norn.TaskRecord) (int, error) {
	for i, r := range recs {
		if err := r.Validate(i); err != nil {
			return 0, err
		}
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	s.mu.Lock()
	failed := s.failed != nil
	s.mu.Unlock()
	if failed {
		return 0, s.failedErr()
	}
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	for _, r := range recs {
		v, c, err := s.db.Get(taskKey(r.Task.ID, sufImmutable))
		if err == pebble.ErrNotFound {
			writeImported(b, r)
			n++
			continue
		}
		if err != nil {
			return 0, norn.Unavailable(err)
		}
		im, derr := decodeImmutable(v, false, false)
		c.Close()
		if derr != nil {
			return 0, fmt.Errorf("embedded: task %q: %w", r.Task.ID, derr)
		}
		st := im.st
		if sv, sc, err := s.db.Get(taskKey(r.Task.ID, sufState)); err == nil {
			st, derr = decodeState(sv)
			sc.Close()
			if derr != nil {
				return 0, fmt.Errorf("embedded: task %q: %w", r.Task.ID, derr)
			}
		} else if err != pebble.ErrNotFound {
			return 0, norn.Unavailable(err)
		}
		if st.version != r.Task.Version {
			return 0, norn.ImportConflict(r.Task.ID, st.version, r.Task.Version)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, norn.Unavailable(err)
	}
	return n, nil
}

// FinishImport rebuilds the in-memory indexes from what is stored, as
// opening the store does: blocked tasks whose dependencies are all
// completed are released, those with a failed one are aborted. It waits
// for every call in flight (a claim long-polling included) and holds off
// new ones meanwhile: it is meant for a store that is not serving yet.
func (s *Store) FinishImport(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		return norn.ErrClosed
	}
	s.mu.Lock()
	s.tasks = newTaskIndex()
	s.queues = map[string]*queue{}
	s.timers, s.leases = nil, nil
	s.workers = map[string]*workerRec{}
	s.dependents = map[*task][]*task{}
	s.unique = map[norn.UniqueRef][]*task{}
	s.uniqueOf = map[*task]string{}
	s.byDep = map[string][]*task{}
	s.depsOf = map[*task][]string{}
	s.schedules = map[string]*norn.Schedule{}
	s.batches = map[string]*batchMem{}
	s.members = map[string]map[*task]struct{}{}
	s.batchOf = map[*task]string{}
	s.batchDue = map[string]bool{}
	s.runOnFail = map[*task]struct{}{}
	s.armedAt = 0
	s.mu.Unlock()
	if err := s.load(ctx); err != nil {
		s.fail(err)
		return fmt.Errorf("embedded: rebuilding the indexes after an import: %w", err)
	}
	return nil
}

// writeImported sets the keys of one whole task into b.
func writeImported(b *pebble.Batch, r norn.TaskRecord) {
	t := r.Task
	var logNext uint64 = 1
	if len(r.Log) > 0 {
		logNext = r.Log[len(r.Log)-1].Seq + 1
	}
	upd := nanos(t.Updated)
	st := state{status: statusCode(t.Status), priority: t.Priority, progress: t.Progress, updated: upd,
		runAt: nanos(t.RunAt), deadline: nanos(t.Deadline), started: nanos(t.Started), owner: t.Owner,
		lease: t.Lease, attempts: int32(t.Attempts), errN: uint32(len(t.Errors)), version: t.Version,
		histNext: uint64(len(t.History) + t.HistoryDropped), logNext: logNext}
	// When a task last became ready or ended is not part of a task; its
	// last update is the closest there is.
	if t.Status == norn.StatusReady {
		st.readyAt = upd
	}
	if t.Status.Terminal() {
		st.endedAt = upd
	}
	im := immutable{queue: t.Queue, created: nanos(t.Created), maxAttempts: int64(t.MaxAttempts),
		timeout: int64(t.Timeout), maxRuntime: int64(t.MaxRuntime), retry: t.Retry, expires: nanos(t.ExpiresAt),
		uniqueKey: t.UniqueKey, deps: t.DependsOn, spec: t.Spec, key: t.ConcurrencyKey,
		traceparent: t.Traceparent, tracestate: t.Tracestate, labels: t.Labels, st: st, batch: t.Batch,
		depRun: t.OnDependencyFailure == norn.DependencyRun, seqKey: t.SequenceKey, seqNo: importSeqNo(t)}
	b.Set(taskKey(t.ID, sufImmutable), im.encode(nil), nil)
	for i, e := range t.Errors {
		j, _ := json.Marshal(e)
		b.Set(taskSeqKey(t.ID, sufError, uint64(i)), j, nil)
	}
	for i, h := range t.History {
		b.Set(taskSeqKey(t.ID, sufHistory, uint64(t.HistoryDropped+i)), encodeHistory(h), nil)
	}
	if t.Result != nil {
		b.Set(taskKey(t.ID, sufResult), t.Result, nil)
	}
	for _, sg := range t.Signals {
		j, _ := json.Marshal(sg)
		b.Set(taskSeqKey(t.ID, sufSignal, sg.Seq), j, nil)
	}
	if t.SignalWait != nil {
		j, _ := json.Marshal(t.SignalWait)
		b.Set(taskKey(t.ID, sufSignalWait), j, nil)
	}
	for _, r := range t.DependencyResults {
		j, _ := json.Marshal(r)
		b.Set(depResultKey(t.ID, r.ID), j, nil)
	}
	for _, l := range r.Log {
		b.Set(taskSeqKey(t.ID, sufLog, l.Seq), encodeLog(l), nil)
	}
}

// importSeqNo numbers an imported sequence member: its creation time in
// nanoseconds keeps submit order (the source's own numbers are not part
// of a task), and a copy writes no sequence record, so load rebuilds it.
func importSeqNo(t *norn.Task) uint64 {
	if t.SequenceKey == "" {
		return 0
	}
	return uint64(max(nanos(t.Created), 0))
}
