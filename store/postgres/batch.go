package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Batches (norn.Batch) live in {s}.batches: the batch as one JSON
// document plus its state and "waiting" (its callbacks may still fire) as
// columns; members carry the batch in tasks.batch. Joins share-lock the
// batch row and a seal locks it for update, so no member joins a sealed
// batch. The monitor's sweep finds waiting batches with no pending member
// (one probe of tasks_batch each) and fires them one transaction at a
// time, with the batch row locked and its new state written in the same
// transaction as the callbacks: a callback is submitted once however many
// nodes sweep, and its id (norn.BatchCallbackID) would make a second
// submission a duplicate anyway.

// waiting reports whether b's callbacks may still fire.
func waiting(b *norn.Batch) bool {
	return b.State == norn.BatchSealed || (b.State == norn.BatchDone && b.OnSuccess != nil && b.SuccessTask == "")
}

func (s *Store) loadBatch(ctx context.Context, q querier, id string, lock string) (*norn.Batch, error) {
	var doc []byte
	err := q.QueryRow(ctx, s.q(`SELECT doc FROM {s}.batches WHERE id = $1`+lock), id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, norn.BatchNotFound("", id)
	}
	if err != nil {
		return nil, err
	}
	b := new(norn.Batch)
	if err := json.Unmarshal(doc, b); err != nil {
		return nil, fmt.Errorf("postgres: batch %q: %w", id, err)
	}
	return b, nil
}

// storeBatch writes b: a new row (false when the id exists) or, with
// update, the state of an existing one.
func (s *Store) storeBatch(ctx context.Context, q querier, b *norn.Batch, update bool) (bool, error) {
	stored := norn.CloneBatch(b)
	stored.Counts, stored.Total = nil, 0
	doc, err := json.Marshal(stored)
	if err != nil {
		return false, err
	}
	if update {
		_, err = q.Exec(ctx, s.q(`UPDATE {s}.batches SET state = $2, waiting = $3, doc = $4 WHERE id = $1`),
			b.ID, string(b.State), waiting(b), doc)
		return err == nil, err
	}
	tag, err := q.Exec(ctx, s.q(`INSERT INTO {s}.batches (id, state, waiting, created, labels, doc) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO NOTHING`), b.ID, string(b.State), waiting(b), b.Created, jsonOrNil(b.Labels, len(b.Labels) > 0), doc)
	return err == nil && tag.RowsAffected() == 1, err
}

// batchCounts counts the members of the batches ids by status.
func (s *Store) batchCounts(ctx context.Context, q querier, ids []string) (map[string]map[norn.Status]int, error) {
	rows, err := q.Query(ctx, s.q(`SELECT batch, CASE ist WHEN 'batched' THEN 'ready' ELSE ist END, count(*) FROM {s}.tasks WHERE batch = ANY($1) GROUP BY 1, 2`), ids)
	if err != nil {
		return nil, err
	}
	out := map[string]map[norn.Status]int{}
	var id, st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &st, &n}, func() error {
		if out[id] == nil {
			out[id] = map[norn.Status]int{}
		}
		out[id][norn.Status(st)] = n
		return nil
	})
	return out, err
}

// view fills in b's counts.
func view(b *norn.Batch, counts map[norn.Status]int) *norn.Batch {
	b.Total = 0
	for _, n := range counts {
		b.Total += n
	}
	b.Counts = norn.BatchStatuses(counts)
	return b
}

func (s *Store) viewOne(ctx context.Context, q querier, b *norn.Batch) (*norn.Batch, error) {
	c, err := s.batchCounts(ctx, q, []string{b.ID})
	if err != nil {
		return nil, err
	}
	return view(b, c[b.ID]), nil
}

