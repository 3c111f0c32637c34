package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Get returns one task.
func (s *Store) Get(ctx context.Context, id string) (*norn.Task, error) {
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	found, _, err := s.GetMany(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, norn.NotFound(id)
	}
	return found[0], nil
}

// GetMany returns the tasks that exist, in request order, and the missing ids.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*norn.Task, []string, error) {
	ids, err := norn.GetManyIDs(ids)
	if err != nil {
		return nil, nil, err
	}
	var recs map[string]*rec
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		recs, err = s.readFull(ctx, conn, ids)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	found := []*norn.Task{}
	var missing []string
	for _, id := range ids {
		if r := recs[id]; r != nil {
			found = append(found, r.task())
		} else {
			missing = append(missing, id)
		}
	}
	return found, missing, nil
}

// where builds the SQL condition of a filter with its arguments, numbered
// from len(args)+1.
func where(f norn.Filter, args []any) (string, []any) {
	var conds []string
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "$?", fmt.Sprintf("$%d", len(args))))
	}
	if len(f.Queues) > 0 {
		add("t.queue = ANY($?)", f.Queues)
	}
	if len(f.Statuses) > 0 {
		st := make([]string, len(f.Statuses))
		indexed := true
		for i, s := range f.Statuses {
			st[i] = string(s)
			indexed = indexed && (s == norn.StatusScheduled || s == norn.StatusRunning || s == norn.StatusBlocked)
		}
		add("t.status = ANY($?)", st)
		if indexed {
			// For these statuses ist is the status: said so, the
			// planner can read their partial indexes.
			add("t.ist = ANY($?)", st)
		}
	}
	if len(f.Labels) > 0 {
		b, _ := json.Marshal(f.Labels)
		add("t.labels @> $?::jsonb", string(b))
	}
	if f.Owner != "" {
		add("t.owner = $?", f.Owner)
	}
	if f.IDContains != "" {
		add("strpos(t.id, $?) > 0", f.IDContains)
	}
	if f.DependsOn != "" {
		// @> (not = ANY) so the GIN index on depends_on serves it.
		add("t.depends_on @> ARRAY[$?::text]", f.DependsOn)
	}
	if f.Batch != "" {
		add("t.batch = $?", f.Batch)
	}
	if f.UniqueKey != "" {
		add("t.unique_key = $?", f.UniqueKey)
	}
	if !f.CreatedAfter.IsZero() {
		add("t.created > $?", f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		add("t.created < $?", f.CreatedBefore)
	}
	if !f.UpdatedAfter.IsZero() {
		add("t.updated > $?", f.UpdatedAfter)
	}
	if !f.UpdatedBefore.IsZero() {
		add("t.updated < $?", f.UpdatedBefore)
	}
	if len(conds) == 0 {
		return "TRUE", args
	}
	return strings.Join(conds, " AND "), args
}

// cursor is the position after the last task of a page.
type cursor struct {
	Order    norn.Order `json:"o"`
	ID       string     `json:"i"`
	Priority uint32     `json:"p,omitempty"`
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return norn.CursorString(b)
}

func decodeCursor(s string, order norn.Order) (*cursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := norn.CursorBytes(s)
	if err != nil {
		return nil, err
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.ID == "" || c.Order != order {
		return nil, norn.BadCursor()
	}
	return &c, nil
}

// pageSQL builds the keyset query of one page after c.
func (s *Store) pageSQL(q norn.Query, c *cursor, limit int) (string, []any) {
	cond, args := where(q.Filter, nil)
	var order string
	switch q.Order {
	case norn.OrderNewest:
		order = "t.id DESC"
		if c != nil {
			args = append(args, c.ID)
			cond += fmt.Sprintf(" AND t.id < $%d", len(args))
		}
	case norn.OrderPriority:
		order = "t.priority DESC, t.id"
		if c != nil {
			args = append(args, int64(c.Priority), c.ID)
			cond += fmt.Sprintf(" AND (t.priority < $%d OR (t.priority = $%d AND t.id > $%d))", len(args)-1, len(args)-1, len(args))
		}
	default:
		order = "t.id"
		if c != nil {
			args = append(args, c.ID)
			cond += fmt.Sprintf(" AND t.id > $%d", len(args))
		}
	}
	cols := colsFull
	if q.Summary {
		cols = colsSummary
	}
	args = append(args, limit)
	return s.q(fmt.Sprintf("SELECT %s FROM {s}.tasks t WHERE %s ORDER BY %s LIMIT $%d", cols, cond, order, len(args))), args
}

func (s *Store) page(ctx context.Context, q norn.Query, c *cursor, limit int) ([]*norn.Task, error) {
	sql, args := s.pageSQL(q, c, limit)
	var out []*norn.Task
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		if err := s.settleLeases(ctx, conn, ""); err != nil {
			return err
		}
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		d := newRecReader()
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*norn.Task, error) {
			r, err := d.read(row)
			if err != nil {
				return nil, err
			}
			if q.Summary {
				return r.Summary(), nil
			}
			return &r.Task, nil
		})
		return err
	})
	return out, err
}

