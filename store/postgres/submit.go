package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Submit stores tasks atomically: batches of generated ids without
// dependencies or unique keys with COPY, merged with those of concurrent
// callers (submitter.go), the others with one multi-row INSERT. Batches with
// dependencies run in a transaction that share-locks the dependencies, so a
// dependency cannot complete or fail unseen while its dependent is inserted;
// batches with unique keys run in one that holds the keys' advisory locks.
func (s *Store) Submit(ctx context.Context, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	if mergeable(tasks) {
		out, err := s.submitMerged(ctx, tasks)
		if err != nil {
			return nil, err
		}
		s.wakeForSubmitted(out)
		return out, nil
	}
	var out []norn.Submitted
	run := func(q querier) error {
		var err error
		out, err = s.submitIn(ctx, q, "tasks", tasks)
		return err
	}
	var err error
	if hasDeps(tasks) || hasUniqueKeys(tasks) || hasBatches(tasks) || hasSequences(tasks) {
		err = s.withTx(ctx, func(tx pgx.Tx) error { return run(tx) })
	} else {
		err = s.withConn(ctx, func(conn *pgx.Conn) error { return run(conn) })
	}
	if err != nil {
		return nil, err
	}
	s.wakeForSubmitted(out)
	return out, nil
}

// SubmitTx submits tasks inside the caller's transaction: they exist if and
// only if tx commits (River's InsertTx). tx must be on the store's database;
// the tasks become claimable, and claimers are notified, at commit. Unique
// keys are decided exactly under READ COMMITTED (the default): under a
// stricter isolation level the holder read may miss a concurrent commit,
// and the submit then fails (serialization failure or conflict) rather
// than create a second task.
func (s *Store) SubmitTx(ctx context.Context, tx pgx.Tx, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if s.closed.Load() {
		return nil, norn.ErrClosed
	}
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	out, err := s.submitIn(ctx, tx, "tasks", tasks)
	return out, mapErr(err)
}

func hasDeps(tasks []norn.NewTask) bool {
	for _, t := range tasks {
		if len(t.DependsOn) > 0 {
			return true
		}
	}
	return false
}

func hasSequences(tasks []norn.NewTask) bool {
	return slices.ContainsFunc(tasks, func(t norn.NewTask) bool { return t.SequenceKey != "" })
}

func hasBatches(tasks []norn.NewTask) bool {
	for _, t := range tasks {
		if t.Batch != "" {
			return true
		}
	}
	return false
}

func hasUniqueKeys(tasks []norn.NewTask) bool {
	for _, t := range tasks {
		if t.UniqueKey != "" {
			return true
		}
	}
	return false
}

func (s *Store) wakeForSubmitted(out []norn.Submitted) {
	for _, r := range out {
		if !r.Duplicate && r.Task.Status == norn.StatusReady {
			s.wake.fire()
			break
		}
	}
	for _, r := range out {
		if !r.Duplicate && r.Task.Status == norn.StatusScheduled {
			s.sweepWake.fire()
			break
		}
	}
}

// insertSQL inserts a batch; with onConflict, rows whose id exists already
// or whose unique key is held are skipped (and reported as duplicates by
// the caller), otherwise the plain INSERT spares the speculative insertion
// every row pays for ON CONFLICT.
func (s *Store) insertSQL(onConflict bool) string {
	if onConflict {
		return s.sql.insertConflict
	}
	return s.sql.insert
}