// CreateBatch creates a batch; see norn.BatchAPI.
func (s *Store) CreateBatch(ctx context.Context, nb norn.NewBatch) (*norn.BatchCreated, error) {
	tasks, err := nb.Prepare()
	if err != nil {
		return nil, err
	}
	var out norn.BatchCreated
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		out = norn.BatchCreated{}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		b := &norn.Batch{ID: nb.ID, State: norn.BatchOpen, Labels: nb.Labels, OnSuccess: nb.OnSuccess,
			OnComplete: nb.OnComplete, Created: micro(now)}
		created, err := s.storeBatch(ctx, tx, b, false)
		if err != nil {
			return err
		}
		var members int
		if created {
			// A refusal rolls the insert back with the transaction.
			if err := tx.QueryRow(ctx, s.q(`SELECT count(*) FROM {s}.tasks WHERE batch = $1`), nb.ID).Scan(&members); err != nil {
				return err
			}
		}
		if err := norn.CheckNewBatch(nb.ID, !created, members); err != nil {
			return err
		}
		if len(tasks) > 0 {
			if out.Tasks, err = s.submitIn(ctx, tx, "tasks", tasks); err != nil {
				return err
			}
		}
		if nb.Seal {
			b.State, b.Sealed = norn.BatchSealed, b.Created
			if _, err := s.storeBatch(ctx, tx, b, true); err != nil {
				return err
			}
		}
		out.Batch, err = s.viewOne(ctx, tx, b)
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	s.wakeForSubmitted(out.Tasks)
	return &out, nil
}

// GetBatch returns a batch with its members' counts.
func (s *Store) GetBatch(ctx context.Context, id string) (*norn.Batch, error) {
	if err := norn.ValidateBatchID("id", id); err != nil {
		return nil, err
	}
	var out *norn.Batch
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		b, err := s.loadBatch(ctx, conn, id, "")
		if err != nil {
			return err
		}
		out, err = s.viewOne(ctx, conn, b)
		return err
	})
	return out, mapErr(err)
}

// ListBatches lists batches in id order.
func (s *Store) ListBatches(ctx context.Context, q norn.BatchQuery) ([]*norn.Batch, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	out := []*norn.Batch{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		rows, err := conn.Query(ctx, s.q(`SELECT doc FROM {s}.batches WHERE id > $1 AND ($2 = '' OR state = $2)
	AND ($3::jsonb IS NULL OR labels @> $3::jsonb) ORDER BY id LIMIT $4`),
			q.After, string(q.State), jsonOrNil(q.Labels, len(q.Labels) > 0), q.PageLimit())
		if err != nil {
			return err
		}
		docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(docs))
		for _, doc := range docs {
			b := new(norn.Batch)
			if err := json.Unmarshal(doc, b); err != nil {
				return fmt.Errorf("postgres: batch: %w", err)
			}
			out = append(out, b)
			ids = append(ids, b.ID)
		}
		counts, err := s.batchCounts(ctx, conn, ids)
		for _, b := range out {
			view(b, counts[b.ID])
		}
		return err
	})
	return out, mapErr(err)
}

// SealBatch seals a batch; the sweep fires it once no member is pending.
func (s *Store) SealBatch(ctx context.Context, id string) (*norn.Batch, error) {
	if err := norn.ValidateBatchID("id", id); err != nil {
		return nil, err
	}
	var out *norn.Batch
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		b, err := s.loadBatch(ctx, tx, id, " FOR UPDATE")
		if err != nil {
			return err
		}
		if b.State == norn.BatchOpen {
			now, err := s.dbNow(ctx, tx)
			if err != nil {
				return err
			}
			b.State, b.Sealed = norn.BatchSealed, micro(now)
			if _, err := s.storeBatch(ctx, tx, b, true); err != nil {
				return err
			}
			s.sweepWake.fire()
		}
		out, err = s.viewOne(ctx, tx, b)
		return err
	})
	return out, mapErr(err)
}

// DeleteBatch deletes a batch, then with members its members (the batch
// first, so deleting its pending members cannot fire it).
func (s *Store) DeleteBatch(ctx context.Context, id string, members bool) (int, error) {
	if err := norn.ValidateBatchID("id", id); err != nil {
		return 0, err
	}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, s.q(`DELETE FROM {s}.batches WHERE id = $1`), id)
		if err == nil && tag.RowsAffected() == 0 {
			err = norn.BatchNotFound("", id)
		}
		return err
	})
	if err != nil || !members {
		return 0, mapErr(err)
	}
	n, err := s.DeleteMatching(ctx, norn.Filter{Batch: id})
	return int(n), err
}