// List returns one page.
func (s *Store) List(ctx context.Context, q norn.Query) (norn.Page, error) {
	limit, err := q.PageLimit()
	if err != nil {
		return norn.Page{}, err
	}
	c, err := decodeCursor(q.Cursor, q.Order)
	if err != nil {
		return norn.Page{}, err
	}
	tasks, err := s.page(ctx, q, c, limit+1)
	if err != nil {
		return norn.Page{}, err
	}
	p := norn.Page{Tasks: tasks}
	if len(tasks) > limit {
		p.Tasks = tasks[:limit]
		last := p.Tasks[limit-1]
		p.NextCursor = encodeCursor(cursor{Order: q.Order, ID: last.ID, Priority: last.Priority})
	}
	if p.Tasks == nil {
		p.Tasks = []*norn.Task{}
	}
	return p, nil
}

// Stream walks every matching task page by page (keyset pagination), so
// memory stays constant whatever the result size.
func (s *Store) Stream(ctx context.Context, q norn.Query) (norn.TaskIterator, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	c, err := decodeCursor(q.Cursor, q.Order)
	if err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, norn.ErrClosed
	}
	return &taskIter{s: s, ctx: ctx, q: q, cur: c, left: q.Limit}, nil
}

const streamPage = 500

type taskIter struct {
	s     *Store
	ctx   context.Context
	q     norn.Query
	cur   *cursor
	buf   []*norn.Task
	item  *norn.Task
	left  int // remaining cap (0 = none when q.Limit == 0)
	done  bool
	err   error
	count int
}

func (it *taskIter) Next() bool {
	if it.done {
		return false
	}
	if it.q.Limit > 0 && it.count >= it.q.Limit {
		it.done = true
		return false
	}
	if len(it.buf) == 0 {
		n := streamPage
		if it.q.Limit > 0 {
			n = min(n, it.q.Limit-it.count)
		}
		page, err := it.s.page(it.ctx, it.q, it.cur, n)
		if err != nil {
			it.err, it.done = err, true
			return false
		}
		if len(page) == 0 {
			it.done = true
			return false
		}
		last := page[len(page)-1]
		it.cur = &cursor{Order: it.q.Order, ID: last.ID, Priority: last.Priority}
		it.buf = page
	}
	it.item = it.buf[0]
	it.buf[0] = nil
	it.buf = it.buf[1:]
	it.count++
	return true
}

func (it *taskIter) Item() *norn.Task { return it.item }
func (it *taskIter) Err() error       { return it.err }
func (it *taskIter) Close() error {
	it.done, it.buf = true, nil
	return nil
}

// Count returns how many tasks match f.
func (s *Store) Count(ctx context.Context, f norn.Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	cond, args := where(f, nil)
	var n int64
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		if err := s.settleLeases(ctx, conn, ""); err != nil {
			return err
		}
		return conn.QueryRow(ctx, s.q("SELECT count(*) FROM {s}.tasks t WHERE "+cond), args...).Scan(&n)
	})
	return n, err
}

// CountGrouped counts matching tasks by queue and status.
func (s *Store) CountGrouped(ctx context.Context, f norn.Filter) ([]norn.GroupCount, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	cond, args := where(f, nil)
	return s.groupCounts(ctx, cond, args)
}

func (s *Store) groupCounts(ctx context.Context, cond string, args []any) ([]norn.GroupCount, error) {
	var out []norn.GroupCount
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = []norn.GroupCount{}
		sql := countsSQL(cond)
		if cond != "TRUE" {
			// A filter may name what a lease changes (status, owner, ...):
			// the leased tasks are written as running first.
			if err := s.settleLeases(ctx, conn, ""); err != nil {
				return err
			}
			sql = "SELECT t.queue, t.status, count(*) FROM {s}.tasks t WHERE " + cond + " GROUP BY 1, 2"
		}
		rows, err := conn.Query(ctx, s.q(sql), args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (norn.GroupCount, error) {
			var g norn.GroupCount
			var st string
			err := row.Scan(&g.Queue, &st, &g.Count)
			g.Status = norn.Status(st)
			return g, err
		})
		return err
	})
	norn.SortGroupCounts(out)
	return out, err
}