func (s *Store) buildInsertSQL(onConflict bool) string {
	conflict := ""
	if onConflict {
		conflict = "ON CONFLICT DO NOTHING"
	}
	return s.q(`WITH ins AS (INSERT INTO {s}.tasks (id, queue, spec, priority, status, labels, created, updated, run_at,
	ready_at, ended_at, depends_on, pending_deps, max_attempts, retry, timeout_ns, errors, history_count, version,
	concurrency_key, max_runtime_ns, unique_key, traceparent, tracestate, fair_key, expires_at, batch, dep_run, dep_results,
	sequence_key, sequence_no)
SELECT u.id, u.queue, u.spec, u.priority, u.status, u.labels::jsonb, $16, $16, u.run_at, $16, u.ended_at,
	string_to_array(u.deps, ','), u.pending, u.max_attempts, u.retry::jsonb, u.timeout_ns, u.errors::jsonb, u.hcount, 1,
	u.ckey, u.max_runtime_ns, u.ukey, u.tparent, u.tstate, u.fkey, u.expires_at, u.batch, u.dep_run, u.dep_results::jsonb,
	u.seq_key, nullif(u.seq_no, -1)
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[],
	$8::timestamptz[], $9::text[], $10::int[], $11::int[], $12::text[], $13::bigint[], $14::text[], $15::int[],
	$19::text[], $20::bigint[], $21::text[], $22::text[], $23::text[], $24::text[], $25::timestamptz[], $26::text[], $27::boolean[], $28::text[],
	$29::text[], $30::bigint[])
	AS u(id, queue, spec, priority, status, labels, run_at, ended_at, deps, pending, max_attempts, retry,
	timeout_ns, errors, hcount, ckey, max_runtime_ns, ukey, tparent, tstate, fkey, expires_at, batch, dep_run, dep_results, seq_key, seq_no)
` + conflict + `
RETURNING id, queue, status, version, 'TaskSubmit'::text AS kind, created AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, error)
	SELECT x.id, 1, 'TaskAbort', $16, x.err::jsonb FROM unnest($17::text[], $18::text[]) AS x(id, err)
	WHERE x.id IN (SELECT id FROM ins))` + s.eventsCTE("ins") + `
SELECT ins.id FROM ins WHERE (SELECT count(*) FROM nt) >= 0`)
}

// stored is what a submit needs to know of an id that exists already.
type stored struct {
	status norn.Status
	queue  string
}

type queueDefaults struct {
	norn.QueueDefaults
	name   string
	paused bool
	flow   norn.QueueFlow
}

// submitPlan is a batch on its way in: what was read before writing and
// what norn decided from it.
type submitPlan struct {
	prefix string
	// tasks is the batch with every id filled in.
	tasks []norn.NewTask
	// lookup are the ids that may exist already: the caller's ids and the
	// dependencies outside the batch.
	lookup    []string
	clientIDs bool
	deps      bool
	keys      bool
	queues    []string
	// depIDs are the dependencies outside the batch; depEnded the outcomes
	// of those that ended, recorded with their dependents.
	depIDs   []string
	depEnded map[string]norn.DependencyResult
	// batches are the batches members join (share-locked: the caller
	// runs the submit in a transaction), batchState their states read.
	batches    []string
	batchState map[string]norn.BatchState

	now      time.Time
	events   eventLevel
	existing map[string]stored
	defaults map[string]queueDefaults
	holders  map[norn.UniqueRef][]norn.UniqueHolder
	// seqs are the batch's sequences, locked (nil: none).
	seqs map[norn.UniqueRef]*seqState
	// held are the live holders of replacing tasks' keys, locked;
	// replaced the in-place replaces by task index, and giveUp the
	// holders whose successors take their keys (debounce.go).
	held     map[string]*rec
	replaced map[int]*rec
	giveUp   []string

	// dup marks tasks not inserted (id or unique-key duplicates); uniq
	// maps those duplicating by key to the task they duplicate.
	dup  []bool
	uniq map[int]string
	// recs are the rows to insert, nil for duplicates.
	recs []*rec
	byID map[string]int // see index
}