// dueBatchesSQL finds waiting batches with no pending member; sealed ones
// fire on_complete (and on_success if all completed), done ones only
// on_success, once no member failed any more.
const dueBatchesSQL = `SELECT b.id FROM {s}.batches b WHERE b.waiting AND b.id > $1
	AND NOT EXISTS (SELECT 1 FROM {s}.tasks t WHERE t.batch = b.id AND t.ist IN ('scheduled', 'blocked', 'ready', 'batched', 'running'))
	AND (b.state = 'sealed' OR NOT EXISTS (SELECT 1 FROM {s}.tasks t WHERE t.batch = b.id AND t.ist <> 'completed'))
	ORDER BY b.id LIMIT 100`

// fireBatches fires every due batch, one transaction each.
func (s *Store) fireBatches(ctx context.Context, rep *norn.SweepReport) error {
	after := ""
	for {
		var ids []string
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			rows, err := conn.Query(ctx, s.q(dueBatchesSQL), after)
			if err != nil {
				return err
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		for _, id := range ids {
			if err := s.fireBatch(ctx, id, rep); err != nil {
				// A callback that can no longer be submitted must not stop
				// the other batches; the batch is tried again next sweep.
				s.cfg.Logger.Error("norn: batch callback failed; the batch stays as it is", "batch", id, "err", err)
			}
		}
		after = ids[len(ids)-1]
	}
}

// fireBatch submits the callbacks norn.BatchFiring decides for batch id,
// with the batch row locked (another node firing it is skipped).
func (s *Store) fireBatch(ctx context.Context, id string, rep *norn.SweepReport) error {
	var subs []norn.Submitted
	var kinds []string
	var done bool
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		subs, kinds, done = nil, nil, false
		b, err := s.loadBatch(ctx, tx, id, " FOR UPDATE SKIP LOCKED")
		if errors.Is(err, norn.ErrNotFound) {
			return nil // deleted, or being fired by another node
		}
		if err != nil {
			return err
		}
		counts, err := s.batchCounts(ctx, tx, []string{id})
		if err != nil {
			return err
		}
		complete, success := norn.BatchFiring(b, counts[id])
		if !complete && !success {
			return nil
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		ids := map[string]string{}
		for _, c := range []struct {
			kind string
			on   bool
		}{{norn.CallbackComplete, complete}, {norn.CallbackSuccess, success}} {
			nt, ok := norn.BatchCallback(b, c.kind, counts[id])
			if !c.on || !ok {
				continue
			}
			res, err := s.submitIn(ctx, tx, "on_"+c.kind, []norn.NewTask{nt})
			if err != nil {
				return err
			}
			ids[c.kind] = res[0].Task.ID
			if !res[0].Duplicate {
				subs = append(subs, res[0])
				kinds = append(kinds, c.kind)
			}
		}
		done = complete
		norn.FinishBatch(b, micro(now), counts[id], complete, ids[norn.CallbackComplete], ids[norn.CallbackSuccess])
		_, err = s.storeBatch(ctx, tx, b, true)
		return err
	})
	if err != nil {
		return err
	}
	rep.Callbacks += len(kinds)
	s.wakeForSubmitted(subs)
	if o := s.cfg.Observer; o != nil && (done || len(kinds) > 0) {
		o.BatchFired(id, done, kinds)
	}
	return nil
}

// ImportBatches writes batches as they are; see norn.TaskImporter.
func (s *Store) ImportBatches(ctx context.Context, bs []*norn.Batch) (int, error) {
	n := 0
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		n = 0
		for _, b := range bs {
			created, err := s.storeBatch(ctx, tx, b, false)
			if err != nil {
				return err
			}
			if created {
				n++
			}
		}
		return nil
	})
	return n, mapErr(err)
}