// Cancel cancels a task that has not finished.
func (s *Store) Cancel(ctx context.Context, id string) (*norn.Task, error) {
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	res, err := s.Transact(ctx, norn.Txn{Cancel: []string{id}})
	if err != nil {
		return nil, stripField(err)
	}
	return res.Cancelled[0], nil
}

// Update changes a task that is not running and not terminal.
func (s *Store) Update(ctx context.Context, id string, u norn.Update) (*norn.Task, error) {
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	res, err := s.Transact(ctx, norn.Txn{Update: []norn.TxnUpdate{{ID: id, Update: u}}})
	if err != nil {
		return nil, stripField(err)
	}
	return res.Updated[0], nil
}

// Delete removes a task with its history and log.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := norn.ValidateID("id", id); err != nil {
		return err
	}
	_, err := s.Transact(ctx, norn.Txn{Delete: []string{id}})
	return stripField(err)
}

// stripField removes the transaction position ("cancel[0]") that a
// single-task call has no use for.
func stripField(err error) error {
	ne, ok := err.(*norn.Error)
	if !ok || ne.Field == "" {
		return err
	}
	c := *ne
	if i := strings.Index(c.Field, "]"); i >= 0 && strings.Contains(c.Field[:i], "[") {
		c.Field = strings.TrimPrefix(c.Field[i+1:], ".")
	}
	return &c
}

// DeleteMatching removes every task matching a non-empty filter, in
// batches, aborting blocked dependents of pending tasks it removes.
func (s *Store) DeleteMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := f.ValidateDelete(); err != nil {
		return 0, err
	}
	var total int64
	for {
		var n int
		err := s.withTx(ctx, func(tx pgx.Tx) error {
			if err := s.settleLeases(ctx, tx, ""); err != nil {
				return err
			}
			cond, args := where(f, nil)
			rows, err := tx.Query(ctx, s.q("SELECT t.id FROM {s}.tasks t WHERE "+cond+" ORDER BY t.id LIMIT 1000 FOR UPDATE"), args...)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			// Out of their ready rows first, as Transact's read does for its
			// deletes (batches.go).
			if err := s.detach(ctx, tx, ids); err != nil {
				return err
			}
			now, err := s.dbNow(ctx, tx)
			if err != nil {
				return err
			}
			n, err = s.deleteIDs(ctx, tx, now, ids)
			return err
		})
		if err != nil {
			return total, err
		}
		total += int64(n)
		if n < 1000 {
			return total, nil
		}
	}
}