// submitIn is the body of Submit, SubmitTx and the submits of Transact:
// plan (ids, one round trip of reads, norn's decisions), write, answer.
// The batch must already be validated; prefix names it in errors ("tasks").
func (s *Store) submitIn(ctx context.Context, q querier, prefix string, in []norn.NewTask) ([]norn.Submitted, error) {
	if len(in) == 0 {
		return []norn.Submitted{}, nil
	}
	in = norn.WithTrace(ctx, in)
	p, err := newSubmitPlan(prefix, in)
	if err != nil {
		return nil, err
	}
	if err := s.readForSubmit(ctx, q, p); err != nil {
		return nil, err
	}
	if p.keys && p.replaces() {
		if err := s.readReplaced(ctx, q, p); err != nil {
			return nil, err
		}
	}
	if err := p.decide(); err != nil {
		return nil, err
	}
	if !p.clientIDs && !p.deps && !p.keys && len(p.batches) == 0 && p.seqs == nil {
		// Generated ids cannot exist: nothing to look for, so COPY.
		if err := s.copyIn(ctx, q, p.recs, p.now, p.events); err != nil {
			return nil, err
		}
		out := make([]norn.Submitted, len(p.recs))
		for i, r := range p.recs {
			out[i] = norn.Submitted{Task: r.task()}
		}
		return out, nil
	}
	if err := s.giveUpKeys(ctx, q, p); err != nil {
		return nil, err
	}
	inserted, err := s.insertRecs(ctx, q, p)
	if err != nil {
		return nil, err
	}
	if err := s.writeReplaced(ctx, q, p); err != nil {
		return nil, err
	}
	if p.seqs != nil {
		if err := s.saveSequences(ctx, q, p); err != nil {
			return nil, err
		}
	}
	out, err := s.answerSubmit(ctx, q, p, inserted)
	if err != nil {
		return nil, err
	}
	p.markReplaced(out)
	return out, nil
}

// newSubmitPlan fills in generated ids and lists what must be read.
func newSubmitPlan(prefix string, in []norn.NewTask) (*submitPlan, error) {
	p := &submitPlan{prefix: prefix, tasks: make([]norn.NewTask, len(in))}
	copy(p.tasks, in)
	// The batch's ids are only looked at for dependencies.
	var batch map[string]int
	if hasDeps(in) {
		batch = make(map[string]int, len(p.tasks))
	}
	queues := map[string]bool{}
	// Ids the caller chose may exist already; generated ones (UUIDv7)
	// cannot, so they need neither a lookup nor ON CONFLICT.
	for i := range p.tasks {
		t := &p.tasks[i]
		if t.ID == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			t.ID = u.String()
		} else {
			p.lookup = append(p.lookup, t.ID)
		}
		if batch != nil {
			batch[t.ID] = i
		}
		queues[t.Queue] = true
		p.keys = p.keys || t.UniqueKey != ""
		// A policy without dependencies is kept too, by the row path.
		p.deps = p.deps || len(t.DependsOn) > 0 || t.OnDependencyFailure != ""
		if t.Batch != "" && !slices.Contains(p.batches, t.Batch) {
			p.batches = append(p.batches, t.Batch)
		}
	}
	p.clientIDs = len(p.lookup) > 0
	for i := range p.tasks {
		for _, d := range p.tasks[i].DependsOn {
			if _, ok := batch[d]; !ok {
				p.lookup = append(p.lookup, d)
				p.depIDs = append(p.depIDs, d)
			}
		}
	}
	for q := range queues {
		p.queues = append(p.queues, q)
	}
	return p, nil
}

// uniqueLockKey is the advisory lock every submit of a queue's unique key
// takes (see readForSubmit).
func (s *Store) uniqueLockKey(ref norn.UniqueRef) int64 {
	return lockKey("norn-unique:" + s.cfg.Schema + ":" + ref.Queue + "\x00" + ref.Key)
}