// deleteIDs removes tasks with their history and log and cascades the
// deletion of pending tasks to their blocked dependents.
func (s *Store) deleteIDs(ctx context.Context, q querier, now time.Time, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err := q.Query(ctx, s.q(`WITH d AS (DELETE FROM {s}.tasks t WHERE t.id = ANY($1)
	RETURNING t.id, t.queue, t.status AS old_status, t.status, t.version + 1 AS version,
	'TaskDelete'::text AS kind, $2::timestamptz AS time),
dh AS (DELETE FROM {s}.task_history_rows h USING d WHERE h.task_id = d.id),
dl AS (DELETE FROM {s}.task_log l USING d WHERE l.task_id = d.id),
dg AS (DELETE FROM {s}.signals g USING d WHERE g.task_id = d.id)`+s.eventsCTE("d")+`
SELECT d.id, d.old_status FROM d WHERE (SELECT count(*) FROM nt) >= 0`), ids, now)
	if err != nil {
		return 0, err
	}
	var pendingIDs []string
	n := 0
	var id, st string
	if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		n++
		if norn.Status(st).Pending() {
			pendingIDs = append(pendingIDs, id)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if len(pendingIDs) > 0 {
		errs := make([]string, len(pendingIDs))
		for i, id := range pendingIDs {
			errs[i] = errJSON(norn.DependencyDeleted(id))
		}
		if _, err := s.cascade(ctx, q, now, pendingIDs, errs); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Transact applies a transaction all or nothing: submits first, then
// updates, cancels and deletes, all on rows locked for the transaction,
// after every requirement held.
func (s *Store) Transact(ctx context.Context, txn norn.Txn) (*norn.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return nil, err
	}
	var res *norn.TxnResult
	var w wakes
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, w, err = s.transactIn(ctx, tx, txn)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := s.readBackTxn(ctx, res); err != nil {
		return nil, err
	}
	w.fire(s)
	return res, nil
}

// wakes says which local waiters a write should wake once committed:
// claimers (a task became ready) and the sweeper (one became scheduled).
type wakes struct{ ready, sched bool }

func (w *wakes) saw(st norn.Status) {
	w.ready = w.ready || st == norn.StatusReady
	w.sched = w.sched || st == norn.StatusScheduled
}

func (w wakes) fire(s *Store) {
	if w.ready {
		s.wake.fire()
	}
	if w.sched {
		s.sweepWake.fire()
	}
}

// transactIn runs a transaction's steps inside tx: lock what it names,
// submit, check the requirements, decide the updates, cancels and deletes
// (txnPlan), write them, and answer.
func (s *Store) transactIn(ctx context.Context, tx pgx.Tx, txn norn.Txn) (*norn.TxnResult, wakes, error) {
	res := &norn.TxnResult{Submitted: []norn.Submitted{}, Updated: []*norn.Task{}, Cancelled: []*norn.Task{}}
	var w wakes
	// Lock what the transaction reads or changes first, so the
	// requirements still hold when it commits.
	lockIDs := txnIDs(txn)
	if len(lockIDs) > 0 {
		locked, err := s.readCore(ctx, tx, lockIDs, true)
		if err != nil {
			return nil, w, err
		}
		// Before the submits: a requirement is about the tasks as they
		// were, not one the transaction itself adds.
		if err := checkRequirements(txn.Require, locked); err != nil {
			return nil, w, err
		}
	}
	if len(txn.Submit) > 0 {
		sub, err := s.submitIn(ctx, tx, "submit", txn.Submit)
		if err != nil {
			return nil, w, err
		}
		res.Submitted = sub
		for _, r := range sub {
			if !r.Duplicate {
				w.saw(r.Task.Status)
			}
		}
	}
	now, err := s.dbNow(ctx, tx)
	if err != nil {
		return nil, w, err
	}
	now = micro(now)
	recs, err := s.readCore(ctx, tx, lockIDs, false)
	if err != nil {
		return nil, w, err
	}
	p := &txnPlan{recs: recs, changes: map[string]*change{}, deleted: map[string]bool{}}
	if err := p.decide(txn, now, &w); err != nil {
		return nil, w, err
	}
	if err := s.writeTxnPlan(ctx, tx, p, now, res, &w); err != nil {
		return nil, w, err
	}
	for _, r := range p.updated {
		res.Updated = append(res.Updated, r.Task.Clone())
	}
	for _, r := range p.cancelled {
		res.Cancelled = append(res.Cancelled, r.Task.Clone())
	}
	return res, w, nil
}

// txnIDs lists the ids a transaction requires, updates, cancels or deletes.
func txnIDs(txn norn.Txn) []string {
	var ids []string
	for _, r := range txn.Require {
		ids = append(ids, r.ID)
	}
	for _, u := range txn.Update {
		ids = append(ids, u.ID)
	}
	ids = append(ids, txn.Cancel...)
	return append(ids, txn.Delete...)
}

// checkRequirements fails on the first requirement recs do not meet.
func checkRequirements(req []norn.Requirement, recs map[string]*rec) error {
	for i, r := range req {
		got := recs[r.ID]
		var version uint64
		if got != nil {
			version = got.Version
		}
		if err := r.Check(got != nil, version); err != nil {
			return fieldErr(fmt.Sprintf("require[%d]", i), err)
		}
	}
	return nil
}

// txnPlan is what a transaction's updates, cancels and deletes do to the
// locked tasks recs: one change per task, in the order first touched.
type txnPlan struct {
	recs               map[string]*rec
	changes            map[string]*change
	order              []*change
	updated, cancelled []*rec
	deleted            map[string]bool
}

// cur is the task as the transaction has changed it so far (nil: missing).
func (p *txnPlan) cur(id string) *rec {
	if c := p.changes[id]; c != nil {
		return c.cur
	}
	if r := p.recs[id]; r != nil {
		return r.clone()
	}
	return nil
}

func (p *txnPlan) record(r *rec, kind norn.EventKind, h *norn.HistoryEntry) {
	c := p.changes[r.ID]
	if c == nil {
		c = &change{old: p.recs[r.ID], cur: r}
		p.changes[r.ID] = c
		p.order = append(p.order, c)
	}
	c.kind = kind
	if h != nil {
		c.hist = append(c.hist, *h)
	}
}

// decide applies the updates, then the cancels, then checks the deletes.
func (p *txnPlan) decide(txn norn.Txn, now time.Time, w *wakes) error {
	for i, u := range txn.Update {
		field := fmt.Sprintf("update[%d]", i)
		r := p.cur(u.ID)
		if r == nil {
			return fieldErr(field, norn.NotFound(u.ID))
		}
		if err := applyUpdate(r, u.Update, now); err != nil {
			return fieldErr(field, err)
		}
		p.record(r, norn.EventUpdated, nil)
		p.updated = append(p.updated, r)
		w.saw(r.Status)
	}
	for i, id := range txn.Cancel {
		field := fmt.Sprintf("cancel[%d]", i)
		r := p.cur(id)
		if r == nil {
			return fieldErr(field, norn.NotFound(id))
		}
		already, err := norn.CheckCancel(id, r.Status)
		if err != nil {
			return fieldErr(field, err)
		}
		if already {
			p.cancelled = append(p.cancelled, r)
			continue
		}
		h := norn.CancelEntry(r.Status, r.Owner, r.Lease)
		h.Time = now
		r.Status, r.Deadline, r.endedAt, r.pendingDeps = norn.StatusCancelled, time.Time{}, now, 0
		p.record(r, norn.EventKind(norn.TaskCancel), &h)
		p.cancelled = append(p.cancelled, r)
	}
	for i, id := range txn.Delete {
		if p.cur(id) == nil || p.deleted[id] {
			return fieldErr(fmt.Sprintf("delete[%d]", i), norn.NotFound(id))
		}
		p.deleted[id] = true
	}
	return nil
}

// writeTxnPlan writes the plan's changes (compare-and-set on the locked
// rows; the version each carries is recomputed by apply from the locked
// original, plus one write) and deletes.
func (s *Store) writeTxnPlan(ctx context.Context, tx pgx.Tx, p *txnPlan, now time.Time, res *norn.TxnResult, w *wakes) error {
	var writes []*change
	for _, c := range p.order {
		if !p.deleted[c.cur.ID] {
			writes = append(writes, c)
		}
	}
	ar, err := s.apply(ctx, tx, true, now, writes)
	if err != nil {
		return err
	}
	for _, c := range writes {
		if !ar.ok[c.cur.ID] {
			return fmt.Errorf("task %q: %w", c.cur.ID, errConcurrent)
		}
	}
	if len(ar.released) > 0 {
		w.ready = true
	}
	delIDs := make([]string, 0, len(p.deleted))
	for id := range p.deleted {
		delIDs = append(delIDs, id)
	}
	n, err := s.deleteIDs(ctx, tx, now, delIDs)
	res.Deleted = n
	return err
}

// readBackTxn replaces the updated and cancelled tasks of res by their
// stored form (history included), unless they changed again since.
func (s *Store) readBackTxn(ctx context.Context, res *norn.TxnResult) error {
	if len(res.Updated)+len(res.Cancelled) == 0 {
		return nil
	}
	var ids []string
	for _, t := range res.Updated {
		ids = append(ids, t.ID)
	}
	for _, t := range res.Cancelled {
		ids = append(ids, t.ID)
	}
	var full map[string]*rec
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		full, err = s.readFull(ctx, conn, ids)
		return err
	})
	if err != nil {
		return err
	}
	fill := func(ts []*norn.Task) {
		for i, t := range ts {
			if f := full[t.ID]; f != nil && f.Version == t.Version {
				ts[i] = f.task()
			}
		}
	}
	fill(res.Updated)
	fill(res.Cancelled)
	return nil
}

// applyUpdate changes priority, run_at and labels of a not-running task.
func applyUpdate(r *rec, u norn.Update, now time.Time) error {
	if err := u.Check(r.ID, r.Version, r.Status); err != nil {
		return err
	}
	if u.Priority != nil {
		r.Priority = *u.Priority
	}
	if u.Labels != nil {
		r.Labels = u.Labels
		if len(r.Labels) == 0 {
			r.Labels = nil
		}
	}
	if u.RunAt != nil {
		was := r.Status
		r.Status, r.RunAt = norn.MoveRunAt(r.Status, micro(*u.RunAt), now)
		if was != norn.StatusReady && r.Status == norn.StatusReady {
			r.readyAt = now
		}
	}
	return nil
}