// readForSubmit reads, in one round trip, the time, the existing ids
// (share-locked when the batch has dependencies: the caller runs it in a
// transaction), the queue defaults and the holders of the batch's unique
// keys. Before the holders are read, the keys' advisory locks are taken
// (in a fixed order, so submitters cannot deadlock): submits of one key
// are serialized until commit, so the holder read is the truth at insert
// time. Without the lock, a task inserted by a concurrent submitter could
// end before this insert and let it through although it ended within
// unique_for; the partial unique index on live holders stays the guard
// against every other writer.
func (s *Store) readForSubmit(ctx context.Context, q querier, p *submitPlan) error {
	b := &pgx.Batch{}
	var level int
	b.Queue(s.q("SELECT clock_timestamp(), (" + eventLevelSQL + ")")).QueryRow(func(row pgx.Row) error {
		return row.Scan(&p.now, &level)
	})
	lock := ""
	if p.deps {
		lock = " ORDER BY id FOR SHARE"
	}
	p.existing = map[string]stored{}
	if len(p.lookup) > 0 {
		b.Queue(s.q(`SELECT id, status, queue FROM {s}.tasks WHERE id = ANY($1)`+lock), p.lookup).Query(func(rows pgx.Rows) error {
			var id, st, queue string
			_, err := pgx.ForEachRow(rows, []any{&id, &st, &queue}, func() error {
				p.existing[id] = stored{status: norn.Status(st), queue: queue}
				return nil
			})
			return err
		})
	}
	b.Queue(s.q(`SELECT `+queueCols+` FROM {s}.queues WHERE name = ANY($1)`), p.queues).Query(func(rows pgx.Rows) error {
		qds, err := pgx.CollectRows(rows, queueRow)
		p.defaults = make(map[string]queueDefaults, len(qds))
		for _, d := range qds {
			p.defaults[d.name] = d
		}
		return err
	})
	if len(p.batches) > 0 {
		// Share-locked: a seal (FOR UPDATE) waits for the joins in flight
		// and a join after the seal reads it sealed.
		b.Queue(s.q(`SELECT id, state FROM {s}.batches WHERE id = ANY($1) ORDER BY id FOR SHARE`), p.batches).Query(p.readBatchStates)
	}
	if len(p.depIDs) > 0 {
		b.Queue(s.q(`SELECT id, status, result, errors->-1 FROM {s}.tasks
	WHERE id = ANY($1) AND status IN ('completed', 'aborted', 'cancelled')`), p.depIDs).Query(func(rows pgx.Rows) (err error) {
			p.depEnded, err = scanOutcomes(rows)
			return err
		})
	}
	if p.keys {
		s.queueHolders(b, p)
	}
	if refs := p.seqRefs(); len(refs) > 0 {
		s.queueSeqLock(b, p, refs)
	}
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	p.events = eventLevel(level)
	if c := s.clockNow(); c != nil {
		p.now = *c
	}
	p.now = micro(p.now)
	return nil
}

// queueHolders queues, for the batch's unique keys, the advisory locks
// (sorted, so submitters cannot deadlock) and the read of each key's live
// holder and the holder that ended last, into p.holders.
func (s *Store) queueHolders(b *pgx.Batch, p *submitPlan) {
	refs := p.uniqueRefs()
	locks := make([]int64, len(refs))
	rq, rk := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		locks[i], rq[i], rk[i] = s.uniqueLockKey(r), r.Queue, r.Key
	}
	slices.Sort(locks)
	b.Queue("SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k", locks)
	b.Queue(s.q(`SELECT u.q, u.k, h.id, h.status, h.ended_at FROM unnest($1::text[], $2::text[]) AS u(q, k)
CROSS JOIN LATERAL ((SELECT t.id, t.status, t.ended_at FROM {s}.tasks t WHERE t.unique_key = u.k AND t.queue = u.q
	AND t.ist IN ('scheduled', 'blocked', 'ready', 'batched', 'running') LIMIT 1)
UNION ALL (SELECT t.id, t.status, t.ended_at FROM {s}.tasks t WHERE t.unique_key = u.k AND t.queue = u.q
	AND t.unique_ended IS NOT NULL ORDER BY t.unique_ended DESC LIMIT 1)) h`), rq, rk).Query(func(rows pgx.Rows) error {
		p.holders = map[norn.UniqueRef][]norn.UniqueHolder{}
		var ref norn.UniqueRef
		var h norn.UniqueHolder
		var ended *time.Time
		_, err := pgx.ForEachRow(rows, []any{&ref.Queue, &ref.Key, &h.ID, &h.Status, &ended}, func() error {
			h.Ended = time.Time{}
			if ended != nil {
				h.Ended = ended.UTC()
			}
			p.holders[ref] = append(p.holders[ref], h)
			return nil
		})
		return err
	})
}

// readBatchStates reads the states of the batches members join.
func (p *submitPlan) readBatchStates(rows pgx.Rows) error {
	p.batchState = map[string]norn.BatchState{}
	var id, st string
	_, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		p.batchState[id] = norn.BatchState(st)
		return nil
	})
	return err
}

// uniqueRefs lists the batch's distinct unique keys.
func (p *submitPlan) uniqueRefs() []norn.UniqueRef {
	seen := map[norn.UniqueRef]bool{}
	var refs []norn.UniqueRef
	for i := range p.tasks {
		if k := p.tasks[i].UniqueKey; k != "" {
			r := norn.UniqueRef{Queue: p.tasks[i].Queue, Key: k}
			if !seen[r] {
				seen[r] = true
				refs = append(refs, r)
			}
		}
	}
	return refs
}

// decide applies norn's rules to what was read: ids that exist are
// duplicates (in the same queue) or conflicts, held unique keys make
// duplicates, the rest are new and get their first state, in the order
// norn.OrderBatch gives.
func (p *submitPlan) decide() error {
	if err := norn.CheckExpiries(p.prefix, p.tasks, p.now); err != nil {
		return err
	}
	ids := make([]string, len(p.tasks))
	for i := range p.tasks {
		ids[i] = p.tasks[i].ID
		if e, ok := p.existing[ids[i]]; ok {
			if e.queue != p.tasks[i].Queue {
				return norn.IDTaken(fmt.Sprintf("%s[%d].id", p.prefix, i), ids[i])
			}
			p.markDup(i)
		}
	}
	if p.keys {
		p.uniq = norn.PlanUnique(p.tasks, ids, p.dup, p.now, func(r norn.UniqueRef) []norn.UniqueHolder { return p.holders[r] })
		p.planReplaces()
		for i := range p.uniq {
			p.markDup(i)
		}
	}
	order, err := norn.OrderBatch(p.prefix, p.tasks, ids, p.dup, func(id string) bool { _, ok := p.existing[id]; return ok })
	if err != nil {
		return err
	}
	if err := p.checkJoins(); err != nil {
		return err
	}
	p.recs = make([]*rec, len(p.tasks))
	// Statuses of the dependencies: stored ones, then new tasks as decided.
	depStatus := make(map[string]norn.Status, len(p.existing))
	for id, e := range p.existing {
		depStatus[id] = e.status
	}
	for _, i := range order {
		nt := &p.tasks[i]
		qd, ok := p.defaults[nt.Queue]
		if !ok {
			qd = queueDefaults{QueueDefaults: norn.DefaultQueueDefaults()}
		}
		status := func(id string) norn.Status { return depStatus[id] }
		in := nt.Initial(p.now, &qd.QueueDefaults, status)
		var seqNo int64
		if nt.SequenceKey != "" {
			seqNo = p.joinSequence(nt, &in)
		}
		p.recs[i] = newRec(nt, in, p.now)
		p.recs[i].seqNo = seqNo
		p.recs[i].DependencyResults = p.endedResults(nt, in, status)
		if qd.flow.FairBy != "" {
			k := qd.flow.FairKey(nt.ConcurrencyKey, nt.Labels)
			p.recs[i].fairKey = &k
		}
		if p.deps {
			depStatus[nt.ID] = in.Status
		}
	}
	return nil
}

// endedResults are the records of the dependencies in.EndedDeps names:
// read ones, or (ended in this same batch) their status alone.
func (p *submitPlan) endedResults(nt *norn.NewTask, in norn.Initial, status func(string) norn.Status) []norn.DependencyResult {
	var rs []norn.DependencyResult
	for _, d := range in.EndedDeps {
		r, ok := p.depEnded[d]
		if !ok {
			r = norn.NewDependencyResult(d, status(d), nil, nil)
		}
		rs = append(rs, r)
	}
	return norn.SortDependencyResults(nt.DependsOn, rs)
}

// checkJoins refuses members of batches that do not exist or are sealed.
func (p *submitPlan) checkJoins() error {
	for i := range p.tasks {
		id := p.tasks[i].Batch
		if id == "" || (p.dup != nil && p.dup[i]) {
			continue
		}
		field := fmt.Sprintf("%s[%d].batch", p.prefix, i)
		switch st, ok := p.batchState[id]; {
		case !ok:
			return norn.BatchNotFound(field, id)
		case st != norn.BatchOpen:
			return norn.BatchSealedError(field, id)
		}
	}
	return nil
}

// index returns the position of id in the batch.
func (p *submitPlan) index(id string) (int, bool) {
	if p.byID == nil {
		p.byID = make(map[string]int, len(p.tasks))
		for i := range p.tasks {
			p.byID[p.tasks[i].ID] = i
		}
	}
	i, ok := p.byID[id]
	return i, ok
}

func (p *submitPlan) markDup(i int) {
	if p.dup == nil {
		p.dup = make([]bool, len(p.tasks))
	}
	p.dup[i] = true
}

// newRec is the row of a new task in its first state in.
func newRec(nt *norn.NewTask, in norn.Initial, now time.Time) *rec {
	r := &rec{}
	r.ID, r.Queue, r.Priority, r.Status, r.UniqueKey = nt.ID, nt.Queue, nt.Priority, in.Status, nt.UniqueKey
	if len(nt.Spec) > 0 {
		// Shared with the caller's task for the call: what leaves the
		// store (rec.task) is a copy.
		r.Spec = nt.Spec
	}
	if len(nt.Labels) > 0 {
		r.Labels = nt.Labels
	}
	r.ConcurrencyKey, r.Batch, r.SequenceKey = nt.ConcurrencyKey, nt.Batch, nt.SequenceKey
	if nt.RunsOnFailure() {
		r.OnDependencyFailure = norn.DependencyRun
	}
	r.Traceparent, r.Tracestate = nt.Traceparent, nt.Tracestate
	r.Created, r.Updated, r.readyAt = now, now, now
	r.RunAt = micro(in.RunAt)
	if len(nt.DependsOn) > 0 {
		r.DependsOn = append([]string(nil), nt.DependsOn...)
	}
	r.Timeout, r.MaxAttempts, r.Retry, r.pendingDeps = in.Timeout, in.MaxAttempts, in.Retry, in.PendingDeps
	r.MaxRuntime = in.MaxRuntime
	if !in.ExpiresAt.IsZero() {
		r.ExpiresAt = micro(in.ExpiresAt)
	}
	r.Version = 1
	if in.Error != nil {
		r.endedAt = now
		r.Errors = []norn.ErrorInfo{*in.Error}
		r.History = []norn.HistoryEntry{{Type: norn.TaskAbort, Time: now, Error: in.Error}}
		r.historyCount = 1
	}
	return r
}

// insertArgs are the column arrays of insertSQL, one element per new row.
type insertArgs struct {
	ids, qs, status             []string
	labels, deps, retries, errs []*string
	ckeys, keys, fkeys          []*string
	tparents, tstates, batches  []*string
	depRun                      []bool
	depResults                  []*string
	seqKeys                     []*string
	seqNos                      []int64
	specs                       [][]byte
	prio, timeouts, maxRuntimes []int64
	runAt                       []time.Time
	ended, expires              []*time.Time
	pending, maxAtt, hcount     []int32
	abortIDs, abortErrs         []string
}

func (a *insertArgs) add(r *rec) {
	a.ids = append(a.ids, r.ID)
	a.qs = append(a.qs, r.Queue)
	a.specs = append(a.specs, r.Spec)
	a.prio = append(a.prio, int64(r.Priority))
	a.status = append(a.status, string(r.Status))
	a.labels = append(a.labels, labelsJSON(r.Labels))
	a.runAt = append(a.runAt, r.RunAt)
	a.ended = append(a.ended, timePtr(r.endedAt))
	a.expires = append(a.expires, timePtr(r.ExpiresAt))
	var deps *string
	if len(r.DependsOn) > 0 {
		d := strings.Join(r.DependsOn, ",")
		deps = &d
	}
	a.deps = append(a.deps, deps)
	a.pending = append(a.pending, int32(r.pendingDeps))
	a.maxAtt = append(a.maxAtt, int32(r.MaxAttempts))
	a.retries = append(a.retries, retryJSON(r.Retry))
	a.timeouts = append(a.timeouts, int64(r.Timeout))
	a.maxRuntimes = append(a.maxRuntimes, int64(r.MaxRuntime))
	a.errs = append(a.errs, errorsJSON(r.Errors))
	a.hcount = append(a.hcount, int32(r.historyCount))
	a.ckeys = append(a.ckeys, strPtr(r.ConcurrencyKey))
	a.fkeys = append(a.fkeys, r.fairKey)
	a.keys = append(a.keys, strPtr(r.UniqueKey))
	a.tparents, a.tstates = append(a.tparents, strPtr(r.Traceparent)), append(a.tstates, strPtr(r.Tracestate))
	a.batches = append(a.batches, strPtr(r.Batch))
	a.depRun = append(a.depRun, r.OnDependencyFailure == norn.DependencyRun)
	a.depResults = append(a.depResults, encodeDepResults(r.DependencyResults))
	a.seqKeys = append(a.seqKeys, strPtr(r.SequenceKey))
	no := int64(-1)
	if r.SequenceKey != "" {
		no = r.seqNo
	}
	a.seqNos = append(a.seqNos, no)
	if r.Status == norn.StatusAborted {
		b, _ := json.Marshal(r.Errors[0])
		a.abortIDs, a.abortErrs = append(a.abortIDs, r.ID), append(a.abortErrs, string(b))
	}
}

// insertRecs writes the plan's new rows and returns the ids inserted: with
// the caller's ids or unique keys, rows that conflict (inserted
// concurrently) are skipped, and answerSubmit reports them.
func (s *Store) insertRecs(ctx context.Context, q querier, p *submitPlan) (map[string]bool, error) {
	var a insertArgs
	for _, r := range p.recs {
		if r != nil {
			a.add(r)
		}
	}
	inserted := map[string]bool{}
	if len(a.ids) == 0 {
		return inserted, nil
	}
	rows, err := q.Query(ctx, s.insertSQL(p.clientIDs || p.keys), a.ids, a.qs, a.specs, a.prio, a.status, a.labels,
		a.runAt, a.ended, a.deps, a.pending, a.maxAtt, a.retries, a.timeouts, a.errs, a.hcount, p.now,
		a.abortIDs, a.abortErrs, a.ckeys, a.maxRuntimes, a.keys, a.tparents, a.tstates, a.fkeys, a.expires, a.batches, a.depRun, a.depResults, a.seqKeys, a.seqNos)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, id := range got {
		inserted[id] = true
	}
	return inserted, nil
}

// answerSubmit builds the results: inserted tasks as written, duplicates
// (decided before, or inserted concurrently) as they are now.
func (s *Store) answerSubmit(ctx context.Context, q querier, p *submitPlan, inserted map[string]bool) ([]norn.Submitted, error) {
	out := make([]norn.Submitted, len(p.tasks))
	var read []string
	for i := range p.tasks {
		id := p.tasks[i].ID
		switch of, byKey := p.uniq[i]; {
		case inserted[id]:
			out[i] = norn.Submitted{Task: p.recs[i].task()}
		case byKey:
			if !inserted[of] {
				read = append(read, of)
			}
		default:
			read = append(read, id)
		}
	}
	var found map[string]*rec
	if len(read) > 0 {
		var err error
		if found, err = s.readFull(ctx, q, read); err != nil {
			return nil, err
		}
	}
	for i := range p.tasks {
		if out[i].Task != nil {
			continue
		}
		nt := &p.tasks[i]
		of, byKey := p.uniq[i]
		if !byKey {
			of = nt.ID
		}
		if j, ok := p.index(of); ok && inserted[of] {
			// A duplicate of an earlier task of the batch.
			out[i] = norn.Submitted{Task: p.recs[j].task(), Duplicate: true}
			continue
		}
		d := found[of]
		if d == nil && !byKey && nt.UniqueKey != "" && p.recs[i] != nil {
			// Not inserted, and its id is free: its key was taken by a
			// writer that holds no submit lock (a retried task).
			var err error
			if d, err = s.liveHolder(ctx, q, norn.UniqueRef{Queue: nt.Queue, Key: nt.UniqueKey}); err != nil {
				return nil, err
			}
		}
		switch {
		case d == nil:
			// Inserted concurrently and deleted again before we looked.
			return nil, norn.Errorf(norn.CodeConflict, "task %q changed concurrently; submit again", nt.ID)
		case d.Queue != nt.Queue:
			// Inserted concurrently into another queue.
			return nil, norn.IDTaken(fmt.Sprintf("%s[%d].id", p.prefix, i), nt.ID)
		}
		out[i] = norn.Submitted{Task: d.task(), Duplicate: true}
	}
	return out, nil
}

// liveHolder reads the task of ref's queue that holds its key and is not
// terminal (nil when none does).
func (s *Store) liveHolder(ctx context.Context, q querier, ref norn.UniqueRef) (*rec, error) {
	rows, err := q.Query(ctx, s.q(`SELECT `+colsFull+` FROM {s}.tasks t WHERE t.queue = $1 AND t.unique_key = $2
	AND t.ist IN ('scheduled', 'blocked', 'ready', 'batched', 'running')`), ref.Queue, ref.Key)
	if err != nil {
		return nil, err
	}
	list, err := collectRecs(rows)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return list[0], nil
}

// queueRow reads one row of queueCols (pgx.CollectRows, or a single row).
func queueRow(row pgx.CollectableRow) (queueDefaults, error) { return scanQueue(row) }

func scanQueue(row pgx.Row) (queueDefaults, error) {
	var (
		d                      queueDefaults
		timeout, rc, ra, rcanc int64
		maxRuntime, expireIn   int64
		retry                  []byte
		maxAtt                 int32
	)
	var maxRunning, keyLimit, rateBurst, keyBurst int32
	var fairBy string
	var ratePerSecond, keyRate float64
	if err := row.Scan(&d.name, &d.paused, &timeout, &retry, &maxAtt, &rc, &ra, &rcanc, &maxRuntime, &maxRunning, &keyLimit,
		&fairBy, &ratePerSecond, &rateBurst, &expireIn, &d.SequenceOnFailure, &keyRate, &keyBurst); err != nil {
		return d, err
	}
	d.Timeout, d.MaxRuntime, d.ExpireIn = norn.Duration(timeout), norn.Duration(maxRuntime), norn.Duration(expireIn)
	d.MaxAttempts = int(maxAtt)
	d.flow = norn.QueueFlow{MaxRunning: int(maxRunning), KeyLimit: int(keyLimit), FairBy: fairBy,
		RateLimit:    norn.RateLimit{PerSecond: ratePerSecond, Burst: int(rateBurst)},
		KeyRateLimit: norn.RateLimit{PerSecond: keyRate, Burst: int(keyBurst)}}
	d.Retention = norn.Retention{Completed: norn.Duration(rc), Aborted: norn.Duration(ra), Cancelled: norn.Duration(rcanc)}
	if len(retry) > 0 {
		d.Retry = new(norn.RetryPolicy)
		if err := json.Unmarshal(retry, d.Retry); err != nil {
			return d, err
		}
	}
	return d, nil
}
